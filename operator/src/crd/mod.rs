//! The `InferenceService` custom resource (`infergate.dev/v1alpha1`, short name `infsvc`).
//!
//! The Rust types are the source of the CRD: doc comments become the field descriptions that
//! `kubectl explain` prints, serde defaults become schema defaults, and the `x_kube(validation)`
//! attributes become CEL rules (`x-kubernetes-validations`) the API server enforces and that
//! [`crate::admission`] evaluates client-side. `crds/inferenceservices.infergate.dev.yaml` is
//! generated from them (`infergate-operator crd`).
//!
//! Each file has one job; the CEL rules stay on the type they constrain:
//!
//! - `spec.rs`: the resource: group, version, kind, `InferenceServiceSpec` (kube derives
//!   `InferenceService` from it), printer columns, the scale subresource, and the rules that span
//!   several sections of the spec.
//! - `model.rs`: `spec.model`, the model server container, its pull policy and probes.
//! - `storage.rs`: `spec.model.storage`, how the model in `storageUri` is fetched and mounted.
//! - `upstream.rs`: `spec.upstream`, how the sidecar reaches the model server.
//! - `models.rs`: `spec.models`, per-model settings the model server cannot give the sidecar.
//! - `sidecar.rs`: `spec.sidecar`, the sidecar container, its ports and logging.
//! - `tracing.rs`: `spec.sidecar.tracing`, OpenTelemetry tracing of sampled requests.
//! - `extensions.rs`: `spec.extensions`, shared memory and sequences.
//! - `service.rs`: `spec.service`, the client Service.
//! - `pod.rs`: `spec.pod`, pod-level settings passed through to the pod template.
//! - `rollout.rs`: `spec.rollout`, the Deployment's strategy and the checks on its limits.
//! - `autoscaling.rs`: `spec.autoscaling` and `spec.monitoring`.
//! - `canary.rs`: `spec.canary`, a second variant given a share of the calls.
//! - `scale_to_zero.rs`: `spec.scaleToZero`, zero pods when idle, an activator holding calls.
//! - `network.rs`: `spec.networkPolicy`.
//! - `auth.rs`: `spec.auth`, who may call the control APIs.
//! - `tls.rs`: `spec.tls`, the certificate of the client ports, from a Secret or cert-manager.
//! - `status.rs`: `status`, what the operator observed, and the condition types.
//! - `schema.rs`: the open schemas given to embedded Kubernetes types (`schema_with`).
//! - `generate.rs`: the CRD derived from the types, tidied, as JSON and as YAML.

mod auth;
mod autoscaling;
mod canary;
mod extensions;
mod generate;
mod model;
mod models;
mod network;
mod pod;
mod rollout;
mod scale_to_zero;
mod schema;
mod service;
mod sidecar;
mod spec;
mod status;
mod storage;
mod tls;
mod tracing;
mod upstream;

pub use auth::{
    AuthSpec, CONTROL_APIS, ControlApis, ControlFrom, ControlKey, InferenceAuth, InferenceFrom,
};
pub use autoscaling::{AutoscalingEngine, AutoscalingMetric, AutoscalingSpec, MonitoringSpec};
pub use canary::CanarySpec;
pub use extensions::{CudaSharedMemory, Extensions, Sequence, SequenceRouting, SystemSharedMemory};
pub use generate::{crd, crd_json, crd_yaml, openapi_schema};
pub use model::{ModelContainer, ModelListen, ModelProbes, PullPolicy};
pub use models::{DynamicBatching, LabelFiles, ModelSettings};
pub use network::NetworkPolicySpec;
pub use pod::PodOverrides;
pub use rollout::{RolloutSpec, RolloutStrategy, is_rollout_limit, is_zero};
pub use scale_to_zero::ScaleToZeroSpec;
pub use service::{GatewayRoutes, ServiceSpec, ServiceType};
pub use sidecar::{LogFormat, LogLevel, SidecarMode, SidecarPorts, SidecarSpec};
pub use spec::{GROUP, InferenceService, InferenceServiceSpec, KIND, VERSION};
pub use status::{
    CallCounts, CanaryStatus, ConditionType, ExtensionState, ExtensionStatus, FailureInfo,
    Implementation, InferenceServiceStatus, ModelStatus, PortTls, ScaleToZeroStatus, ServiceUrls,
    TlsStatus, VariantCalls,
};
pub use storage::{ModelStorage, SecretKeyRef, UriFrom};
pub use tls::{IssuerKind, IssuerRef, TlsSpec, certificate_secret_name};
pub use tracing::{TraceLevel, TracingSpec};
pub use upstream::{Upstream, UpstreamProtocol};
