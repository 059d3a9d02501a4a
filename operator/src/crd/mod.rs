//! The `InferenceService` custom resource (`infergate.dev/v1alpha1`, short name `infsvc`).
//!
//! The Rust types are the source of the CRD: doc comments become the field descriptions that
//! `kubectl explain` prints, serde defaults become schema defaults, and the `x_kube(validation)`
//! attributes become CEL rules (`x-kubernetes-validations`) the API server enforces and that
//! [`crate::admission`] evaluates client-side. `crds/inferenceservices.infergate.dev.yaml` is
//! generated from them (`infergate-operator crd`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EnvFromSource, EnvVar, LocalObjectReference,
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

mod autoscaling;
mod network;
mod storage;
mod tracing;

pub use autoscaling::{AutoscalingEngine, AutoscalingMetric, AutoscalingSpec, MonitoringSpec};
pub use network::NetworkPolicySpec;
pub use storage::ModelStorage;
pub use tracing::{TraceLevel, TracingSpec};

/// API group of the custom resource.
pub const GROUP: &str = "infergate.dev";
/// API version of the custom resource.
pub const VERSION: &str = "v1alpha1";
/// Kind of the custom resource.
pub const KIND: &str = "InferenceService";

/// An inference service: a model server container with the Infergate sidecar in front of it,
/// which gives clients the Open Inference Protocol (KServe V2) with Triton's extensions over REST
/// and gRPC.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infergate.dev",
    version = "v1alpha1",
    kind = "InferenceService",
    plural = "inferenceservices",
    shortname = "infsvc",
    category = "inference",
    namespaced,
    status = "InferenceServiceStatus",
    derive = "PartialEq",
    doc = "An InferenceService runs a model server with the Infergate sidecar in front of it: the Open Inference Protocol (KServe V2) with Triton's extensions over REST and gRPC.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the service answers inference requests"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Pods ready to serve"
    ),
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".status.model.name",
        description = "The model served (the first one when there are several)"
    ),
    printcolumn(
        name = "Extensions",
        type_ = "string",
        json_path = ".status.extensionsSummary",
        description = "Requested protocol extensions that are active, e.g. 3/4 active"
    ),
    printcolumn(
        name = "URL",
        type_ = "string",
        json_path = ".status.url.rest",
        description = "REST address inside the cluster",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(
        "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ).message("metadata.name must be a DNS-1035 label of at most 63 characters (it names the Service and a label value)"),
    cel
)]
#[x_kube(
    validation = Rule::new(
        "!self.extensions.cudaSharedMemory.enabled || (has(self.model.resources) && has(self.model.resources.limits) && self.model.resources.limits.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-')))"
    ).message("extensions.cudaSharedMemory needs a GPU: set model.resources.limits['nvidia.com/gpu'] (or a nvidia.com/mig-* resource)").field_path(".extensions.cudaSharedMemory"),
    validation = Rule::new(
        "!(self.upstream.grpcPort in [self.sidecar.ports.http, self.sidecar.ports.grpc, self.sidecar.ports.metrics, self.sidecar.ports.admin])"
    ).message("upstream.grpcPort collides with a sidecar port (sidecar.ports); start the model server on another port").field_path(".upstream.grpcPort"),
    validation = Rule::new(
        "self.model.ports.all(p, !(p.containerPort in [self.sidecar.ports.http, self.sidecar.ports.grpc, self.sidecar.ports.metrics, self.sidecar.ports.admin, self.upstream.grpcPort]))"
    ).message("a model.ports entry collides with a sidecar port or upstream.grpcPort").field_path(".model.ports"),
    validation = Rule::new(
        "!has(self.upstream.restPort) || !(self.upstream.restPort in [self.sidecar.ports.http, self.sidecar.ports.grpc, self.sidecar.ports.metrics, self.sidecar.ports.admin, self.upstream.grpcPort])"
    ).message("upstream.restPort collides with a sidecar port (sidecar.ports) or upstream.grpcPort").field_path(".upstream.restPort"),
    validation = Rule::new(
        "!has(self.upstream.restPort) || self.model.ports.all(p, p.containerPort != self.upstream.restPort)"
    ).message("a model.ports entry uses upstream.restPort, which is declared for you").field_path(".model.ports"),
    validation = Rule::new(
        "!self.extensions.sequence.enabled || self.extensions.sequence.routing != 'SingleReplica' || self.replicas <= 1"
    ).message("extensions.sequence.routing SingleReplica allows at most one replica").field_path(".replicas")
)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceSpec {
    /// Number of pods. 0 stops the service and keeps its objects. The scale subresource (kubectl
    /// scale, HorizontalPodAutoscaler) sets this field.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The model server container: the image and how to start it. The sidecar reaches it on
    /// loopback at upstream.grpcPort.
    pub model: ModelContainer,
    /// How the sidecar talks to the model server.
    #[serde(default)]
    pub upstream: Upstream,
    /// Models to serve, with the settings the model server cannot tell the sidecar. Empty: every
    /// model the model server lists as ready. Names are unique.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub models: Vec<ModelSettings>,
    /// The Infergate sidecar: image, ports, resources, logging, and how it is added to the pod.
    #[serde(default)]
    pub sidecar: SidecarSpec,
    /// Protocol extensions that need something from the pod (shared memory, GPU access) or from
    /// the Service (sequence routing). Binary tensor data, classification, statistics and the
    /// model repository are always on.
    #[serde(default)]
    pub extensions: Extensions,
    /// The Service clients connect to. It exposes only the sidecar's HTTP and gRPC ports.
    #[serde(default)]
    pub service: ServiceSpec,
    /// Pod-level settings passed through to the pod template: scheduling, identity, extra volumes
    /// and extra containers (for example in-pod clients that use shared memory).
    #[serde(default)]
    pub pod: PodOverrides,
    /// How a change of the pods rolls out.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// Pods added and removed with the load, by a HorizontalPodAutoscaler or KEDA. Unset:
    /// spec.replicas pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// How the sidecars' metrics are found: the metrics port on the Service, a PodMonitor.
    #[serde(default)]
    pub monitoring: MonitoringSpec,
    /// A NetworkPolicy admitting clients, the operator and scrapers to the pods, for namespaces
    /// that deny ingress by default. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicySpec>,
}

