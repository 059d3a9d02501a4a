//! Status and conditions computed from a Deployment and sidecar reports (no cluster).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, with_spec};
use infergate_operator::controller::status::{
    AdminBackend, AdminExtension, AdminStatus, Observed, PodReport, compute,
};
use infergate_operator::crd::{ExtensionState, Implementation, InferenceServiceStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

fn deployment(available: bool, replicas: i32, ready: i32) -> Deployment {
    common::deployment_with_status(available, replicas, ready)
}

/// The status computed at second `now` from a Deployment, probe reports and the previous status.
fn status_of(
    isvc: &infergate_operator::crd::InferenceService,
    deployment: Option<&Deployment>,
    reports: &[PodReport],
    now: i64,
    previous: Option<&InferenceServiceStatus>,
) -> InferenceServiceStatus {
    let observed = Observed {
        deployment,
        pods: &[],
        refusal: None,
        reports,
        now: at(now),
    };
    compute(isvc, &observed, previous)
}

fn ext(name: &str, state: &str) -> AdminExtension {
    AdminExtension {
        name: name.into(),
        state: state.into(),
        implementation: "sidecar".into(),
        reason: if state == "Active" {
            String::new()
        } else {
            format!("{name} is {state}")
        },
    }
}

fn healthy(extra: &[AdminExtension]) -> AdminStatus {
    let mut extensions = vec![
        ext("binary_tensor_data", "Active"),
        ext("classification", "Active"),
        ext("model_repository", "Active"),
        ext("statistics", "Active"),
    ];
    extensions.extend_from_slice(extra);
    AdminStatus {
        ready: true,
        extensions,
        backend: AdminBackend {
            kind: "upstream".into(),
            models: vec!["densenet".into(), "resnet".into()],
        },
        ..AdminStatus::default()
    }
}

fn report(pod: &str, outcome: Result<AdminStatus, &str>) -> PodReport {
    PodReport {
        pod: pod.into(),
        outcome: outcome.map_err(str::to_string),
    }
}

fn condition<'a>(
    status: &'a InferenceServiceStatus,
    kind: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status.conditions.iter().find(|c| c.type_ == kind).unwrap()
}

#[test]
fn all_healthy_is_ready_with_every_field() {
    let mut isvc = with_spec("svc", MINIMAL);
    isvc.metadata.generation = Some(4);
    let d = deployment(true, 2, 2);
    let reports = [report("a", Ok(healthy(&[]))), report("b", Ok(healthy(&[])))];
    let status = status_of(&isvc, Some(&d), &reports, 100, None);
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!((status.replicas, status.ready_replicas), (2, 2));
    assert_eq!(
        status.selector.as_deref(),
        Some("app.kubernetes.io/instance=svc,app.kubernetes.io/name=infergate")
    );
    assert_eq!(status.url.as_ref().unwrap().rest, "http://svc.ml.svc:8000");
    let model = status.model.as_ref().unwrap();
    assert_eq!(
        (model.name.as_str(), model.ready, model.count),
        ("densenet", true, 2)
    );
    for kind in ["Ready", "Available", "ModelReady", "ExtensionsReady"] {
        let c = condition(&status, kind);
        assert_eq!(c.status, "True", "{kind}: {c:?}");
        assert_eq!(c.observed_generation, Some(4));
        assert_eq!(c.last_transition_time, at(100));
    }
    assert_eq!(condition(&status, "Degraded").status, "False");
    assert_eq!(status.extensions_summary.as_deref(), Some("4/4 active"));
    let bt = status
        .extensions
        .iter()
        .find(|e| e.name == "binary_tensor_data")
        .unwrap();
    assert_eq!(bt.state, ExtensionState::Active);
    assert_eq!(bt.implementation, Some(Implementation::Sidecar));
    assert_eq!(bt.pods_reporting, 2);
    assert!(bt.requested);
}

#[test]
fn transition_time_moves_only_when_the_status_changes() {
    let isvc = with_spec("svc", MINIMAL);
    let d = deployment(true, 1, 1);
    let reports = [report("a", Ok(healthy(&[])))];
    let first = status_of(&isvc, Some(&d), &reports, 100, None);
    let same = status_of(&isvc, Some(&d), &reports, 200, Some(&first));
    assert_eq!(same, first, "nothing changed, so nothing to write");
    let down = deployment(false, 1, 0);
    let later = status_of(&isvc, Some(&down), &[], 300, Some(&same));
    assert_eq!(condition(&later, "Available").last_transition_time, at(300));
    assert_eq!(condition(&later, "Ready").status, "False");
    assert_eq!(condition(&later, "Ready").last_transition_time, at(300));
    // Degraded stayed False throughout: its time is the first one.
    assert_eq!(condition(&later, "Degraded").last_transition_time, at(100));
}

