//! `spec.networkPolicy`: the NetworkPolicy that admits clients, the operator and scrapers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, with_spec};
use infergate_operator::render::{self, OperatorSettings};
use serde_json::json;

#[test]
fn the_policy_admits_clients_the_operator_and_scrapers_to_the_sidecars_ports_only() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}  networkPolicy:\n    clients:\n    - namespaceSelector: {{matchLabels: {{team: a}}}}\n    metricsScrapers:\n    - namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: monitoring}}}}\n"
        ),
    );
    let settings = OperatorSettings {
        operator_namespace: Some("infergate-system".into()),
        ..OperatorSettings::default()
    };
    let children = render::build_children(&isvc, &settings).unwrap();
    let policy = serde_json::to_value(children.network_policy.unwrap()).unwrap();
    assert_eq!(
        policy["metadata"]["ownerReferences"][0]["kind"],
        "InferenceService"
    );
    assert_eq!(
        policy["spec"]["podSelector"],
        json!({"matchLabels": {"app.kubernetes.io/instance": "svc", "app.kubernetes.io/name": "infergate"}})
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 3);
    assert_eq!(
        ingress[0],
        json!({"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
               "ports": [{"port": 8000, "protocol": "TCP"}, {"port": 8001, "protocol": "TCP"}]})
    );
    assert_eq!(
        ingress[1],
        json!({"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "infergate-system"}},
                         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "infergate-operator"}}}],
               "ports": [{"port": 8003, "protocol": "TCP"}]})
    );
    assert_eq!(
        ingress[2]["ports"],
        json!([{"port": 8002, "protocol": "TCP"}])
    );
    // No rule names the model server's port.
    assert!(!policy.to_string().contains("9001"));
}

#[test]
fn by_default_anyone_may_call_and_the_monitoring_namespace_scrape() {
    // The field unset and the field empty give the same policy.
    for spec in [
        MINIMAL.to_string(),
        format!("{MINIMAL}  networkPolicy: {{}}\n"),
    ] {
        let isvc = with_spec("svc", &spec);
        let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
        let policy = serde_json::to_value(children.network_policy.unwrap()).unwrap();
        let ingress = policy["spec"]["ingress"].as_array().unwrap();
        assert_eq!(ingress.len(), 3);
        assert!(ingress[0].get("from").is_none(), "{}", ingress[0]);
        // Without its own namespace, the operator's pods of any namespace.
        assert_eq!(ingress[1]["from"][0]["namespaceSelector"], json!({}));
        assert_eq!(
            ingress[2],
            json!({"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                   "ports": [{"port": 8002, "protocol": "TCP"}]})
        );
        assert!(
            !policy.to_string().contains("9001"),
            "no rule for the model server"
        );
    }
}

#[test]
fn enabled_false_renders_none() {
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}  networkPolicy: {{enabled: false}}\n"),
    );
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    assert!(children.network_policy.is_none());
}
