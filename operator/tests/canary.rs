//! `spec.canary`: the canary's pods beside the service's, selected by neither the service's
//! Deployment nor its client Service; the service's sidecars told where the canary's are and
//! its share, in a ConfigMap key a new share changes without rolling a pod.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeMap;

use common::{MINIMAL, pod, sidecar_config, with_spec};
use infergate_operator::render::{self, CanaryObjects, Children, OperatorSettings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

const CANARY: &str = "  canary:\n    trafficPercent: 25\n    model:\n      image: triton:next\n      args: [tritonserver, --model-repository=/models2, --grpc-port=9001]\n";

fn build(spec: &str) -> Children {
    let isvc = with_spec("resnet", spec);
    render::build_children(&isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn canary(children: &Children) -> &CanaryObjects {
    children.canary.as_ref().expect("canary objects")
}

/// The canary's sidecars' configuration, validated as the sidecar would.
fn canary_config(children: &Children) -> infergate_config::SidecarConfig {
    let data = canary(children).config_map.data.as_ref().unwrap();
    let config: infergate_config::SidecarConfig =
        infergate_config::yaml::from_str(&data["config.yaml"]).unwrap();
    config.validate(&[]).unwrap();
    config
}

/// Whether `selector` (match labels only) selects a pod with `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn pod_labels(deployment: &k8s_openapi::api::apps::v1::Deployment) -> BTreeMap<String, String> {
    let template = &deployment.spec.as_ref().unwrap().template;
    template.metadata.as_ref().unwrap().labels.clone().unwrap()
}

fn match_labels(selector: &LabelSelector) -> BTreeMap<String, String> {
    selector.match_labels.clone().unwrap_or_default()
}

#[test]
fn the_canarys_pods_run_its_model_and_no_selector_of_the_service_takes_them() {
    let children = build(&format!("{MINIMAL}{CANARY}"));
    let canary = canary(&children);
    let deployment = &canary.deployment;
    assert_eq!(deployment.metadata.name.as_deref(), Some("resnet-canary"));
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    let pod = spec.template.spec.as_ref().unwrap();
    let model = &pod.containers[0];
    assert_eq!(model.image.as_deref(), Some("triton:next"));
    assert!(
        model
            .args
            .as_ref()
            .unwrap()
            .contains(&"--model-repository=/models2".to_string())
    );

    let canary_pods = pod_labels(deployment);
    let service_pods = pod_labels(&children.deployment);
    assert!(selects(&match_labels(&spec.selector), &canary_pods));
    assert!(!selects(&match_labels(&spec.selector), &service_pods));
    let service_deployment = children.deployment.spec.as_ref().unwrap();
    assert!(!selects(
        &match_labels(&service_deployment.selector),
        &canary_pods
    ));
    let client_service = children
        .service
        .spec
        .as_ref()
        .unwrap()
        .selector
        .clone()
        .unwrap();
    assert!(!selects(&client_service, &canary_pods));
    assert!(selects(&client_service, &service_pods));
    // Where the service's sidecars find the canary's: a headless Service of the canary's pods.
    let peers = canary.peers_service.spec.as_ref().unwrap();
    assert_eq!(
        canary.peers_service.metadata.name.as_deref(),
        Some("resnet-canary-peers")
    );
    assert_eq!(peers.cluster_ip.as_deref(), Some("None"));
    assert!(selects(peers.selector.as_ref().unwrap(), &canary_pods));
    assert!(!selects(peers.selector.as_ref().unwrap(), &service_pods));
    // The canary's own ConfigMap, mounted by its pods.
    assert_eq!(
        canary.config_map.metadata.name.as_deref(),
        Some("resnet-canary-sidecar")
    );
    let config_volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "infergate-config");
    assert_eq!(
        config_volume.unwrap().config_map.as_ref().unwrap().name,
        "resnet-canary-sidecar"
    );
}

#[test]
fn the_services_sidecars_split_and_a_new_share_rolls_no_pod() {
    let children = build(&format!("{MINIMAL}{CANARY}"));
    let config = sidecar_config(&children);
    let split = config.server.canary.expect("the service's sidecars split");
    assert_eq!(split.service.as_deref(), Some("resnet-canary-peers"));
    assert_eq!(
        split.traffic_percent_file.as_deref(),
        Some("/etc/infergate/config/canary-traffic-percent")
    );
    let data = children.config_map.data.as_ref().unwrap();
    assert_eq!(data["canary-traffic-percent"], "25\n");
    // They watch the canary's EndpointSlices: an account of their own, bound to the Role.
    let peers = children.peers.as_ref().expect("peer access");
    assert_eq!(
        pod(&children).service_account_name.as_deref(),
        Some("resnet-sequence-peers")
    );
    assert_eq!(
        peers.role_binding.subjects.as_ref().unwrap()[0].name,
        "resnet-sequence-peers"
    );

    // Another share: the same Deployments (no pod rolls), another ConfigMap value.
    let other = build(&format!("{MINIMAL}{}", CANARY.replace("25", "60")));
    assert_eq!(other.deployment, children.deployment);
    assert_eq!(canary(&other).deployment, canary(&children).deployment);
    assert_eq!(
        other.config_map.data.as_ref().unwrap()["canary-traffic-percent"],
        "60\n"
    );

    // The canary's sidecars do not split, and have no share.
    let canary_config = canary_config(&children);
    assert!(canary_config.server.canary.is_none());
    assert!(
        !canary(&children)
            .config_map
            .data
            .as_ref()
            .unwrap()
            .contains_key("canary-traffic-percent")
    );
}

#[test]
fn the_canarys_sidecars_route_sequences_among_the_canarys_pods() {
    let spec = format!(
        "{MINIMAL}  extensions:\n    sequence: {{enabled: true, routing: Sidecar}}\n{CANARY}"
    );
    let children = build(&spec);
    let service = sidecar_config(&children);
    assert_eq!(
        service.server.sequence_peers_service.as_deref(),
        Some("resnet-peers")
    );
    let canary_config = canary_config(&children);
    assert_eq!(
        canary_config.server.sequence_peers_service.as_deref(),
        Some("resnet-canary-peers")
    );
}

#[test]
fn the_canary_has_its_own_models_count_and_autoscaler() {
    let spec = format!(
        "{MINIMAL}  models: [{{name: a}}]\n{CANARY}    models: [{{name: b}}]\n    replicas: 3\n    autoscaling: {{minReplicas: 1, maxReplicas: 4}}\n"
    );
    let children = build(&spec);
    let canary = canary(&children);
    let hpa = canary.hpa.as_ref().expect("the canary's HPA");
    assert_eq!(hpa.metadata.name.as_deref(), Some("resnet-canary"));
    let target = &hpa.spec.as_ref().unwrap().scale_target_ref;
    assert_eq!(target.name, "resnet-canary");
    // The autoscaler owns the count.
    assert_eq!(canary.deployment.spec.as_ref().unwrap().replicas, None);
    assert!(children.hpa.is_none());
    let infergate_config::BackendConfig::Upstream(upstream) = canary_config(&children).backend
    else {
        panic!("an upstream");
    };
    let names: Vec<&str> = upstream.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["b"]);
    let without_autoscaler = build(&format!("{MINIMAL}{CANARY}    replicas: 3\n"));
    assert_eq!(
        crate::canary(&without_autoscaler)
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .replicas,
        Some(3)
    );
}

