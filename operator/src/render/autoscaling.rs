//! The autoscaler of the Deployment: a HorizontalPodAutoscaler (autoscaling/v2) or a KEDA
//! ScaledObject, from `spec.autoscaling`. With either, the Deployment is applied without
//! `replicas`, which the autoscaler owns.
//!
//! The sidecar's metrics keep Triton's names, so rules and dashboards written for Triton apply:
//! `nv_inference_pending_request_count` (a gauge per model) and the counters
//! `nv_inference_queue_duration_us` and `nv_inference_request_success`.
//!
//! - HPA: CPU is a Resource metric; the sidecar's metrics are Pods metrics read through the
//!   custom metrics API (a Prometheus adapter, with the rules in docs/operator.md):
//!   `nv_inference_pending_request_count` (summed over models per pod) and
//!   `infergate_queue_time_ms` (queue time per request, per pod). Both as AverageValue targets.
//! - KEDA: CPU is KEDA's cpu trigger; the sidecar's metrics are prometheus triggers with PromQL
//!   over the pods of this service (labels `namespace` and `pod`, which a PodMonitor and the usual
//!   Kubernetes scrape configurations give): pending requests summed over pods with an
//!   AverageValue target (desired pods = sum / target), queue time per request as a Value target
//!   (desired pods = pods × value / target).

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
    MetricIdentifier, MetricSpec, MetricTarget, PodsMetricSource, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

use super::{Variant, child_meta};
use crate::crd::{AutoscalingEngine, AutoscalingMetric, AutoscalingSpec, InferenceService};

/// The HPA's Pods metric for queue time, as the Prometheus adapter's rule names it.
pub const QUEUE_TIME_METRIC: &str = "infergate_queue_time_ms";
/// The sidecar's gauge of requests not yet answered.
pub const PENDING_METRIC: &str = "nv_inference_pending_request_count";

/// KEDA's ScaledObject resource.
/// The activator's gauge of the calls it holds (docs/sidecar.md, "Activator").
pub const HELD_CALLS_METRIC: &str = "infergate_activator_held_calls";

pub fn scaled_object_resource() -> ApiResource {
    ApiResource {
        group: "keda.sh".to_string(),
        version: "v1alpha1".to_string(),
        api_version: "keda.sh/v1alpha1".to_string(),
        kind: "ScaledObject".to_string(),
        plural: "scaledobjects".to_string(),
    }
}

fn autoscaling(isvc: &InferenceService, engine: AutoscalingEngine) -> Option<&AutoscalingSpec> {
    isvc.spec
        .autoscaling
        .as_ref()
        .filter(|a| a.engine == engine)
}

/// The HorizontalPodAutoscaler `<name>`, when `spec.autoscaling.engine` is HPA (the canary's,
/// `<name>-canary`, from its view of the resource).
pub(super) fn hpa(
    isvc: &InferenceService,
    owner: &OwnerReference,
    variant: Variant,
) -> Option<HorizontalPodAutoscaler> {
    let a = autoscaling(isvc, AutoscalingEngine::HPA)?;
    let name = variant.name(isvc, "");
    let target = a.target_or_default();
    let metric = match a.metric {
        AutoscalingMetric::CPU => MetricSpec {
            type_: "Resource".to_string(),
            resource: Some(ResourceMetricSource {
                name: "cpu".to_string(),
                target: MetricTarget {
                    type_: "Utilization".to_string(),
                    average_utilization: Some(target),
                    ..MetricTarget::default()
                },
            }),
            ..MetricSpec::default()
        },
        AutoscalingMetric::PendingRequests | AutoscalingMetric::QueueTimeMs => {
            let name = if a.metric == AutoscalingMetric::PendingRequests {
                PENDING_METRIC
            } else {
                QUEUE_TIME_METRIC
            };
            MetricSpec {
                type_: "Pods".to_string(),
                pods: Some(PodsMetricSource {
                    metric: MetricIdentifier {
                        name: name.to_string(),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "AverageValue".to_string(),
                        average_value: Some(Quantity(target.to_string())),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }
        }
    };
    Some(HorizontalPodAutoscaler {
        metadata: child_meta(isvc, name.clone(), owner),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".to_string()),
                kind: "Deployment".to_string(),
                name,
            },
            // An HPA cannot hold 0 (without an alpha feature gate): with scale to zero the
            // operator takes the service there, and the HPA, at 0, leaves it alone.
            min_replicas: Some(a.min_replicas.max(1)),
            max_replicas: a.max_replicas,
            metrics: Some(vec![metric]),
            ..HorizontalPodAutoscalerSpec::default()
        }),
        ..HorizontalPodAutoscaler::default()
    })
}

/// The KEDA ScaledObject `<name>`, when `spec.autoscaling.engine` is KEDA (the canary's,
/// `<name>-canary`, from its view of the resource).
pub(super) fn scaled_object(
    isvc: &InferenceService,
    owner: &OwnerReference,
    variant: Variant,
) -> Option<DynamicObject> {
    let a = autoscaling(isvc, AutoscalingEngine::KEDA)?;
    let name = variant.name(isvc, "");
    let target = a.target_or_default().to_string();
    let ns = isvc.namespace().unwrap_or_default();
    // The pods of this Deployment: NAME-<ReplicaSet hash>-<suffix> (the expression matches
    // whole names, so the service's never takes its canary's, NAME-canary-<hash>-<suffix>).
    let pods = format!(r#"namespace="{ns}",pod=~"{name}-[a-z0-9]+-[a-z0-9]+""#);
    let address = a.prometheus_address.clone().unwrap_or_default();
    let trigger = match a.metric {
        AutoscalingMetric::CPU => json!({
            "type": "cpu",
            "metricType": "Utilization",
            "metadata": {"value": target},
        }),
        AutoscalingMetric::PendingRequests => json!({
            "type": "prometheus",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": address,
                "query": format!("sum({PENDING_METRIC}{{{pods}}})"),
                "threshold": target,
            },
        }),
        AutoscalingMetric::QueueTimeMs => json!({
            "type": "prometheus",
            "metricType": "Value",
            "metadata": {
                "serverAddress": address,
                "query": format!(
                    "sum(rate(nv_inference_queue_duration_us{{{pods}}}[1m])) / \
                     clamp_min(sum(rate(nv_inference_request_success{{{pods}}}[1m])), 1e-9) / 1000"
                ),
                "threshold": target,
            },
        }),
    };
    let mut triggers = vec![trigger];
    // With scale to zero, the calls the activator holds are demand: KEDA's zero and the
    // operator's are the same zero, and neither takes the service back to it under held calls.
    if isvc.spec.scale_to_zero.is_some()
        && variant == Variant::Stable
        && let Some(address) = &a.prometheus_address
    {
        let activator = super::activator::activator_name(isvc);
        triggers.push(json!({
            "type": "prometheus",
            "metricType": "Value",
            "name": "held-calls",
            "metadata": {
                "serverAddress": address,
                "query": format!(
                    r#"sum({HELD_CALLS_METRIC}{{namespace="{ns}",pod=~"{activator}-[a-z0-9]+-[a-z0-9]+"}}) or vector(0)"#
                ),
                "threshold": "1",
                "activationThreshold": "0",
            },
        }));
    }
    triggers.extend(a.extra_triggers.iter().cloned());
    let mut object = DynamicObject::new(&name, &scaled_object_resource());
    object.metadata = child_meta(isvc, name.clone(), owner);
    object.data = json!({
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "triggers": triggers,
        }
    });
    Some(object)
}
