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