fn default_replicas() -> i32 {
    1
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

/// The model server container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
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
    /// declared for you. They are not added to the Service.
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

fn default_pre_stop_sleep() -> i64 {
    5
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

/// TCP probes of the model server on upstream.grpcPort.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelProbes {
    /// Probe the model server. The kubelet connects to the pod's IP, so a model server bound to
    /// 127.0.0.1 only must turn this off.
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

/// How the sidecar reaches the model server.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("self.protocol != 'rest' || has(self.restPort)").message("upstream.protocol rest needs upstream.restPort, the model server's V2 REST port").field_path(".restPort")
)]
#[serde(rename_all = "camelCase")]
pub struct Upstream {
    /// Protocol the model server speaks: grpc (V2 gRPC, inference.GRPCInferenceService; REST as
    /// well for small calls where restPort is set), or rest (V2 REST only, at restPort, for a
    /// model server without gRPC: every call goes over HTTP/1.1, and grpcPort is not used).
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// The model server's V2 gRPC port on loopback. It must differ from the sidecar's ports
    /// (8000-8003 by default), so Triton needs --grpc-port=9001 (and its HTTP and metrics ports
    /// moved as well).
    #[serde(default = "default_upstream_grpc_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub grpc_port: i32,
    /// The model server's V2 REST port on loopback, where it has one (Triton: its --http-port,
    /// 9000 once moved off the sidecar's ports). Inference calls that carry at most 64 KiB of
    /// tensor data then go over it, the others over gRPC: Triton answers small requests sooner
    /// over REST. Unset: every call over gRPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub rest_port: Option<i32>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            protocol: UpstreamProtocol::default(),
            grpc_port: default_upstream_grpc_port(),
            rest_port: None,
        }
    }
}

fn default_upstream_grpc_port() -> i32 {
    9001
}

/// Wire protocol between the sidecar and the model server.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// V2 gRPC.
    #[default]
    Grpc,
    /// V2 REST only, at upstream.restPort.
    Rest,
}

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

