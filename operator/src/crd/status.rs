//! `status`: what the operator observed (written by the controller only), and the condition types
//! it reports.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the operator observed. Written by the controller only.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceStatus {
    /// The metadata.generation of the InferenceService this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the service (the scale subresource's status replicas).
    #[serde(default)]
    pub replicas: i32,
    /// Pods ready to serve.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the pods, in string form (the scale subresource's selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Addresses of the service inside the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<ServiceUrls>,
    /// The model served (the first one when there are several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelStatus>,
    /// Conditions: Ready, Available, RolledOut, ModelReady, ExtensionsReady and Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// One entry per protocol extension, as the pods' sidecars report it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub extensions: Vec<ExtensionStatus>,
    /// Requested extensions that are active, e.g. "3/4 active" (the Extensions column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions_summary: Option<String>,
    /// The most recent failure seen, in plain words: a refused spec or child object, pods the
    /// cluster will not start, a model that could not be fetched, a container that keeps
    /// crashing. It stays after the service recovers (the conditions say what holds now) and is
    /// replaced by the next failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_info: Option<FailureInfo>,
    /// TLS on the client ports, as the sidecars report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStatus>,
    /// The canary, where spec.canary gives one: its pods, and the calls of each variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// Scale to zero, where spec.scaleToZero asks for it: where the service is, and how long its
    /// last start from zero took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<ScaleToZeroStatus>,
}

/// Scale to zero as the operator sees it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZeroStatus {
    /// Active (pods up), ScaledToZero (none; the activator holds the calls that come) or Starting
    /// (scaled up from zero, no pod ready yet).
    pub state: String,
    /// When the service entered this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// Seconds the last start from zero took: from the scale-up to the first ready pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cold_start_seconds: Option<f64>,
    /// The activator's pods ready to hold calls.
    #[serde(default)]
    pub activator_ready_replicas: i32,
    /// Calls the activator's pods hold now, as they last reported (while the service starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_calls: Option<i64>,
    /// The least quiet time the pods reported: seconds since the last inference call, open
    /// stream or live sequence on the busiest pod. The service scales to zero at idleSeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_seconds: Option<i64>,
}

/// The canary: its share, its pods, and each variant's calls as the service's sidecars (which
/// split them) counted them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The percent of the calls the spec gives the canary.
    pub traffic_percent: i32,
    /// The canary's pods.
    #[serde(default)]
    pub replicas: i32,
    /// The canary's pods ready to serve. While none is, the service's pods serve every call.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Calls each variant answered and failed, summed over the service's ready pods since each
    /// started (counts restart with a pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<VariantCalls>,
}

/// Calls of the service's own model and of the canary's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VariantCalls {
    /// Served by the service's pods.
    pub stable: CallCounts,
    /// Served by the canary's.
    pub canary: CallCounts,
}

/// Calls answered and failed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CallCounts {
    /// Calls answered.
    pub success: u64,
    /// Calls that failed.
    pub failure: u64,
}

/// TLS on the client ports, as the ready pods' sidecars report it on their admin port.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// The TLS column: Off, On or Mutual where every reporting pod serves both ports alike;
    /// Pending while no pod has reported; Mixed while pods disagree (during a rollout).
    pub summary: String,
    /// The REST port's TLS.
    pub http: PortTls,
    /// The gRPC port's TLS.
    pub grpc: PortTls,
    /// The metrics port's TLS (never mutual: scrapers present no certificate).
    #[serde(default)]
    pub metrics: PortTls,
    /// When the first of the certificates the pods serve expires (RFC 3339), as the sidecars
    /// read it from the certificate they loaded last: a renewal that reached the pods moves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
}

/// One port's TLS across the reporting pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortTls {
    /// Off, On, Mutual, Pending or Mixed (as the summary).
    pub state: String,
    /// How many pods reported on this port.
    #[serde(default)]
    pub pods_reporting: i32,
}

/// A failure the operator saw, with its cause.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailureInfo {
    /// The kind of failure: InvalidSpec, Conflict, ChildRejected, PodsRejected,
    /// ProgressDeadlineExceeded, Unschedulable, ImagePullFailed, ContainerConfigError,
    /// ModelFetchFailed, InitContainerFailed or ContainerCrashing.
    pub reason: String,
    /// What went wrong, in words, with the cluster's own message.
    pub message: String,
    /// Where: the object, or the pod and container, e.g. "Deployment/resnet" or
    /// "Pod/resnet-7d9c-x2k4p, container storage-initializer".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Exit code of the container that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The InferenceService's generation when the failure was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// When the failure was first seen.
    pub time: Time,
}

/// Addresses of the service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceUrls {
    /// REST base URL, e.g. http://NAME.NAMESPACE.svc:8000.
    pub rest: String,
    /// gRPC target, e.g. NAME.NAMESPACE.svc:8001.
    pub grpc: String,
}

/// The model served.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// Model name, as in /v2/models/{name}.
    pub name: String,
    /// Whether the model is ready on every ready pod.
    #[serde(default)]
    pub ready: bool,
    /// How many models the service serves.
    #[serde(default)]
    pub count: i32,
}

/// Condition types of an InferenceService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// Available, RolledOut, ModelReady, and every requested extension active.
    Ready,
    /// The Deployment has its minimum of available pods.
    Available,
    /// Every pod runs the current spec: no pod of an earlier generation is left.
    RolledOut,
    /// The sidecars report the models ready.
    ModelReady,
    /// Every requested extension is active.
    ExtensionsReady,
    /// Something works only in part (an extension degraded, some pods not reporting).
    Degraded,
    /// No pod runs: the service scaled to zero, and the activator holds calls (spec.scaleToZero
    /// only).
    ScaledToZero,
}

impl ConditionType {
    /// Every condition type, in the order status lists them.
    pub const ALL: [ConditionType; 6] = [
        ConditionType::Ready,
        ConditionType::Available,
        ConditionType::RolledOut,
        ConditionType::ModelReady,
        ConditionType::ExtensionsReady,
        ConditionType::Degraded,
    ];

    /// The `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Available => "Available",
            ConditionType::RolledOut => "RolledOut",
            ConditionType::ModelReady => "ModelReady",
            ConditionType::ExtensionsReady => "ExtensionsReady",
            ConditionType::Degraded => "Degraded",
            ConditionType::ScaledToZero => "ScaledToZero",
        }
    }
}

/// State of one protocol extension.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionStatus {
    /// Extension name as /v2 lists it: binary_tensor_data, classification, sequence,
    /// system_shared_memory, cuda_shared_memory, ...
    pub name: String,
    /// Active, Degraded, Pending, Unsupported or Disabled.
    pub state: ExtensionState,
    /// Where the extension is implemented: sidecar or upstream (the model server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    /// Whether the spec asks for this extension.
    #[serde(default)]
    pub requested: bool,
    /// Why the extension is in this state, in one phrase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many pods reported on this extension.
    #[serde(default)]
    pub pods_reporting: i32,
}

/// State of an extension.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtensionState {
    /// Works on every reporting pod.
    Active,
    /// Works on some pods or in part.
    Degraded,
    /// No pod has reported yet.
    Pending,
    /// Neither the sidecar nor the model server can provide it here.
    Unsupported,
    /// Switched off by the spec.
    Disabled,
}

/// Where the extension is implemented: sidecar, or upstream (the model server, passed through).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    /// In the sidecar.
    Sidecar,
    /// In the model server, passed through.
    Upstream,
}
