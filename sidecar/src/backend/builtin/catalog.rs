//! The catalog: each model's configuration (Triton's `config.pbtxt` form) and implementation.

use std::collections::HashMap;
use std::sync::Arc;

use infergate_proto::inference::ModelConfig;
use infergate_proto::{DataType, model_config};

use super::compute::{Builtin, Implementation};
use crate::core::classify::parse_labels;
use crate::core::model::Model;
use crate::core::repository::{ModelLoader, POLL_FAILED};
use crate::error::{Error, Result};

const SIMPLE: &str = r#"
name: "simple"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"#;

/// `simple` over INT8, as in Triton's example model repository (`simple_int8`).
const SIMPLE_INT8: &str = r#"
name: "simple_int8"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT8 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT8 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT8 dims: [ 16 ] }
]
"#;

const SIMPLE_STRING: &str = r#"
name: "simple_string"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"#;

const SIMPLE_IDENTITY: &str = r#"
name: "simple_identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"#;

/// Triton's decoupled example model (its repeat backend's `repeat_int32`).
const REPEAT_INT32: &str = r#"
name: "repeat_int32"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"#;

/// Triton's identity-backend test model: an INT32 identity that waits `execute_delay_ms`
/// (a configuration parameter, 0 here; a load with a configuration can change it) per request.
const CUSTOM_IDENTITY_INT32: &str = r#"
name: "custom_identity_int32"
max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "0" } } ]
"#;

const CLASSIFIER: &str = r#"
name: "classifier"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"#;

/// Label files of the built-in models, by the name their configs give.
const LABEL_FILES: &[(&str, &str)] = &[("labels.txt", "label0\nlabel1\nlabel2\nlabel3\n")];

/// A sequence model's configuration: INPUT/OUTPUT INT32 [1], the given strategy and controls.
fn sequence_config(name: &str, strategy: &str, controls: &[(&str, &str)]) -> String {
    let controls: Vec<String> = controls
        .iter()
        .map(|(input, control)| format!("{{ name: \"{input}\" control [ {{ {control} }} ] }}"))
        .collect();
    format!(
        "name: \"{name}\"\nmax_batch_size: 8\nsequence_batching {{\n  max_sequence_idle_microseconds: 5000000\n  {strategy}\n  control_input [ {} ]\n}}\ninput [ {{ name: \"INPUT\" data_type: TYPE_INT32 dims: [ 1 ] }} ]\noutput [ {{ name: \"OUTPUT\" data_type: TYPE_INT32 dims: [ 1 ] }} ]\ninstance_group [ {{ count: 1 kind: KIND_CPU }} ]\n",
        controls.join(", ")
    )
}

const START: (&str, &str) = (
    "START",
    "kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]",
);
const END: (&str, &str) = (
    "END",
    "kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ]",
);
const READY: (&str, &str) = (
    "READY",
    "kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ]",
);
const CORRID_U64: (&str, &str) = (
    "CORRID",
    "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64",
);
const CORRID_STRING: (&str, &str) = (
    "CORRID",
    "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING",
);
const OLDEST: &str = "oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 1000 }";

/// The built-in models.
pub struct Catalog {
    entries: Vec<(String, String, Implementation)>,
}

impl Default for Catalog {
    fn default() -> Self {
        let mut entries = vec![
            (
                "simple".to_string(),
                SIMPLE.to_string(),
                Implementation::AddSubInt32,
            ),
            (
                "simple_int8".to_string(),
                SIMPLE_INT8.to_string(),
                Implementation::AddSubInt8,
            ),
            (
                "simple_string".to_string(),
                SIMPLE_STRING.to_string(),
                Implementation::AddSubString,
            ),
            (
                "simple_identity".to_string(),
                SIMPLE_IDENTITY.to_string(),
                Implementation::Identity,
            ),
            (
                "simple_sequence".to_string(),
                sequence_config("simple_sequence", "", &[START, READY]),
                Implementation::SequenceSimple,
            ),
            (
                "simple_dyna_sequence".to_string(),
                sequence_config(
                    "simple_dyna_sequence",
                    OLDEST,
                    &[START, END, READY, CORRID_U64],
                ),
                Implementation::SequenceDyna,
            ),
            (
                "sequence_accumulator".to_string(),
                sequence_config("sequence_accumulator", "", &[START, END, READY, CORRID_U64]),
                Implementation::Accumulate,
            ),
            (
                "simple_string_dyna_sequence".to_string(),
                sequence_config(
                    "simple_string_dyna_sequence",
                    OLDEST,
                    &[START, END, READY, CORRID_STRING],
                ),
                Implementation::AccumulateStringId,
            ),
            (
                "classifier".to_string(),
                CLASSIFIER.to_string(),
                Implementation::Identity,
            ),
            (
                "custom_identity_int32".to_string(),
                CUSTOM_IDENTITY_INT32.to_string(),
                Implementation::DelayedIdentity,
            ),
            (
                "repeat_int32".to_string(),
                REPEAT_INT32.to_string(),
                Implementation::Repeat,
            ),
        ];
        for dt in DataType::ALL {
            let name = format!("identity_{}", dt.as_protocol().to_ascii_lowercase());
            let config_type = dt.to_config().as_str_name();
            let text = format!(
                "name: \"{name}\"\nmax_batch_size: 0\ninput [ {{ name: \"INPUT0\" data_type: {config_type} dims: [ -1 ] }} ]\noutput [ {{ name: \"OUTPUT0\" data_type: {config_type} dims: [ -1 ] }} ]\n"
            );
            entries.push((name, text, Implementation::Identity));
        }
        Catalog { entries }
    }
}

