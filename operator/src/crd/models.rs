//! `spec.models`: the settings of each model that the model server cannot tell the sidecar.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Settings of one model that the model server cannot tell the sidecar.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelSettings {
    /// Model name, as in /v2/models/{name}.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    )]
    pub name: String,
    /// Largest batch the model takes, used only when the model server has no model-configuration
    /// endpoint: 0 means the model does not batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_batch_size: Option<i32>,
    /// Label files for the classification extension, from a ConfigMap in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelFiles>,
    /// The sidecar's dynamic batcher, for a model whose server has none (KServe's ModelServer,
    /// MLServer, a Triton model without `dynamic_batching`): requests that arrive together are
    /// sent to the model as one batch, as Triton's dynamic batcher forms them. The model must
    /// take a batch dimension; a model server without a model-configuration endpoint needs
    /// maxBatchSize too. A model whose own configuration has `dynamic_batching` is batched by
    /// its server whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_batching: Option<DynamicBatching>,
}

/// Triton's `dynamic_batching` settings, as the sidecar's batcher takes them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DynamicBatching {
    /// Batch sizes sent as soon as they are reached, each at most the model's maxBatchSize.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(range(min = 1)))]
    pub preferred_batch_size: Vec<i32>,
    /// How long a batch's oldest request waits for more before the batch is sent; 0 sends at
    /// once (batches then form only while the model is busy).
    #[serde(default)]
    #[schemars(range(min = 0, max = 60000000))]
    pub max_queue_delay_microseconds: u64,
    /// Answers in the order their requests were taken into batches.
    #[serde(default)]
    pub preserve_ordering: bool,
}

impl DynamicBatching {
    /// The section in the model configuration's JSON form.
    pub fn to_config(&self) -> serde_json::Value {
        serde_json::json!({
            "preferred_batch_size": self.preferred_batch_size,
            "max_queue_delay_microseconds": self.max_queue_delay_microseconds,
            "preserve_ordering": self.preserve_ordering,
        })
    }
}

/// Classification labels of a model, one label per line, from a ConfigMap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LabelFiles {
    /// Name of the ConfigMap holding the label files. It is mounted read-only into the sidecar;
    /// the pod does not start while a key below is missing from it.
    #[schemars(length(min = 1, max = 253))]
    pub config_map: String,
    /// Output name to the ConfigMap key holding that output's labels, e.g. {fc6_1: labels.txt}.
    #[schemars(extend("minProperties" = 1, "maxProperties" = 64))]
    pub outputs: BTreeMap<String, String>,
}
