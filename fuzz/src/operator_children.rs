//! The operator's spec → children builder: a YAML stream goes through admission (defaults,
//! schema, CEL rules) and every admitted InferenceService is rendered into its ConfigMap,
//! Deployment, Service and PodDisruptionBudget.
//!
//! Checked: what admission accepts renders, unless the render-time rules refuse it
//! (`RenderError::Invalid`); the sidecar never rejects the configuration the operator wrote for
//! an admitted resource; every child is owned by the resource.

use infergate_operator::input::{self, Document};
use infergate_operator::render::{self, OperatorSettings, RenderError};

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(documents) = input::parse(text) else {
        return;
    };
    let settings = OperatorSettings::default();
    for document in documents {
        let Document::InferenceService(mut isvc) = document else {
            continue;
        };
        isvc.metadata
            .uid
            .get_or_insert_with(|| "00000000-0000-0000-0000-000000000001".to_string());
        match render::build_children(&isvc, &settings) {
            Ok(children) => {
                let values = children
                    .to_values()
                    .unwrap_or_else(|e| panic!("children to JSON: {e}"));
                for value in values {
                    assert!(
                        value
                            .pointer("/metadata/ownerReferences/0/uid")
                            .is_some_and(|uid| uid.is_string()),
                        "child without an owner: {value}"
                    );
                }
            }
            Err(RenderError::Invalid { .. }) => {}
            Err(e) => panic!("admitted resource does not render: {e}"),
        }
    }
}
