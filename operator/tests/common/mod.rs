//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

pub mod mock;

use std::path::PathBuf;

use infergate_operator::crd::InferenceService;
use infergate_operator::input::{self, Document};
use infergate_operator::render::Children;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// The uid test resources carry (a resource stored by an API server always has one).
pub const UID: &str = "3f6c1c9e-4a8e-4d6b-9a57-2f1d0c4b7e21";

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Parses one InferenceService through admission (defaults, schema, CEL) and gives it a uid and
/// a namespace.
pub fn isvc(yaml: &str) -> InferenceService {
    let docs =
        input::parse(yaml).unwrap_or_else(|e| panic!("invalid test resource:\n{}", e.join("\n")));
    let mut isvc = match docs.into_iter().next() {
        Some(Document::InferenceService(isvc)) => *isvc,
        other => panic!("not an InferenceService: {other:?}"),
    };
    isvc.metadata.uid = Some(UID.to_string());
    isvc.metadata
        .namespace
        .get_or_insert_with(|| "ml".to_string());
    isvc
}

/// An InferenceService named `name` with `spec` (YAML, indented by two spaces) under `spec:`.
pub fn with_spec(name: &str, spec: &str) -> InferenceService {
    isvc(&format!(
        "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata:\n  name: {name}\nspec:\n{spec}"
    ))
}

/// The smallest valid spec body: a Triton model server with its gRPC port on 9001.
pub const MINIMAL: &str = "  model:\n    image: nvcr.io/nvidia/tritonserver:24.10-py3\n    args: [tritonserver, --model-repository=/models, --grpc-port=9001, --http-port=9000, --metrics-port=9002]\n";

/// Every InferenceService manifest in examples/, with its file name.
pub fn example_files() -> Vec<(String, String)> {
    let dir = repo_root().join("examples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.lines().any(|l| l == "kind: InferenceService") {
                out.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    text,
                ));
            }
        }
    }
    out.sort();
    out
}

/// The pod template of the rendered Deployment.
pub fn pod(children: &Children) -> &PodSpec {
    children
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

/// Every container of the pod, init (native sidecar) containers first.
pub fn all_containers(pod: &PodSpec) -> Vec<&Container> {
    pod.init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter())
        .collect()
}

/// The pod volume called `name`.
pub fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// A Deployment as the server reports it once rolled out: `replicas` pods of the current spec,
/// `ready` of them ready, and its `Available` condition.
pub fn deployment_with_status(available: bool, replicas: i32, ready: i32) -> Deployment {
    Deployment {
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            ..DeploymentSpec::default()
        }),
        status: Some(DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(replicas),
            ready_replicas: Some(ready),
            conditions: Some(vec![DeploymentCondition {
                type_: "Available".into(),
                status: if available { "True" } else { "False" }.into(),
                message: Some("from the Deployment".into()),
                ..DeploymentCondition::default()
            }]),
            ..DeploymentStatus::default()
        }),
        ..Deployment::default()
    }
}

/// The sidecar's configuration in the rendered ConfigMap, validated as the sidecar would.
pub fn sidecar_config(children: &Children) -> infergate_config::SidecarConfig {
    let text = &children.config_map.data.as_ref().unwrap()["config.yaml"];
    let config = infergate_config::yaml::from_str(text).unwrap();
    config.validate(&[]).unwrap();
    config
}

/// The kinds of the children, in the order they are applied.
pub fn applied_kinds(children: &Children) -> Vec<String> {
    children
        .to_values()
        .unwrap()
        .iter()
        .map(|v| v["kind"].as_str().unwrap().to_string())
        .collect()
}