/// The Infergate sidecar container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSpec {
    /// Sidecar image. Unset: the operator's default (its --sidecar-image setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy: Always, IfNotPresent or Never. Unset: the Kubernetes default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Native: a native sidecar (an init container with restartPolicy Always, Kubernetes >=
    /// 1.29), which starts before the model server and stops after it. Regular: an ordinary
    /// container, for clusters or meshes that do not handle native sidecars.
    #[serde(default)]
    pub mode: SidecarMode,
    /// The sidecar's ports.
    #[serde(default)]
    pub ports: SidecarPorts,
    /// CPU and memory requests and limits. Unset: requests of 100m CPU and 128Mi memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Log level: error, warn, info, debug or trace.
    #[serde(default)]
    pub log_level: LogLevel,
    /// Log format: json (one object per line) or text.
    #[serde(default)]
    pub log_format: LogFormat,
    /// User ID the sidecar runs as. Clients that create system shared-memory regions (with
    /// tritonclient's mode 0600) must run as the same user for the sidecar to open them.
    #[serde(default = "default_sidecar_user")]
    #[schemars(range(min = 1))]
    pub run_as_user: i64,
    /// Threads that serve requests (the sidecar's server.worker_threads). Unset: 1, which
    /// suits a sidecar sharing its cores with the model server; 0: one per CPU the container
    /// may use. More help when large JSON tensors arrive many at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1024))]
    pub worker_threads: Option<u32>,
    /// OpenTelemetry tracing of sampled requests, exported over OTLP/HTTP. Unset: tracing off
    /// (the trace settings API answers as Triton's default mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingSpec>,
}

impl Default for SidecarSpec {
    fn default() -> Self {
        SidecarSpec {
            image: None,
            image_pull_policy: None,
            mode: SidecarMode::default(),
            ports: SidecarPorts::default(),
            resources: None,
            log_level: LogLevel::default(),
            log_format: LogFormat::default(),
            run_as_user: default_sidecar_user(),
            worker_threads: None,
            tracing: None,
        }
    }
}

fn default_sidecar_user() -> i64 {
    65532
}

/// How the sidecar is added to the pod.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SidecarMode {
    /// An init container with restartPolicy Always.
    #[default]
    Native,
    /// A regular container next to the model server.
    Regular,
}

/// Ports of the sidecar. The Service exposes http and grpc only.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new(
        "self.http != self.grpc && self.http != self.metrics && self.http != self.admin && self.grpc != self.metrics && self.grpc != self.admin && self.metrics != self.admin"
    ).message("sidecar ports must be pairwise different")
)]
#[serde(rename_all = "camelCase")]
pub struct SidecarPorts {
    /// REST (HTTP/1.1 and h2c): the Open Inference Protocol's routes.
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub http: i32,
    /// gRPC: inference.GRPCInferenceService.
    #[serde(default = "default_grpc_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub grpc: i32,
    /// Prometheus metrics (GET /metrics). Not in the Service.
    #[serde(default = "default_metrics_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub metrics: i32,
    /// Admin status for the operator (GET /status). Not in the Service.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin: i32,
}

impl Default for SidecarPorts {
    fn default() -> Self {
        SidecarPorts {
            http: default_http_port(),
            grpc: default_grpc_port(),
            metrics: default_metrics_port(),
            admin: default_admin_port(),
        }
    }
}

fn default_http_port() -> i32 {
    8000
}
fn default_grpc_port() -> i32 {
    8001
}
fn default_metrics_port() -> i32 {
    8002
}
fn default_admin_port() -> i32 {
    8003
}

/// Sidecar log level.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// The default.
    #[default]
    Info,
    /// Verbose.
    Debug,
    /// Very verbose.
    Trace,
}

impl LogLevel {
    /// The sidecar configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// Sidecar log format.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Human-readable lines.
    Text,
}

impl LogFormat {
    /// The sidecar configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

/// Protocol extensions that need the pod or the Service to be set up for them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    /// Client system shared memory (Triton's system_shared_memory extension).
    #[serde(default)]
    pub system_shared_memory: SystemSharedMemory,
    /// Client CUDA shared memory (Triton's cuda_shared_memory extension).
    #[serde(default)]
    pub cuda_shared_memory: CudaSharedMemory,
    /// Sequences (stateful models) and how their requests reach one pod.
    #[serde(default)]
    pub sequence: Sequence,
}

