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
fn anyone_may_call_without_clients_and_any_namespaces_operator_without_its_namespace() {
    let isvc = with_spec("svc", &format!("{MINIMAL}  networkPolicy: {{}}\n"));
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    let policy = serde_json::to_value(children.network_policy.unwrap()).unwrap();
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2, "no scrapers, no metrics rule");
    assert!(ingress[0].get("from").is_none(), "{}", ingress[0]);
    assert_eq!(ingress[1]["from"][0]["namespaceSelector"], json!({}));
    // None without the field.
    let plain = render::build_children(&with_spec("svc", MINIMAL), &OperatorSettings::default());
    assert!(plain.unwrap().network_policy.is_none());
}
