//! The PodMonitor (monitoring.coreos.com/v1, the Prometheus Operator's) that scrapes every pod's
//! sidecar metrics port, from `spec.monitoring.podMonitor`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

use super::{all_pods_selector, child_meta};
use crate::crd::{InferenceService, TlsSpec};

/// The Prometheus Operator's PodMonitor resource.
pub fn pod_monitor_resource() -> ApiResource {
    ApiResource {
        group: "monitoring.coreos.com".to_string(),
        version: "v1".to_string(),
        api_version: "monitoring.coreos.com/v1".to_string(),
        kind: "PodMonitor".to_string(),
        plural: "podmonitors".to_string(),
    }
}

/// The PodMonitor `<name>`: the container port named `metrics` of the pods, path `/metrics`, each
/// series labelled with the pod's InferenceService (`inferenceservice`) besides Prometheus's
/// `namespace` and `pod`; over https where the metrics port serves TLS (`tls.metrics`).
pub(super) fn pod_monitor(
    isvc: &InferenceService,
    owner: &OwnerReference,
) -> Option<DynamicObject> {
    let monitoring = &isvc.spec.monitoring;
    if !monitoring.pod_monitor {
        return None;
    }
    let mut endpoint = json!({
        "port": "metrics",
        "path": "/metrics",
        "relabelings": [{
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "inferenceservice",
        }],
    });
    if let Some(interval) = &monitoring.interval {
        endpoint["interval"] = json!(interval);
    }
    // The metrics port serves the service's certificate: scraped over https, trusting the
    // Secret's CA and verifying the Service's name (the certificate names no pod address).
    if let Some(tls) = isvc.spec.metrics_tls() {
        endpoint["scheme"] = json!("https");
        endpoint["tlsConfig"] = json!({
            "ca": {"secret": {"name": tls.secret(&isvc.name_any()), "key": "ca.crt"}},
            "serverName": TlsSpec::metrics_server_name(
                &isvc.name_any(),
                &isvc.namespace().unwrap_or_default(),
            ),
        });
    }
    let mut object = DynamicObject::new(&isvc.name_any(), &pod_monitor_resource());
    let mut metadata = child_meta(isvc, isvc.name_any(), owner);
    if let Some(labels) = metadata.labels.as_mut() {
        for (k, v) in &monitoring.pod_monitor_labels {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    object.metadata = metadata;
    object.data = json!({
        "spec": {
            "selector": all_pods_selector(isvc),
            "podMetricsEndpoints": [endpoint],
        }
    });
    Some(object)
}