#[test]
fn the_network_policy_covers_the_canarys_pods_and_without_a_canary_nothing_is_rendered() {
    let children = build(&format!("{MINIMAL}{CANARY}"));
    let policy = children
        .network_policy
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap();
    let selector = policy.pod_selector.as_ref().unwrap();
    let selects_pod = |labels: &BTreeMap<String, String>| {
        selects(&match_labels(selector), labels)
            && selector.match_expressions.iter().flatten().all(|e| {
                e.operator == "In"
                    && e.values
                        .iter()
                        .flatten()
                        .any(|v| labels.get(&e.key) == Some(v))
            })
    };
    assert!(selects_pod(&pod_labels(&children.deployment)));
    assert!(selects_pod(&pod_labels(&canary(&children).deployment)));

    let plain = build(MINIMAL);
    assert!(plain.canary.is_none());
    assert!(sidecar_config(&plain).server.canary.is_none());
    assert!(
        !plain
            .config_map
            .data
            .as_ref()
            .unwrap()
            .contains_key("canary-traffic-percent")
    );
    // A name too long for the canary's Service is refused.
    let long = with_spec(&"a".repeat(52), &format!("{MINIMAL}{CANARY}"));
    let error = render::build_children(&long, &OperatorSettings::default()).unwrap_err();
    assert!(
        error.to_string().contains("too long for a canary"),
        "{error}"
    );
}
