//! `spec.scaleToZero`: the activator's objects and configuration, the client Service without a
//! selector (the operator writes its endpoints), and the operator's decisions: whom the Service
//! sends calls to, when the service goes to zero, and what the status says of it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::time::Duration;

use common::{MINIMAL, with_spec};
use infergate_operator::controller::scale_to_zero::{
    Activators, Decision, Endpoints, Outcome, cold_start_ended, decide, endpoints, held_calls,
    report,
};
use infergate_operator::controller::status::{
    AdminActivator, AdminStatus, AdminTraffic, PodReport,
};
use infergate_operator::crd::{InferenceServiceStatus, ScaleToZeroSpec};
use infergate_operator::render::{self, Children, OperatorSettings};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

const ZERO: &str = "  scaleToZero:\n    idleSeconds: 60\n    maxHeldCalls: 9\n";

fn build(spec: &str) -> Children {
    let isvc = with_spec("resnet", spec);
    render::build_children(&isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn activator_config(children: &Children) -> infergate_config::SidecarConfig {
    let activator = children.activator.as_ref().expect("activator objects");
    let data = activator.config_map.data.as_ref().unwrap();
    let config: infergate_config::SidecarConfig =
        infergate_config::yaml::from_str(&data["config.yaml"]).unwrap();
    config.validate(&[]).unwrap();
    config
}

#[test]
fn the_activator_holds_for_the_service_and_may_scale_only_its_deployment() {
    let children = build(&format!("{MINIMAL}  replicas: 2\n{ZERO}"));
    let activator = children.activator.as_ref().unwrap();
    let settings = activator_config(&children).server.activator.unwrap();
    assert_eq!(settings.service.as_deref(), Some("resnet-peers"));
    assert_eq!(settings.deployment.as_deref(), Some("resnet"));
    assert_eq!(settings.inference_service.as_deref(), Some("resnet"));
    assert_eq!(settings.scale_to, 2, "back to spec.replicas");
    assert_eq!(settings.max_held_calls, 9);
    assert_eq!(settings.hold_timeout_seconds, 300);
    assert_eq!(settings.upstream_http_port, 8000);
    let rules = activator.role.rules.as_ref().unwrap();
    let scale = rules
        .iter()
        .find(|r| r.resources.as_deref() == Some(&["deployments/scale".to_string()][..]))
        .unwrap();
    assert_eq!(
        scale.resource_names.as_deref(),
        Some(&["resnet".to_string()][..])
    );
    assert_eq!(scale.verbs, ["get", "patch"]);
    let service = rules
        .iter()
        .find(|r| r.resources.as_deref() == Some(&["inferenceservices".to_string()][..]))
        .unwrap();
    assert_eq!(service.verbs, ["get"]);
    assert_eq!(
        service.resource_names.as_deref(),
        Some(&["resnet".to_string()][..])
    );
    assert_eq!(rules.len(), 3, "nothing else: {rules:?}");
    let pod = activator
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("resnet-activator")
    );
    assert_eq!(
        activator.role_binding.subjects.as_ref().unwrap()[0].name,
        "resnet-activator"
    );
    assert!(
        activator.peers_service.is_some(),
        "the activator finds the pods there"
    );
}

#[test]
fn the_client_service_selects_no_pod_and_the_deployment_has_no_count() {
    let children = build(&format!("{MINIMAL}{ZERO}"));
    // A selector no pod matches: the EndpointSlice controller keeps its slice empty.
    let selector = children
        .service
        .spec
        .as_ref()
        .unwrap()
        .selector
        .clone()
        .unwrap();
    assert_eq!(selector, render::no_pod_selector());
    let pod_labels = children
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone();
    let pod_labels = pod_labels.unwrap().labels.unwrap();
    assert!(!selector.keys().any(|k| pod_labels.contains_key(k)));
    assert_eq!(children.deployment.spec.as_ref().unwrap().replicas, None);
    let without = build(MINIMAL);
    assert!(without.service.spec.as_ref().unwrap().selector.is_some());
    assert_eq!(without.deployment.spec.as_ref().unwrap().replicas, Some(1));
    assert!(without.activator.is_none());
}

#[test]
fn the_network_policy_covers_the_activator_and_lets_it_reach_the_pods() {
    let clients = "  networkPolicy:\n    clients:\n      - namespaceSelector:\n          matchLabels: {team: a}\n";
    let children = build(&format!("{MINIMAL}{ZERO}{clients}"));
    let policy = children.network_policy.unwrap().spec.unwrap();
    let selector = policy.pod_selector.unwrap();
    let apps = &selector.match_expressions.unwrap()[0];
    assert!(
        apps.values
            .as_ref()
            .unwrap()
            .contains(&render::ACTIVATOR_APP_NAME.to_string())
    );
    let from = policy.ingress.unwrap()[0].from.clone().unwrap();
    assert_eq!(from.len(), 2, "{from:?}");
    let activator = from[1]
        .pod_selector
        .as_ref()
        .unwrap()
        .match_labels
        .clone()
        .unwrap();
    assert_eq!(
        activator["app.kubernetes.io/name"],
        render::ACTIVATOR_APP_NAME
    );
}

#[test]
fn the_activator_serves_the_services_certificate_and_dials_its_sidecars_over_tls() {
    let tls = "  tls:\n    secretName: resnet-cert\n    mutual: true\n";
    let children = build(&format!("{MINIMAL}{ZERO}{tls}"));
    let config = activator_config(&children);
    assert!(config.server.grpc_tls.use_ssl && config.server.http_tls.use_ssl_mutual);
    let peers = config.server.activator.unwrap().tls;
    assert!(peers.server_name.unwrap().starts_with("resnet-peers."));
    assert!(
        peers.client_cert.is_some(),
        "it presents the certificate to mutual ports"
    );
}

#[test]
fn a_name_too_long_for_the_activator_is_refused() {
    let name = "a".repeat(55);
    let isvc = with_spec(&name, &format!("{MINIMAL}{ZERO}"));
    let err = render::build_children(&isvc, &OperatorSettings::default()).unwrap_err();
    assert!(
        err.to_string().contains("too long for scaleToZero"),
        "{err}"
    );
}

fn pod(name: &str, ip: &str, ready: bool, going: bool) -> Pod {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"podIP": ip, "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}
        ]},
    }))
    .unwrap();
    if going {
        pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    }
    pod
}

