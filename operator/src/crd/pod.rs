//! `spec.pod`: pod-level settings passed through to the pod template.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, LocalObjectReference, PodSecurityContext, Toleration,
    TopologySpreadConstraint, Volume,
};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::schema::{free_object, named_objects_map, objects_list};

/// Pod-level settings passed through to the pod template. The operator's own labels, volumes
/// and containers win over these.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Extra labels of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Node labels the pods must run on, e.g. {nvidia.com/gpu.present: "true"}.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods (Kubernetes Toleration objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the pods (a Kubernetes Affinity object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub affinity: Option<Affinity>,
    /// Priority class of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Runtime class of the pods, e.g. nvidia on clusters that run GPU pods under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Whether every container of the pods gets a token of their service account. Unset or
    /// false: none but the sidecar, and the sidecar only where it needs one (it watches its
    /// peers' EndpointSlices with extensions.sequence.routing Sidecar, it checks callers'
    /// identities with auth.inference.from Identity); no container gets a credential to the API
    /// server it does not use. Set true for a model server that calls the API server itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    /// Secrets for pulling the images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Pod security context (a Kubernetes PodSecurityContext object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub security_context: Option<PodSecurityContext>,
    /// Seconds between the start of termination and the kill; cover the preStop sleep, the
    /// longest request and the sidecar's drain. Where the sidecars route sequences, what is
    /// left past the preStop sleep and 10 s is how long a terminating pod waits for the
    /// sequences it holds to end.
    #[serde(default = "default_grace")]
    #[schemars(range(min = 0))]
    pub termination_grace_period_seconds: i64,
    /// Extra volumes (Kubernetes Volume objects), e.g. the model repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "named_objects_map")]
    pub volumes: Vec<Volume>,
    /// Extra containers (Kubernetes Container objects), e.g. clients that use shared memory with
    /// the sidecar. They get /dev/shm when extensions.systemSharedMemory is enabled, and the same
    /// security defaults as the model server for what their securityContext leaves unset. The
    /// names model and infergate are taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "named_objects_map")]
    pub containers: Vec<Container>,
    /// Init containers (Kubernetes Container objects) that run after the model is fetched from
    /// model.storageUri and before the sidecar and the model server start, e.g. to convert or
    /// warm a model. They get the same security defaults as the model server. The names model,
    /// infergate and storage-initializer are taken; the fetched model is the volume
    /// infergate-model-storage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "named_objects_map")]
    pub init_containers: Vec<Container>,
    /// How the pods spread over zones and nodes (Kubernetes TopologySpreadConstraint objects).
    /// Their labelSelector usually names the pods' app.kubernetes.io/instance label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
}

impl Default for PodOverrides {
    fn default() -> Self {
        PodOverrides {
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            priority_class_name: None,
            runtime_class_name: None,
            service_account_name: None,
            automount_service_account_token: None,
            image_pull_secrets: Vec::new(),
            security_context: None,
            termination_grace_period_seconds: default_grace(),
            volumes: Vec::new(),
            containers: Vec::new(),
            init_containers: Vec::new(),
            topology_spread_constraints: Vec::new(),
        }
    }
}

fn default_grace() -> i64 {
    60
}
