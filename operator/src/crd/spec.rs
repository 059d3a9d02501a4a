//! The resource itself: its group, version and kind, `InferenceServiceSpec` (from which kube
//! derives `InferenceService`), the printer columns `kubectl get` shows, the scale subresource, and
//! the CEL rules that tie several of the spec's sections together. Each section of the spec has a
//! file of its own.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{
    AuthSpec, AutoscalingSpec, CanarySpec, Extensions, InferenceServiceStatus, ModelContainer,
    ModelSettings, MonitoringSpec, NetworkPolicySpec, PodOverrides, RolloutSpec, ScaleToZeroSpec,
    ServiceSpec, SidecarSpec, TlsSpec, Upstream,
};

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
        name = "TLS",
        type_ = "string",
        json_path = ".status.tls.summary",
        description = "TLS on the client ports as the sidecars serve it: Off, On or Mutual"
    ),
    printcolumn(
        name = "Cert-Expires",
        type_ = "string",
        json_path = ".status.tls.notAfter",
        description = "When the first certificate the sidecars serve expires",
        priority = "1"
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
        "!has(self.canary) || self.canary.model.ports.all(p, !(p.containerPort in [self.sidecar.ports.http, self.sidecar.ports.grpc, self.sidecar.ports.metrics, self.sidecar.ports.admin, self.upstream.grpcPort]) && (!has(self.upstream.restPort) || p.containerPort != self.upstream.restPort))"
    ).message("a canary.model.ports entry collides with a sidecar port, upstream.grpcPort or upstream.restPort").field_path(".canary.model.ports"),
    validation = Rule::new(
        "!self.extensions.sequence.enabled || self.extensions.sequence.routing != 'SingleReplica' || self.replicas <= 1"
    ).message("extensions.sequence.routing SingleReplica allows at most one replica").field_path(".replicas"),
    validation = Rule::new(
        "!has(self.autoscaling) || self.autoscaling.minReplicas >= 1 || self.autoscaling.engine == 'KEDA' || has(self.scaleToZero)"
    ).message("autoscaling.minReplicas 0 (scale to zero) needs scaleToZero, or engine KEDA").field_path(".autoscaling.minReplicas"),
    validation = Rule::new(
        "!has(self.scaleToZero) || has(self.autoscaling) || self.replicas >= 1"
    ).message("scaleToZero needs replicas of at least 1: the pods it starts from zero").field_path(".replicas")
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
    /// The NetworkPolicy admitting clients, the operator and scrapers to the pods' sidecar ports
    /// and nothing to the model server's. Unset: rendered with its defaults (clients from
    /// anywhere, the operator's pods, scrapers of the monitoring namespace); enabled false: none.
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,
    /// TLS on the sidecar's HTTP and gRPC ports (and its metrics port), from a Secret or from
    /// cert-manager. Unset: plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Who may call the control APIs (model repository, logging, trace), and inference. Unset:
    /// the control APIs the pod's own containers only, inference anyone.
    #[serde(default)]
    pub auth: AuthSpec,
    /// A canary: a second model server container on pods of its own (`<name>-canary`), given
    /// trafficPercent of the calls, split per call by the sidecars. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// Scale to zero: after scaleToZero.idleSeconds without calls, zero pods; the client Service
    /// then points at an activator that holds calls, starts a pod and passes them on. Unset: the
    /// service never goes below spec.replicas (or autoscaling.minReplicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<ScaleToZeroSpec>,
}

fn default_replicas() -> i32 {
    1
}

impl InferenceServiceSpec {
    /// Whether the sidecars dial other pods' sidecars: to route sequences among themselves, or
    /// to give the canary its share. They then watch EndpointSlices, and need the access for it.
    pub fn sidecars_dial_peers(&self) -> bool {
        self.extensions.sequence.routed_by_sidecars() || self.canary.is_some()
    }

    /// The TLS the metrics port serves, where it serves one (`tls.metrics`).
    pub fn metrics_tls(&self) -> Option<&TlsSpec> {
        self.tls.as_ref().filter(|t| t.metrics)
    }
}
