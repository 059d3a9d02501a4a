//! `spec.model`: the model server container, its image pull policy and its probes.

use k8s_openapi::api::core::v1::{
    ContainerPort, EnvFromSource, EnvVar, ResourceRequirements, SecurityContext, VolumeMount,
};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ModelStorage;
use super::schema::{free_object, named_objects_map, objects_list, resources_schema};

/// The model server container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    // Credentials never ride in storageUri: the pod spec, the init container's arguments and its
    // log would show them (operator/src/storage_uri.rs makes the same checks).
    validation = Rule::new(
        "!has(self.storageUri) || !self.storageUri.matches('^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@')"
    ).message("model.storageUri carries a user name or password (user:pass@): give credentials in model.storage.secretName, or the whole URI in model.storage.uriFrom").field_path(".storageUri"),
    validation = Rule::new(
        "!has(self.storageUri) || !self.storageUri.matches('(?i)[?&](x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential|signature|awsaccesskeyid|sig|token|access_token)(=|&|#|$)')"
    ).message("model.storageUri carries a signature or token in its query: give the whole URI (a presigned URL) in model.storage.uriFrom").field_path(".storageUri"),
    validation = Rule::new(
        "!has(self.storageUri) || !has(self.storage) || !has(self.storage.uriFrom)"
    ).message("give model.storageUri or model.storage.uriFrom, not both").field_path(".storage.uriFrom"),
    validation = Rule::new(
        "!has(self.storageUri) || !has(self.storage) || !has(self.storage.secretName) || !self.storageUri.startsWith('http://')"
    ).message("model.storageUri is http:// and model.storage.secretName gives it credentials, which would travel in clear: use https://").field_path(".storageUri"),
)]
pub struct ModelContainer {
    /// Container image of the model server, e.g. nvcr.io/nvidia/tritonserver:24.10-py3.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Image pull policy: Always, IfNotPresent or Never. Unset: the Kubernetes default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Entrypoint, replacing the image's. Unset: the image's entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments. Start the model server's V2 gRPC endpoint on upstream.grpcPort and keep its
    /// other ports off the sidecar's (Triton: --grpc-port=9001 --http-port=9000
    /// --metrics-port=9002).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables (Kubernetes EnvVar objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "named_objects_map")]
    pub env: Vec<EnvVar>,
    /// Environment variables from ConfigMaps and Secrets (Kubernetes EnvFromSource objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub env_from: Vec<EnvFromSource>,
    /// CPU, memory and GPU requests and limits, e.g. limits: {nvidia.com/gpu: 1}. Memory limits
    /// count the pages the model server writes into /dev/shm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// More ports the model server listens on (its REST or metrics ports), declared on the
    /// container. They must differ from the sidecar's ports and upstream.grpcPort, which is
    /// declared for you with listen: Pod. They are not added to the Service.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub ports: Vec<ContainerPort>,
    /// Volume mounts of the model server, e.g. the model repository from a volume in
    /// pod.volumes. /dev/shm is managed through extensions.systemSharedMemory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Container security context (a Kubernetes SecurityContext). Every field left unset here and
    /// in pod.securityContext gets the restricted Pod Security Standard's setting: no privilege
    /// escalation, all capabilities dropped, seccomp RuntimeDefault, and the sidecar's user and
    /// group (sidecar.runAsUser) with runAsNonRoot. A field set here is kept; runAsUser 0 runs as
    /// root (runAsNonRoot is then not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub security_context: Option<SecurityContext>,
    /// Where the model is fetched from before the model server starts, instead of (or besides)
    /// the image or a volume: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, https://HOST/PATH (one
    /// file; .tar, .tar.gz, .tgz and .zip are unpacked), http://..., or pvc://CLAIM/PATH (the
    /// claim mounted read-only, no copy). The model container finds it at storage.mountPath
    /// (/mnt/models): point the model server there, e.g. tritonserver
    /// --model-repository=/mnt/models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub storage_uri: Option<String>,
    /// How the model in storageUri is fetched and mounted.
    #[serde(default)]
    pub storage: ModelStorage,
    /// Where the model server listens. Loopback (the default): only on 127.0.0.1 (pass it the
    /// server's own flag: Triton --http-address=127.0.0.1 --grpc-address=127.0.0.1, MLServer
    /// MLSERVER_HOST=127.0.0.1), so that only the pod's containers reach it and every client goes
    /// through the sidecar; no port of it is declared on the pod, and its probes go through the
    /// sidecar's admin port (/upstream/livez), which connects to it on loopback. Pod: on the
    /// pod's address, for servers that cannot bind loopback; its ports are declared and probed by
    /// the kubelet over TCP, and only a NetworkPolicy keeps other pods from it.
    #[serde(default)]
    pub listen: ModelListen,
    /// Probes of the model server. The pod's readiness comes from the sidecar, which is ready
    /// when the model server is; these probes give the model its start-up budget and restart it
    /// when it stops listening.
    #[serde(default)]
    pub probes: ModelProbes,
    /// Seconds the pod keeps serving after it starts terminating, before the model server is
    /// stopped: its preStop hook asks the sidecar to drain (readiness off, clients sent to other
    /// pods, calls that still arrive answered) and waits this long. 0: no preStop hook, unless
    /// the sidecars route sequences (the pod then still waits for the sequences it holds).
    #[serde(default = "default_pre_stop_sleep")]
    #[schemars(range(min = 0, max = 300))]
    pub pre_stop_sleep_seconds: i64,
}