fn traffic(name: &str, in_flight: u64, quiet: u64, sequences: u64) -> PodReport {
    PodReport {
        pod: name.to_string(),
        outcome: Ok(AdminStatus {
            traffic: Some(AdminTraffic {
                in_flight,
                quiet_seconds: quiet,
                live_sequences: sequences,
            }),
            ..AdminStatus::default()
        }),
    }
}

/// One ready activator, last called `quiet` seconds ago.
fn ready_activator(quiet: u64) -> Activators {
    Activators {
        ready: 1,
        quiet_seconds: Some(quiet),
    }
}

/// An activator's `/status` report.
fn activator_report(name: &str, activator: AdminActivator) -> PodReport {
    PodReport {
        pod: name.to_string(),
        outcome: Ok(AdminStatus {
            activator: Some(activator),
            ..AdminStatus::default()
        }),
    }
}

fn quiet_for(quiet: Option<u64>) -> AdminActivator {
    AdminActivator {
        quiet_seconds: quiet,
        ..AdminActivator::default()
    }
}

#[test]
fn the_service_points_at_the_ready_pods_else_at_the_activator() {
    let pods = [
        pod("a", "10.0.0.2", true, false),
        pod("b", "10.0.0.1", false, false),
    ];
    let activators = [pod("x", "10.0.9.9", true, false)];
    assert_eq!(
        endpoints(&pods, &activators),
        Endpoints::Pods(vec!["10.0.0.2".into()])
    );
    let none_ready = [
        pod("a", "10.0.0.2", true, true),
        pod("b", "10.0.0.1", false, false),
    ];
    assert_eq!(
        endpoints(&none_ready, &activators),
        Endpoints::Activator(vec!["10.0.9.9".into()]),
        "a pod going away is not an endpoint"
    );
    assert_eq!(endpoints(&[], &[]), Endpoints::Nobody);
}

