//! `spec.autoscaling` and `spec.monitoring`: the HorizontalPodAutoscaler or KEDA ScaledObject,
//! the Deployment left to the autoscaler, the PodDisruptionBudget, the Service's metrics port and
//! the PodMonitor.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, with_spec};
use infergate_operator::crd::InferenceService;
use infergate_operator::render::{self, Children, OperatorSettings, RenderError};
use serde_json::json;

const CPU: &str = "    resources:\n      requests: {cpu: '2'}\n";

fn build(isvc: &InferenceService) -> Children {
    render::build_children(isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

/// The names of the Service's ports.
fn service_ports(children: &Children) -> Vec<(String, i32)> {
    let spec = children.service.spec.as_ref().unwrap();
    spec.ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.port))
        .collect()
}

fn spec(extra: &str) -> InferenceService {
    with_spec("svc", &format!("{MINIMAL}{CPU}{extra}"))
}

#[test]
fn without_autoscaling_the_deployment_keeps_its_replicas_and_nothing_else_is_made() {
    let children = build(&spec("  replicas: 3\n"));
    assert_eq!(children.deployment.spec.as_ref().unwrap().replicas, Some(3));
    assert!(children.hpa.is_none() && children.scaled_object.is_none());
    assert!(children.pod_monitor.is_none());
    assert_eq!(
        service_ports(&children),
        [("http".to_string(), 8000), ("grpc".to_string(), 8001)]
    );
}

#[test]
fn an_hpa_on_cpu_owns_the_replicas() {
    let children = build(&spec(
        "  autoscaling:\n    minReplicas: 2\n    maxReplicas: 6\n",
    ));
    assert_eq!(children.deployment.spec.as_ref().unwrap().replicas, None);
    let hpa = serde_json::to_value(children.hpa.as_ref().unwrap()).unwrap();
    assert_eq!(
        hpa["spec"],
        json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"},
            "minReplicas": 2, "maxReplicas": 6,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}],
        })
    );
    assert_eq!(
        hpa["metadata"]["ownerReferences"][0]["kind"],
        "InferenceService"
    );
    // The fewest pods decide the PodDisruptionBudget.
    assert!(children.pdb.is_some());
    assert!(children.scaled_object.is_none());
    let values = children.to_values().unwrap();
    assert!(
        values
            .iter()
            .any(|v| v["kind"] == "HorizontalPodAutoscaler" && v["apiVersion"] == "autoscaling/v2")
    );
}

#[test]
fn an_hpa_on_sidecar_metrics_reads_pods_metrics() {
    for (metric, name, target) in [
        ("PendingRequests", "nv_inference_pending_request_count", "4"),
        ("QueueTimeMs", "infergate_queue_time_ms", "50"),
    ] {
        let children = build(&spec(&format!(
            "  autoscaling:\n    maxReplicas: 3\n    metric: {metric}\n"
        )));
        let hpa = serde_json::to_value(children.hpa.unwrap()).unwrap();
        assert_eq!(
            hpa["spec"]["metrics"],
            json!([{"type": "Pods", "pods": {"metric": {"name": name},
                "target": {"type": "AverageValue", "averageValue": target}}}]),
            "{metric}"
        );
        assert_eq!(hpa["spec"]["minReplicas"], 1);
        assert!(children.pdb.is_none(), "one pod at least: no budget");
    }
}