/// System shared memory: clients in the same pod register POSIX shared-memory regions and pass
/// tensors through them instead of the socket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new(
        "!self.enabled || (has(self.size) && isQuantity(self.size) && quantity(self.size).isGreaterThan(quantity('0')))"
    ).message("systemSharedMemory.size must be a quantity greater than 0 (e.g. 1Gi) when systemSharedMemory is enabled").field_path(".size")
)]
#[serde(rename_all = "camelCase")]
pub struct SystemSharedMemory {
    /// Let clients register regions (off by default, as in Triton). Mounts a memory-backed
    /// emptyDir of the given size at /dev/shm in every container of the pod.
    #[serde(default)]
    pub enabled: bool,
    /// Size of /dev/shm, a quantity such as 2Gi. Required when enabled. The pages written there
    /// count against the memory limit of the container that writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub size: Option<String>,
}

/// CUDA shared memory: clients in the same pod pass GPU buffers by CUDA IPC handle.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CudaSharedMemory {
    /// Request the extension. Needs a GPU on the model server (model.resources.limits); puts the
    /// pod's containers into one process namespace, which CUDA IPC needs.
    #[serde(default)]
    pub enabled: bool,
}

/// Sequence (stateful model) settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sequence {
    /// Request the extension: the service serves sequence models.
    #[serde(default)]
    pub enabled: bool,
    /// How the requests of one sequence reach the same pod. Stream: clients send a sequence on
    /// one gRPC stream (ModelStreamInfer), which stays on one pod. ClientIP: the Service pins a
    /// client address to a pod (breaks behind proxies that hide client addresses).
    /// SingleReplica: at most one replica. Sidecar: the sidecars route each sequence to the
    /// replica that holds it, over REST, gRPC and streams alike, and keep sequences in flight
    /// where they are while replicas come and go (a headless Service `<name>-peers` lists the
    /// pods; the sidecars watch its EndpointSlices).
    #[serde(default)]
    pub routing: SequenceRouting,
    /// With ClientIP routing, how long a client stays pinned to its pod after its last request,
    /// in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub client_ip_timeout_seconds: Option<i32>,
}

impl Sequence {
    /// Whether the sidecars route sequences between the replicas.
    pub fn routed_by_sidecars(&self) -> bool {
        self.enabled && self.routing == SequenceRouting::Sidecar
    }
}

/// How the requests of a sequence reach one pod.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SequenceRouting {
    /// One gRPC stream per sequence.
    #[default]
    Stream,
    /// Service session affinity by client IP.
    #[serde(rename = "ClientIP")]
    ClientIp,
    /// One replica only.
    SingleReplica,
    /// The sidecars route each sequence to the replica that holds it (docs/sequences.md).
    Sidecar,
}

/// How a change of the pods rolls out (the Deployment's strategy).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.strategy == 'RollingUpdate' || (!has(self.maxSurge) && !has(self.maxUnavailable))")
        .message("maxSurge and maxUnavailable apply to strategy RollingUpdate only"),
)]
pub struct RolloutSpec {
    /// RollingUpdate replaces the pods a few at a time; Recreate stops them all, then starts the
    /// new ones (a gap in service).
    #[serde(default)]
    pub strategy: RolloutStrategy,
    /// Pods that may run above replicas during a rollout: a number or a percentage. Unset: 0
    /// when the model requests a GPU (a rollout then needs no spare GPU), else 25%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_surge: Option<IntOrString>,
    /// Pods that may be unavailable during a rollout: a number or a percentage. Unset: 1 when the
    /// model requests a GPU (with one replica, the old pod stops before the new one starts),
    /// else 25%. maxSurge and maxUnavailable may not both be 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_unavailable: Option<IntOrString>,
    /// Seconds a rollout may go without progress before the Deployment reports
    /// ProgressDeadlineExceeded, which status shows in RolledOut and lastFailureInfo. Unset: the
    /// Deployment's default, 600. Pods that pull large images or load large models need more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,
}

impl RolloutSpec {
    /// The rolling update's (maxSurge, maxUnavailable), `None` for Recreate. Unset ones follow
    /// the model's resources: with a GPU, Kubernetes' default (25% each, so one extra pod for one
    /// replica) would need a spare GPU for every rollout and wait for ever where there is none,
    /// so the old pod goes first (surge 0, unavailable 1).
    pub fn rolling_limits(&self, gpu: bool) -> Option<(IntOrString, IntOrString)> {
        if self.strategy == RolloutStrategy::Recreate {
            return None;
        }
        let default = |with_gpu: i32| {
            if gpu {
                IntOrString::Int(with_gpu)
            } else {
                IntOrString::String("25%".to_string())
            }
        };
        Some((
            self.max_surge.clone().unwrap_or_else(|| default(0)),
            self.max_unavailable.clone().unwrap_or_else(|| default(1)),
        ))
    }
}