#[test]
fn the_service_goes_to_zero_only_when_every_pod_is_quiet_long_enough() {
    let zero = ScaleToZeroSpec {
        idle_seconds: 60,
        ..ScaleToZeroSpec::default()
    };
    let pods = [
        pod("a", "10.0.0.1", true, false),
        pod("b", "10.0.0.2", true, false),
    ];
    let quiet = [traffic("a", 0, 70, 0), traffic("b", 0, 65, 0)];
    assert_eq!(
        decide(&zero, 2, &pods, &quiet, &ready_activator(0), None),
        Decision::ScaleDown { quiet: 65 }
    );
    assert_eq!(
        decide(&zero, 2, &pods, &quiet, &Activators::default(), None),
        Decision::Hold("no activator pod is ready to hold calls")
    );
    let one_busy = [traffic("a", 0, 70, 0), traffic("b", 0, 20, 0)];
    assert_eq!(
        decide(&zero, 2, &pods, &one_busy, &ready_activator(0), None),
        Decision::Wait {
            quiet: 20,
            recheck: Duration::from_secs(41)
        }
    );
    let a_stream_open = [traffic("a", 1, 0, 0), traffic("b", 0, 900, 0)];
    assert!(matches!(
        decide(&zero, 2, &pods, &a_stream_open, &ready_activator(0), None),
        Decision::Wait { quiet: 0, .. }
    ));
    let a_live_sequence = [traffic("a", 0, 900, 1), traffic("b", 0, 900, 0)];
    assert!(matches!(
        decide(&zero, 2, &pods, &a_live_sequence, &ready_activator(0), None),
        Decision::Wait { quiet: 0, .. }
    ));
    let silent = [traffic("a", 0, 900, 0)];
    assert!(matches!(
        decide(&zero, 2, &pods, &silent, &ready_activator(0), None),
        Decision::Hold(_)
    ));
    let starting = [
        pod("a", "10.0.0.1", true, false),
        pod("b", "10.0.0.2", false, false),
    ];
    assert!(matches!(
        decide(&zero, 2, &starting, &quiet, &ready_activator(900), None),
        Decision::Hold(_)
    ));
    assert_eq!(
        decide(&zero, 0, &[], &[], &ready_activator(0), None),
        Decision::AtZero
    );
}

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn outcome(replicas: i32, ready: i32, activator_ready: i32) -> Outcome {
    Outcome {
        replicas,
        ready_replicas: ready,
        activator_ready,
        held_calls: Some(3),
        decision: if replicas == 0 {
            Decision::AtZero
        } else {
            Decision::Hold("pods are starting")
        },
        endpoints: Endpoints::Nobody,
    }
}

#[test]
fn the_status_follows_zero_and_times_the_start_from_it() {
    let zero = ScaleToZeroSpec::default();
    let ready_false = |status: &mut InferenceServiceStatus| {
        status.conditions = vec![
            serde_json::from_value(json!({
            "type": "Ready", "status": "False", "reason": "NotReady", "message": "",
            "lastTransitionTime": "1970-01-01T00:00:00Z"}))
            .unwrap(),
        ];
    };
    let mut first = InferenceServiceStatus::default();
    ready_false(&mut first);
    report(&mut first, &outcome(0, 0, 1), &zero, None, &at(100));
    let state = first.scale_to_zero.clone().unwrap();
    assert_eq!(state.state, "ScaledToZero");
    let ready = first
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "ScaledToZero")
    );
    let scaled = first
        .conditions
        .iter()
        .find(|c| c.type_ == "ScaledToZero")
        .unwrap();
    assert_eq!(scaled.status, "True");

    let mut starting = InferenceServiceStatus::default();
    ready_false(&mut starting);
    report(
        &mut starting,
        &outcome(1, 0, 1),
        &zero,
        Some(&first),
        &at(200),
    );
    assert_eq!(starting.scale_to_zero.as_ref().unwrap().state, "Starting");
    let ready = starting
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False", "a start is not ready");

    let mut active = InferenceServiceStatus::default();
    report(
        &mut active,
        &outcome(1, 1, 1),
        &zero,
        Some(&starting),
        &at(212),
    );
    assert_eq!(cold_start_ended(Some(&starting), &active), Some(12.0));
    assert_eq!(cold_start_ended(Some(&first), &starting), None);
    let state = active.scale_to_zero.unwrap();
    assert_eq!(state.state, "Active");
    assert_eq!(state.last_cold_start_seconds, Some(12.0));
    assert_eq!(state.held_calls, Some(3));
    let scaled = active
        .conditions
        .iter()
        .find(|c| c.type_ == "ScaledToZero")
        .unwrap();
    assert_eq!(scaled.status, "False");
}

