//! `spec.autoscaling` and `spec.monitoring`: how many pods, decided by what, and how the sidecars'
//! metrics are found.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::objects_list;

/// Pods added and removed with the load. The autoscaler owns the Deployment's replicas, and
/// spec.replicas (and kubectl scale) no longer applies.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.minReplicas <= self.maxReplicas")
        .message("autoscaling.minReplicas must not exceed maxReplicas"),
    validation = Rule::new("self.engine == 'KEDA' || !has(self.extraTriggers) || size(self.extraTriggers) == 0")
        .message("autoscaling.extraTriggers are KEDA triggers: they need engine KEDA"),
    validation = Rule::new("self.engine != 'KEDA' || self.metric == 'CPU' || has(self.prometheusAddress)")
        .message("autoscaling with KEDA on a sidecar metric needs prometheusAddress"),
)]
pub struct AutoscalingSpec {
    /// Fewest pods. 0 needs spec.scaleToZero (the operator scales to zero when idle and an
    /// activator holds calls meanwhile; the autoscaler works from 1 up), or engine KEDA alone
    /// (KEDA scales to zero, and with no activator the Service has no endpoints at zero: a
    /// trigger that sees demand outside the pods, extraTriggers, must bring it back).
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,
    /// Most pods.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// HPA: a HorizontalPodAutoscaler (autoscaling/v2). KEDA: a KEDA ScaledObject (keda.sh/v1alpha1;
    /// KEDA must be installed).
    #[serde(default)]
    pub engine: AutoscalingEngine,
    /// What is measured: CPU (utilization of the pod's CPU requests; every container needs a CPU
    /// request), PendingRequests (nv_inference_pending_request_count, requests in the sidecar not
    /// yet answered, per pod) or QueueTimeMs (time requests wait before they run, per request).
    #[serde(default)]
    pub metric: AutoscalingMetric,
    /// The target per pod: a CPU utilization in percent (default 80), pending requests (default
    /// 4) or milliseconds of queue time (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub target: Option<i32>,
    /// KEDA only: the Prometheus server that scrapes the sidecars (e.g.
    /// http://prometheus.monitoring.svc:9090), for PendingRequests and QueueTimeMs. The HPA reads
    /// them through the custom metrics API instead (a Prometheus adapter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub prometheus_address: Option<String>,
    /// KEDA only: more triggers of the ScaledObject, as KEDA writes them (type, metadata, ...),
    /// e.g. one that sees demand while the service is scaled to zero.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub extra_triggers: Vec<Value>,
}

fn one() -> i32 {
    1
}

/// The autoscaler that owns the replicas.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutoscalingEngine {
    /// A HorizontalPodAutoscaler (autoscaling/v2).
    #[default]
    HPA,
    /// A KEDA ScaledObject (keda.sh/v1alpha1).
    KEDA,
}

/// What the autoscaler measures.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutoscalingMetric {
    /// CPU utilization of the pods' requests.
    #[default]
    CPU,
    /// Requests not yet answered, per pod (the sidecar's nv_inference_pending_request_count).
    PendingRequests,
    /// Milliseconds a request waits before it runs (from the sidecar's
    /// nv_inference_queue_duration_us and nv_inference_request_success).
    QueueTimeMs,
}

impl AutoscalingSpec {
    /// The target, or the metric's default.
    pub fn target_or_default(&self) -> i32 {
        self.target.unwrap_or(match self.metric {
            AutoscalingMetric::CPU => 80,
            AutoscalingMetric::PendingRequests => 4,
            AutoscalingMetric::QueueTimeMs => 50,
        })
    }
}

/// How the sidecars' metrics are found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// Add the sidecar's metrics port (named metrics) to the Service, for scrapers that find
    /// targets through Services (a ServiceMonitor, for example). Off by default: a LoadBalancer
    /// Service would publish the metrics.
    #[serde(default)]
    pub service_port: bool,
    /// Render a PodMonitor (monitoring.coreos.com/v1, the Prometheus Operator's) that scrapes the
    /// metrics port of every pod, with the labels namespace, pod and inferenceservice.
    #[serde(default)]
    pub pod_monitor: bool,
    /// Labels of the PodMonitor, e.g. release: prometheus (what the Prometheus's
    /// podMonitorSelector selects).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_monitor_labels: BTreeMap<String, String>,
    /// Scrape interval of the PodMonitor, e.g. 15s. Unset: the Prometheus's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m)$"))]
    pub interval: Option<String>,
}
