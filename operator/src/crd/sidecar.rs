//! `spec.sidecar`: the Infergate sidecar container, its ports and its logging (its tracing is in
//! `tracing.rs`).

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::resources_schema;
use super::{PullPolicy, TracingSpec};

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
    /// Seconds after which a client connection is asked to go (HTTP/2 GOAWAY), give or take a
    /// tenth, however busy it is: a long-lived client (a gRPC channel) reconnects, and so
    /// reaches pods added by a scale-out. Calls open on it, streams included, finish there.
    /// Unset: the sidecar's default (300); 0: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_connection_age_seconds: Option<u32>,
    /// Seconds the calls still open on a connection asked to go for its age may take before it
    /// is closed under them. Unset or 0: as long as they need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_connection_age_grace_seconds: Option<u32>,
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
            max_connection_age_seconds: None,
            max_connection_age_grace_seconds: None,
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
    /// The admin port: the kubelet's probes (/livez, /readyz), the preStop drain (loopback only)
    /// and the operator's status (GET /status). Not in the Service.
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