#[test]
fn keda_gets_a_scaled_object_with_prometheus_queries_over_the_services_pods() {
    let children = build(&spec(
        "  autoscaling:\n    engine: KEDA\n    minReplicas: 0\n    maxReplicas: 5\n    metric: PendingRequests\n    target: 8\n    prometheusAddress: http://prometheus.monitoring:9090\n    extraTriggers:\n    - {type: cron, metadata: {timezone: UTC, start: 0 8 * * *, end: 0 18 * * *, desiredReplicas: '1'}}\n",
    ));
    assert!(children.hpa.is_none());
    assert_eq!(children.deployment.spec.as_ref().unwrap().replicas, None);
    let so = serde_json::to_value(children.scaled_object.as_ref().unwrap()).unwrap();
    assert_eq!(so["apiVersion"], "keda.sh/v1alpha1");
    assert_eq!(so["kind"], "ScaledObject");
    assert_eq!(so["metadata"]["name"], "svc");
    assert_eq!(so["metadata"]["namespace"], "ml");
    assert_eq!(so["spec"]["minReplicaCount"], 0);
    assert_eq!(so["spec"]["maxReplicaCount"], 5);
    assert_eq!(so["spec"]["scaleTargetRef"]["name"], "svc");
    let triggers = so["spec"]["triggers"].as_array().unwrap();
    assert_eq!(triggers.len(), 2);
    assert_eq!(
        triggers[0],
        json!({"type": "prometheus", "metricType": "AverageValue", "metadata": {
            "serverAddress": "http://prometheus.monitoring:9090",
            "query": "sum(nv_inference_pending_request_count{namespace=\"ml\",pod=~\"svc-[a-z0-9]+-[a-z0-9]+\"})",
            "threshold": "8"}})
    );
    assert_eq!(triggers[1]["type"], "cron");

    let queue = build(&spec(
        "  autoscaling:\n    engine: KEDA\n    maxReplicas: 5\n    metric: QueueTimeMs\n    prometheusAddress: http://p:9090\n",
    ));
    let so = serde_json::to_value(queue.scaled_object.unwrap()).unwrap();
    let trigger = &so["spec"]["triggers"][0];
    assert_eq!(trigger["metricType"], "Value");
    let query = trigger["metadata"]["query"].as_str().unwrap();
    assert!(
        query.starts_with("sum(rate(nv_inference_queue_duration_us{namespace=\"ml\""),
        "{query}"
    );
    assert!(query.contains("nv_inference_request_success"), "{query}");

    let cpu = build(&spec(
        "  autoscaling:\n    engine: KEDA\n    maxReplicas: 5\n    target: 60\n",
    ));
    let so = serde_json::to_value(cpu.scaled_object.unwrap()).unwrap();
    assert_eq!(
        so["spec"]["triggers"][0],
        json!({"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}})
    );
}

#[test]
fn monitoring_adds_the_metrics_port_and_a_pod_monitor() {
    let children = build(&spec(
        "  monitoring:\n    servicePort: true\n    podMonitor: true\n    podMonitorLabels: {release: prometheus}\n    interval: 15s\n",
    ));
    assert!(service_ports(&children).contains(&("metrics".to_string(), 8002)));
    let pm = serde_json::to_value(children.pod_monitor.as_ref().unwrap()).unwrap();
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["kind"], "PodMonitor");
    assert_eq!(pm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        pm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "infergate-operator"
    );
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/instance": "svc", "app.kubernetes.io/name": "infergate"})
    );
    let endpoint = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(
        endpoint["relabelings"][0]["targetLabel"],
        "inferenceservice"
    );
}

#[test]
fn cpu_autoscaling_needs_cpu_requests() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}  autoscaling:\n    maxReplicas: 3\n  pod:\n    containers:\n    - name: helper\n      image: busybox\n"
        ),
    );
    match render::build_children(&isvc, &OperatorSettings::default()) {
        Err(RenderError::Invalid { problems, .. }) => {
            assert!(
                problems
                    .iter()
                    .any(|p| p.contains("model.resources.requests.cpu")),
                "{problems:?}"
            );
            assert!(
                problems
                    .iter()
                    .any(|p| p.contains("pod.containers[0].resources.requests.cpu")),
                "{problems:?}"
            );
        }
        other => panic!("expected problems, got {other:?}"),
    }
    // A sidecar metric needs no CPU request.
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}  autoscaling:\n    maxReplicas: 3\n    metric: PendingRequests\n"),
    );
    assert!(render::build_children(&isvc, &OperatorSettings::default()).is_ok());
}