impl Catalog {
    pub fn model_names(&self) -> Vec<&str> {
        self.entries.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    fn entry(&self, name: &str) -> Option<&(String, String, Implementation)> {
        self.entries.iter().find(|(n, _, _)| n == name)
    }
}

impl ModelLoader for Catalog {
    fn names(&self) -> Vec<String> {
        self.entries.iter().map(|(n, _, _)| n.clone()).collect()
    }

    fn load(&self, name: &str, config_override: Option<&serde_json::Value>) -> Result<Model> {
        let (_, text, implementation) = self
            .entry(name)
            .ok_or_else(|| Error::not_found(format!("'{name}' is not a built-in model")))?;
        let base = model_config::parse_text(text).map_err(|e| {
            Error::internal(format!("built-in config of '{name}' does not parse: {e}"))
        })?;
        let mut config = match config_override {
            None => base.clone(),
            Some(overlay) => apply_override(&base, overlay)?,
        };
        crate::core::model::normalize_config(&mut config);
        let mut labels = HashMap::new();
        for output in config
            .output
            .iter()
            .filter(|o| !o.label_filename.is_empty())
        {
            let text = LABEL_FILES
                .iter()
                .find(|(file, _)| *file == output.label_filename)
                .map(|(_, text)| *text)
                .ok_or_else(|| {
                    Error::invalid_arg(format!("label file '{}' not found", output.label_filename))
                })?;
            labels.insert(output.name.clone(), parse_labels(text));
        }
        // Triton validates a configuration while it polls the repository: one it refuses (a
        // priority level out of range, say) fails the poll, with the reason in its log alone.
        Model::new(config, 1, Arc::new(Builtin::new(*implementation)), labels)
            .map_err(|e| poll_failed(name, &e.message))
    }
}

/// A load that fails as Triton's failed poll of its repository: INTERNAL, the reason logged.
fn poll_failed(model: &str, reason: &str) -> Error {
    tracing::warn!(%model, error = reason, "the model's configuration does not apply");
    Error::internal(POLL_FAILED)
}

/// Applies a load request's configuration on top of the model's own: fields the override
/// sets replace the model's. Inputs and outputs must stay those the implementation computes.
fn apply_override(base: &ModelConfig, overlay: &serde_json::Value) -> Result<ModelConfig> {
    // Triton converts the override to a model configuration while it polls the repository;
    // an override that is not one fails that poll, with the details in its log alone.
    let poll_failed = |reason: &str| poll_failed(&base.name, reason);
    if !overlay.is_object() {
        return Err(poll_failed(
            "the configuration override must be a JSON object",
        ));
    }
    let config = model_config::overlay(base, overlay)
        .map_err(|e| poll_failed(&format!("invalid configuration: {e}")))?;
    if config.name != base.name {
        return Err(Error::invalid_arg(format!(
            "the configuration names model '{}' but '{}' was requested",
            config.name, base.name
        )));
    }
    let io = |c: &ModelConfig| {
        let inputs: Vec<(String, i32)> = c
            .input
            .iter()
            .map(|i| (i.name.clone(), i.data_type))
            .collect();
        let outputs: Vec<(String, i32)> = c
            .output
            .iter()
            .map(|o| (o.name.clone(), o.data_type))
            .collect();
        (inputs, outputs)
    };
    if io(&config) != io(base) {
        return Err(Error::invalid_arg(
            "the built-in implementation needs the model's own inputs and outputs",
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_loads() {
        let catalog = Catalog::default();
        assert_eq!(catalog.names().len(), 25);
        for name in catalog.names() {
            let model = catalog.load(&name, None).unwrap();
            assert_eq!(model.name, name);
            assert!(model.config.version_policy.is_some());
        }
    }

    #[tokio::test]
    async fn custom_identity_waits_the_configured_delay() {
        use crate::core::model::Execution;
        use crate::tensor::Tensor;
        use bytes::Bytes;
        use std::time::{Duration, Instant};

        let catalog = Catalog::default();
        let overlay =
            serde_json::json!({"parameters": {"execute_delay_ms": {"string_value": "60"}}});
        let model = catalog
            .load("custom_identity_int32", Some(&overlay))
            .unwrap();
        let data = Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let inputs = [Tensor::new(
            "INPUT0",
            DataType::Int32,
            vec![1, 2],
            data.clone(),
        )];
        let outputs = ["OUTPUT0".to_string()];
        let execution = Execution {
            model: &model,
            inputs: &inputs,
            input_regions: &[],
            outputs: &outputs,
            batch_size: 1,
            parameters: &Default::default(),
            output_shm: &[],
            classification: &[],
            trace: None,
        };
        let started = Instant::now();
        let produced = model.backend.execute(execution).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(60));
        assert_eq!(produced[0].data, data);
    }

    #[test]
    fn override_changes_batch_size_but_not_io() {
        let catalog = Catalog::default();
        let m = catalog
            .load("simple", Some(&serde_json::json!({"max_batch_size": "16"})))
            .unwrap();
        assert_eq!(m.max_batch_size, 16);
        let err = catalog
            .load("simple", Some(&serde_json::json!({"input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}]})))
            .unwrap_err();
        assert!(err.message.contains("inputs and outputs"), "{err}");
    }

    #[test]
    fn override_that_is_not_a_configuration_fails_as_a_poll() {
        let catalog = Catalog::default();
        for overlay in [
            serde_json::json!({"max_batch_size": "sixteen"}),
            serde_json::json!([1, 2]),
        ] {
            let err = catalog.load("simple", Some(&overlay)).unwrap_err();
            assert_eq!(
                err.message, "failed to poll from model repository",
                "{overlay}"
            );
        }
    }
}