impl ModelContainer {
    /// Whether it asks for a GPU: a non-zero limit on an extended resource named for GPUs
    /// (`nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/i915`, ...) or a MIG slice.
    pub fn requests_gpu(&self) -> bool {
        let Some(limits) = self.resources.as_ref().and_then(|r| r.limits.as_ref()) else {
            return false;
        };
        limits.iter().any(|(name, quantity)| {
            let gpu = name.contains("gpu") || name.starts_with("nvidia.com/mig-");
            gpu && quantity.0.trim() != "0"
        })
    }
}

fn default_pre_stop_sleep() -> i64 {
    5
}

/// Where the model server listens: Loopback (the default) or Pod.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelListen {
    /// 127.0.0.1 only: reached through the sidecar alone, probed through the sidecar.
    #[default]
    Loopback,
    /// The pod's address: its ports declared, probed by the kubelet over TCP.
    Pod,
}

/// Image pull policy: Always, IfNotPresent or Never. Unset: the Kubernetes default.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull on every start.
    Always,
    /// Pull when the node lacks the image.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// Probes of the model server: that it accepts connections on upstream.grpcPort (restPort for a
/// REST-only server), asked by the sidecar on loopback (listen: Loopback) or by the kubelet
/// over TCP (listen: Pod).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelProbes {
    /// Probe the model server. Off: it is never restarted for not listening, and has no start-up
    /// budget of its own.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Seconds between two checks.
    #[serde(default = "default_probe_period")]
    #[schemars(range(min = 1, max = 300))]
    pub period_seconds: i32,
    /// Start-up budget, in checks: the model server may take periodSeconds ×
    /// startupFailureThreshold to open its gRPC port (default 10 minutes) before it is restarted.
    #[serde(default = "default_startup_failures")]
    #[schemars(range(min = 1))]
    pub startup_failure_threshold: i32,
    /// Consecutive failed checks after start-up before the kubelet restarts the model server.
    #[serde(default = "default_liveness_failures")]
    #[schemars(range(min = 1))]
    pub liveness_failure_threshold: i32,
}

impl Default for ModelProbes {
    fn default() -> Self {
        ModelProbes {
            enabled: true,
            period_seconds: default_probe_period(),
            startup_failure_threshold: default_startup_failures(),
            liveness_failure_threshold: default_liveness_failures(),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_probe_period() -> i32 {
    10
}
fn default_startup_failures() -> i32 {
    60
}
fn default_liveness_failures() -> i32 {
    3
}