#[test]
fn requested_extensions_missing_or_mixed() {
    let spec = format!(
        "{MINIMAL}  extensions:\n    systemSharedMemory:\n      enabled: true\n      size: 1Gi\n    sequence:\n      enabled: true\n"
    );
    let isvc = with_spec("svc", &spec);
    let d = deployment(true, 2, 2);
    let reports = [
        report(
            "a",
            Ok(healthy(&[
                ext("system_shared_memory", "Active"),
                ext("sequence", "Unsupported"),
            ])),
        ),
        report(
            "b",
            Ok(healthy(&[
                ext("system_shared_memory", "Disabled"),
                ext("sequence", "Unsupported"),
            ])),
        ),
    ];
    let status = status_of(&isvc, Some(&d), &reports, 1, None);
    let shm = status
        .extensions
        .iter()
        .find(|e| e.name == "system_shared_memory")
        .unwrap();
    assert_eq!(shm.state, ExtensionState::Degraded);
    assert_eq!(shm.reason.as_deref(), Some("active on 1 of 2 pods"));
    let seq = status
        .extensions
        .iter()
        .find(|e| e.name == "sequence")
        .unwrap();
    assert_eq!(seq.state, ExtensionState::Unsupported);
    assert_eq!(seq.reason.as_deref(), Some("sequence is Unsupported"));
    assert_eq!(condition(&status, "ExtensionsReady").status, "False");
    assert!(
        condition(&status, "ExtensionsReady")
            .message
            .contains("sequence")
    );
    assert_eq!(condition(&status, "Degraded").status, "True");
    assert_eq!(condition(&status, "Ready").status, "False");
    assert_eq!(status.extensions_summary.as_deref(), Some("4/6 active"));
}

#[test]
fn silent_pods_degrade_and_no_reports_leave_extensions_pending() {
    let isvc = with_spec("svc", MINIMAL);
    let d = deployment(true, 2, 2);
    let reports = [report("a", Ok(healthy(&[]))), report("b", Err("timed out"))];
    let status = status_of(&isvc, Some(&d), &reports, 1, None);
    assert_eq!(condition(&status, "Degraded").status, "True");
    assert_eq!(condition(&status, "Degraded").reason, "PodsNotReporting");
    assert!(condition(&status, "Degraded").message.contains('b'));
    assert_eq!(condition(&status, "ModelReady").status, "True");

    let none = status_of(&isvc, Some(&d), &[report("a", Err("refused"))], 1, None);
    assert_eq!(condition(&none, "ModelReady").reason, "NoPodReporting");
    assert!(
        none.extensions
            .iter()
            .all(|e| e.state == ExtensionState::Pending)
    );
    assert_eq!(none.model, None, "no spec models and nobody reported any");
}

#[test]
fn scaled_to_zero_and_missing_deployment_are_not_available() {
    let zero = with_spec("svc", &format!("  replicas: 0\n{MINIMAL}"));
    let status = status_of(&zero, None, &[], 1, None);
    assert_eq!(condition(&status, "Available").reason, "ScaledToZero");
    let isvc = with_spec("svc", MINIMAL);
    let status = status_of(&isvc, None, &[], 1, None);
    assert_eq!(condition(&status, "Available").reason, "DeploymentMissing");
    assert_eq!(condition(&status, "ModelReady").reason, "NoReadyPods");
}

#[test]
fn models_not_ready_block_ready() {
    let isvc = with_spec("svc", &format!("{MINIMAL}  models:\n  - name: resnet\n"));
    let d = deployment(true, 1, 1);
    let mut starting = healthy(&[]);
    starting.ready = false;
    let status = status_of(&isvc, Some(&d), &[report("a", Ok(starting))], 1, None);
    assert_eq!(condition(&status, "ModelReady").status, "False");
    assert_eq!(condition(&status, "Ready").status, "False");
    let model = status.model.unwrap();
    assert_eq!(
        (model.name.as_str(), model.ready, model.count),
        ("resnet", false, 1)
    );
}

#[test]
fn the_canarys_pods_and_each_variants_calls_summed_over_the_splitting_sidecars() {
    use infergate_operator::controller::status::{
        AdminCalls, AdminCanary, AdminVariantCalls, canary_status,
    };
    let plain = with_spec("svc", MINIMAL);
    assert_eq!(canary_status(&plain, None, &[]), None);
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}  canary: {{trafficPercent: 20, model: {{image: m:2}}}}\n"),
    );
    let splitting = |stable: u64, canary: u64, failed: u64| PodReport {
        pod: format!("svc-{stable}"),
        outcome: Ok(AdminStatus {
            canary: Some(AdminCanary {
                calls: AdminVariantCalls {
                    stable: AdminCalls {
                        success: stable,
                        failure: 0,
                    },
                    canary: AdminCalls {
                        success: canary,
                        failure: failed,
                    },
                },
            }),
            ..healthy(&[])
        }),
    };
    let silent = PodReport {
        pod: "svc-x".into(),
        outcome: Err("no answer".into()),
    };
    let reports = [splitting(80, 19, 1), splitting(70, 30, 0), silent];
    let status = canary_status(&isvc, Some(&deployment(true, 2, 1)), &reports).unwrap();
    assert_eq!(status.traffic_percent, 20);
    assert_eq!((status.replicas, status.ready_replicas), (2, 1));
    let calls = status.calls.unwrap();
    assert_eq!((calls.stable.success, calls.stable.failure), (150, 0));
    assert_eq!((calls.canary.success, calls.canary.failure), (49, 1));
    // Before any sidecar answers: the canary's pods, no calls.
    let early = canary_status(&isvc, None, &[]).unwrap();
    assert_eq!((early.replicas, early.calls), (0, None));
}