#[test]
fn with_keda_held_calls_are_demand() {
    let keda = "  autoscaling:\n    engine: KEDA\n    minReplicas: 0\n    maxReplicas: 4\n    metric: PendingRequests\n    prometheusAddress: http://prometheus.monitoring.svc:9090\n";
    let children = build(&format!("{MINIMAL}{ZERO}{keda}"));
    let so = children.scaled_object.unwrap();
    let triggers = so.data["spec"]["triggers"].as_array().unwrap();
    assert_eq!(triggers.len(), 2);
    let held = &triggers[1];
    assert_eq!(held["name"], "held-calls");
    let query = held["metadata"]["query"].as_str().unwrap();
    assert!(query.contains("infergate_activator_held_calls"), "{query}");
    assert!(
        query.contains(r#"pod=~"resnet-activator-[a-z0-9]+-[a-z0-9]+""#),
        "{query}"
    );
    assert_eq!(so.data["spec"]["minReplicaCount"], 0);
    let without = build(&format!("{MINIMAL}{keda}"));
    let triggers = &without.scaled_object.unwrap().data["spec"]["triggers"];
    assert_eq!(
        triggers.as_array().unwrap().len(),
        1,
        "no activator, no held calls"
    );
}

#[test]
fn an_hpa_works_from_one_up_when_the_service_scales_to_zero() {
    let hpa =
        "  autoscaling:\n    minReplicas: 0\n    maxReplicas: 4\n    metric: PendingRequests\n";
    let children = build(&format!("{MINIMAL}{ZERO}{hpa}"));
    let hpa = children.hpa.clone().unwrap().spec.unwrap();
    assert_eq!(
        hpa.min_replicas,
        Some(1),
        "an HPA cannot hold 0; the operator takes it there"
    );
    let settings = activator_config(&children).server.activator.unwrap();
    assert_eq!(settings.scale_to, 1);
}

#[test]
fn held_calls_are_summed_over_the_activators_that_report() {
    let activator = |name: &str, held: u64| {
        activator_report(
            name,
            AdminActivator {
                held_calls: held,
                ..AdminActivator::default()
            },
        )
    };
    let silent = PodReport {
        pod: "c".to_string(),
        outcome: Err("timed out".to_string()),
    };
    assert_eq!(
        held_calls(&[activator("a", 2), activator("b", 5), silent]),
        Some(7)
    );
    assert_eq!(held_calls(&[]), None);
}

#[test]
fn a_service_whose_pods_cannot_start_goes_to_zero_once_the_activators_are_quiet() {
    let zero = ScaleToZeroSpec {
        idle_seconds: 60,
        ..ScaleToZeroSpec::default()
    };
    let failing = [pod("a", "10.0.0.1", false, false)];
    assert_eq!(
        decide(
            &zero,
            1,
            &failing,
            &[],
            &ready_activator(75),
            Some("ImagePullFailed")
        ),
        Decision::ScaleDown { quiet: 75 }
    );
    assert_eq!(
        decide(
            &zero,
            1,
            &failing,
            &[],
            &ready_activator(20),
            Some("ImagePullFailed")
        ),
        Decision::Wait {
            quiet: 20,
            recheck: Duration::from_secs(41)
        },
        "a call came 20 s ago: its caller got the failure, and may come back"
    );
    assert!(
        matches!(
            decide(
                &zero,
                1,
                &failing,
                &[],
                &Activators::default(),
                Some("ImagePullFailed")
            ),
            Decision::Hold(_)
        ),
        "never to zero without an activator to take the next call"
    );
    let unreported = Activators {
        ready: 1,
        quiet_seconds: None,
    };
    assert!(matches!(
        decide(
            &zero,
            1,
            &failing,
            &[],
            &unreported,
            Some("ImagePullFailed")
        ),
        Decision::Hold(_)
    ));
    assert!(
        matches!(
            decide(&zero, 1, &failing, &[], &ready_activator(900), None),
            Decision::Hold("pods are starting")
        ),
        "without a failure, pods that are not ready yet are starting"
    );
    // One pod serves and another cannot start: calls go to the one that serves, not to the
    // activators, whose quiet says nothing then.
    let one_serves = [
        pod("a", "10.0.0.1", true, false),
        pod("b", "10.0.0.2", false, false),
    ];
    assert!(matches!(
        decide(
            &zero,
            2,
            &one_serves,
            &[traffic("a", 0, 900, 0)],
            &ready_activator(900),
            Some("ImagePullFailed")
        ),
        Decision::Hold(_)
    ));
    // Pods the API server refuses to create: none at all.
    assert_eq!(
        decide(
            &zero,
            1,
            &[],
            &[],
            &ready_activator(61),
            Some("PodsRejected")
        ),
        Decision::ScaleDown { quiet: 61 }
    );
}

#[test]
fn the_activators_quiet_is_the_least_of_the_ready_ones_reports() {
    let pods = [
        pod("x", "10.0.9.1", true, false),
        pod("y", "10.0.9.2", true, false),
        pod("z", "10.0.9.3", false, false),
    ];
    let reports = [
        activator_report("x", quiet_for(Some(40))),
        activator_report("y", quiet_for(Some(90))),
    ];
    assert_eq!(
        Activators::seen(&pods, &reports),
        Activators {
            ready: 2,
            quiet_seconds: Some(40)
        }
    );
    assert_eq!(
        Activators::seen(
            &pods,
            &[
                activator_report("x", quiet_for(Some(40))),
                activator_report("y", quiet_for(None))
            ]
        ),
        Activators {
            ready: 2,
            quiet_seconds: None
        },
        "an activator that does not say"
    );
    assert_eq!(
        Activators::seen(&pods, &reports[..1]),
        Activators {
            ready: 2,
            quiet_seconds: None
        },
        "an activator not probed"
    );
}