/// Whether a rollout limit is a count of at least 0 or a whole percentage ("25%").
pub fn is_rollout_limit(limit: &IntOrString) -> bool {
    match limit {
        IntOrString::Int(n) => *n >= 0,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())),
    }
}

/// Whether a rollout limit lets no pod through (0 or 0%).
pub fn is_zero(limit: &IntOrString) -> bool {
    match limit {
        IntOrString::Int(n) => *n == 0,
        IntOrString::String(s) => s.trim_end_matches('%').parse::<u64>() == Ok(0),
    }
}

/// The Deployment strategy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutStrategy {
    /// Replace pods a few at a time (maxSurge, maxUnavailable).
    #[default]
    RollingUpdate,
    /// Stop every pod, then start the new ones.
    Recreate,
}

/// The client Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Service type: ClusterIP, NodePort or LoadBalancer.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service (load-balancer settings, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Service type.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    /// Reachable inside the cluster.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through a cloud load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Schemas for embedded Kubernetes types. Their full schemas would repeat long descriptions (every
// Quantity carries a page of text) and grow the CRD past what client-side apply can store, so
// they are kept open here and validated when the Deployment is created.

/// An object whose fields are kept as written.
fn free_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A list of objects kept as written, atomic.
fn objects_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// A list of objects kept as written, each with a unique name (a list-map keyed by name).
fn named_objects_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 64,
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {
                "type": "string", "minLength": 1, "maxLength": 253,
                "description": "Name, unique in the list.",
            }},
            "x-kubernetes-preserve-unknown-fields": true,
        },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// A count of pods or a percentage of replicas, as a Deployment's rollingUpdate takes them. A
/// structural schema cannot tell the two forms apart (no types inside anyOf), so which values
/// are allowed is checked when the resource is rendered (`validate::spec`).
fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true})
}

/// ResourceRequirements with quantities as integers or strings. Dynamic resource claims are not
/// offered yet (the pod has no resourceClaims to point at).
fn resources_schema(_: &mut SchemaGenerator) -> Schema {
    let quantities = |what: &str| {
        json!({
            "description": format!("{what}, by resource name (cpu, memory, nvidia.com/gpu, ...): a quantity such as 500m, 2Gi or 1."),
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {"x-kubernetes-int-or-string": true},
        })
    };
    json_schema!({
        "type": "object",
        "properties": {
            "limits": quantities("Most the container may use"),
            "requests": quantities("What the scheduler reserves for the container"),
        },
    })
}

/// The CustomResourceDefinition, as kube derives it from the types above.
pub fn crd() -> CustomResourceDefinition {
    InferenceService::crd()
}

/// The CustomResourceDefinition as JSON, tidied for people who read it: descriptions written as
/// wrapped doc comments become one paragraph per blank-line-separated block, and integral bounds
/// (`minimum: 0.0`) are written as integers.
pub fn crd_json() -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(crd())?;
    tidy(&mut value, None);
    Ok(value)
}

/// The CustomResourceDefinition as YAML: what `infergate-operator crd` prints and
/// `crds/inferenceservices.infergate.dev.yaml` holds.
pub fn crd_yaml() -> Result<String, String> {
    let value = crd_json().map_err(|e| e.to_string())?;
    crate::yaml::to_string(&value)
}

/// The openAPIV3Schema of the (only) version, as JSON.
pub fn openapi_schema() -> Result<serde_json::Value, String> {
    let value = crd_json().map_err(|e| e.to_string())?;
    value
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .ok_or_else(|| "the CRD has no openAPIV3Schema".to_string())
}

fn tidy(value: &mut serde_json::Value, key: Option<&str>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                tidy(v, Some(k.as_str()));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| tidy(v, None)),
        Value::String(s) if key == Some("description") => *s = unwrap_lines(s),
        Value::Number(n) if matches!(key, Some("minimum" | "maximum")) => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *value = Value::from(f as i64);
            }
        }
        _ => {}
    }
}

/// Joins the lines of each paragraph with spaces; paragraphs stay separated by a blank line.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}
