//! Failures in status: what the Deployment and the pods report, in `lastFailureInfo` and the
//! conditions, and rollouts that are not complete (no cluster).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, with_spec};
use infergate_operator::controller::failures::Failure;
use infergate_operator::controller::status::{
    AdminBackend, AdminExtension, AdminStatus, Observed, PodReport, compute,
};
use infergate_operator::crd::{InferenceService, InferenceServiceStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

fn service(generation: i64) -> InferenceService {
    let mut isvc = with_spec("svc", MINIMAL);
    isvc.metadata.generation = Some(generation);
    isvc
}

/// A healthy sidecar report from a ready pod.
fn healthy(pod: &str) -> PodReport {
    let extensions = [
        "binary_tensor_data",
        "classification",
        "model_repository",
        "statistics",
    ]
    .iter()
    .map(|name| AdminExtension {
        name: (*name).into(),
        state: "Active".into(),
        implementation: "sidecar".into(),
        reason: String::new(),
    })
    .collect();
    PodReport {
        pod: pod.into(),
        outcome: Ok(AdminStatus {
            ready: true,
            extensions,
            backend: AdminBackend {
                kind: "upstream".into(),
                models: vec!["m".into()],
            },
            ..AdminStatus::default()
        }),
    }
}

/// A Deployment from its JSON (metadata, spec and status as the server stores them).
fn deployment(value: serde_json::Value) -> Deployment {
    serde_json::from_value(value).unwrap()
}

/// A Deployment of generation 2 whose controller has seen it: `desired` replicas, `updated` of
/// them on the current spec, `running` in all, Available as given, and extra conditions.
fn rollout(
    desired: i32,
    updated: i32,
    running: i32,
    available: bool,
    extra: serde_json::Value,
) -> Deployment {
    let mut conditions = vec![json!({
        "type": "Available", "status": if available { "True" } else { "False" },
        "message": "from the Deployment"
    })];
    conditions.extend(extra.as_array().cloned().unwrap_or_default());
    deployment(json!({
        "metadata": {"name": "svc", "generation": 2},
        "spec": {"replicas": desired, "selector": {}, "template": {}},
        "status": {
            "observedGeneration": 2, "replicas": running, "updatedReplicas": updated,
            "readyReplicas": running, "availableReplicas": running, "conditions": conditions
        }
    }))
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn status_with(
    isvc: &InferenceService,
    deployment: Option<&Deployment>,
    pods: &[Pod],
    reports: &[PodReport],
    refusal: Option<Failure>,
    now: i64,
    previous: Option<&InferenceServiceStatus>,
) -> InferenceServiceStatus {
    compute(
        isvc,
        &Observed {
            deployment,
            pods,
            reports,
            refusal,
            now: at(now),
        },
        previous,
    )
}

fn condition<'a>(status: &'a InferenceServiceStatus, kind: &str) -> &'a Condition {
    status.conditions.iter().find(|c| c.type_ == kind).unwrap()
}

#[test]
fn a_new_generation_pending_while_the_old_pods_serve_is_not_ready() {
    let isvc = service(5);
    // One pod of the new spec, Pending (no node fits); the old pod still serves and reports.
    let d = rollout(1, 1, 2, true, json!([]));
    let pending = pod(json!({
        "metadata": {"name": "svc-new-abc"},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        }]}
    }));
    let status = status_with(
        &isvc,
        Some(&d),
        &[pending],
        &[healthy("svc-old-xyz")],
        None,
        100,
        None,
    );
    assert_eq!(status.observed_generation, Some(5));
    assert_eq!(condition(&status, "Available").status, "True");
    let rolled = condition(&status, "RolledOut");
    assert_eq!(
        (rolled.status.as_str(), rolled.reason.as_str()),
        ("False", "RolloutInProgress")
    );
    assert!(rolled.message.contains("previous spec"), "{rolled:?}");
    let ready = condition(&status, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.observed_generation, Some(5));
    assert_eq!(ready.reason, "Unschedulable");
    assert!(ready.message.contains("didn't match"), "{ready:?}");
    let info = status.last_failure_info.as_ref().unwrap();
    assert_eq!(info.reason, "Unschedulable");
    assert_eq!(info.location.as_deref(), Some("Pod/svc-new-abc"));
    assert_eq!(info.generation, Some(5));
    assert_eq!(info.time, at(100));
}

#[test]
fn a_rollout_not_yet_observed_or_with_too_few_new_pods_is_not_rolled_out() {
    let isvc = service(3);
    let mut unobserved = rollout(2, 2, 2, true, json!([]));
    unobserved.metadata.generation = Some(3);
    let status = status_with(
        &isvc,
        Some(&unobserved),
        &[],
        &[healthy("a")],
        None,
        1,
        None,
    );
    assert_eq!(condition(&status, "RolledOut").reason, "RolloutPending");
    assert_eq!(condition(&status, "Ready").status, "False");
    // Not ready without a failure: the message names what is missing and why.
    assert_eq!(condition(&status, "Ready").reason, "NotReady");
    assert!(
        condition(&status, "Ready")
            .message
            .starts_with("not yet: RolledOut;")
    );

    let halfway = rollout(2, 1, 2, true, json!([]));
    let status = status_with(&isvc, Some(&halfway), &[], &[healthy("a")], None, 1, None);
    assert_eq!(
        condition(&status, "RolledOut").message,
        "1 of 2 pods run the current spec"
    );

    let done = rollout(2, 2, 2, true, json!([]));
    let status = status_with(
        &isvc,
        Some(&done),
        &[],
        &[healthy("a"), healthy("b")],
        None,
        1,
        None,
    );
    assert_eq!(condition(&status, "RolledOut").reason, "RolloutComplete");
    assert_eq!(condition(&status, "Ready").status, "True");
    assert_eq!(status.last_failure_info, None);
}

#[test]
fn pods_refused_by_admission_show_in_ready_and_last_failure_info() {
    let isvc = service(1);
    let d = rollout(
        1,
        0,
        0,
        false,
        json!([{
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "pods \"svc-5d8f-x\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true"
        }]),
    );
    let status = status_with(&isvc, Some(&d), &[], &[], None, 7, None);
    let ready = condition(&status, "Ready");
    assert_eq!(ready.reason, "PodsRejected");
    assert!(ready.message.contains("violates PodSecurity"), "{ready:?}");
    let info = status.last_failure_info.unwrap();
    assert_eq!(info.location.as_deref(), Some("Deployment/svc"));
    assert!(
        info.message
            .starts_with("the cluster refused to create pods")
    );
}

#[test]
fn a_rollout_past_its_deadline_is_reported() {
    let isvc = service(1);
    let d = rollout(
        1,
        1,
        1,
        false,
        json!([{
            "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet \"svc-6c\" has timed out progressing."
        }]),
    );
    let status = status_with(&isvc, Some(&d), &[], &[], None, 7, None);
    assert_eq!(
        condition(&status, "RolledOut").reason,
        "ProgressDeadlineExceeded"
    );
    assert_eq!(
        condition(&status, "Ready").reason,
        "ProgressDeadlineExceeded"
    );
    assert!(
        status
            .last_failure_info
            .unwrap()
            .message
            .contains("timed out progressing")
    );
}

fn init_failed_pod(name: &str, container: &str, waiting: Option<&str>) -> Pod {
    let terminated = json!({"exitCode": 3, "reason": "Error",
        "message": "s3://models/resnet: object not found"});
    let (state, last) = match waiting {
        Some(reason) => (
            json!({"waiting": {"reason": reason}}),
            json!({"terminated": terminated}),
        ),
        None => (json!({"terminated": terminated}), json!({})),
    };
    pod(json!({
        "metadata": {"name": name},
        "status": {"phase": "Pending", "initContainerStatuses": [
            {"name": "infergate", "image": "s", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "PodInitializing"}}},
            {"name": container, "image": "fetch", "imageID": "", "ready": false, "restartCount": 1,
             "state": state, "lastState": last}
        ]}
    }))
}

#[test]
fn a_model_that_cannot_be_fetched_names_the_cause() {
    let isvc = service(2);
    let d = rollout(1, 1, 1, false, json!([]));
    for waiting in [None, Some("CrashLoopBackOff")] {
        let pods = [init_failed_pod("svc-abc", "storage-initializer", waiting)];
        let status = status_with(&isvc, Some(&d), &pods, &[], None, 9, None);
        let info = status.last_failure_info.as_ref().unwrap();
        assert_eq!(info.reason, "ModelFetchFailed", "{waiting:?}");
        assert_eq!(info.exit_code, Some(3));
        assert!(info.message.contains("object not found"), "{info:?}");
        assert_eq!(
            info.location.as_deref(),
            Some("Pod/svc-abc, container storage-initializer")
        );
        assert_eq!(condition(&status, "Ready").reason, "ModelFetchFailed");
    }
    // A user's own init container that fails is named as such.
    let pods = [init_failed_pod("svc-abc", "warmup", None)];
    let status = status_with(&isvc, Some(&d), &pods, &[], None, 9, None);
    assert_eq!(
        status.last_failure_info.unwrap().reason,
        "InitContainerFailed"
    );
}

#[test]
fn a_url_in_a_termination_message_reaches_the_status_redacted() {
    let isvc = service(2);
    let d = rollout(1, 1, 1, false, json!([]));
    let mut failed = init_failed_pod("svc-abc", "storage-initializer", None);
    let statuses = failed
        .status
        .as_mut()
        .unwrap()
        .init_container_statuses
        .as_mut()
        .unwrap();
    let terminated = statuses[1]
        .state
        .as_mut()
        .unwrap()
        .terminated
        .as_mut()
        .unwrap();
    terminated.message =
        Some("fetching https://u:hunter2@b.example/m.tgz?X-Amz-Signature=f00d failed: 403".into());
    let status = status_with(&isvc, Some(&d), &[failed], &[], None, 9, None);
    let info = status.last_failure_info.as_ref().unwrap();
    assert!(
        info.message
            .contains("fetching https://<redacted>@b.example/m.tgz?<redacted> failed: 403"),
        "{info:?}"
    );
    assert!(!info.message.contains("hunter2") && !info.message.contains("f00d"));
    assert!(!condition(&status, "Ready").message.contains("f00d"));
}

#[test]
fn images_configuration_and_crash_loops_are_named() {
    let isvc = service(1);
    let d = rollout(1, 1, 1, false, json!([]));
    let waiting = |reason: &str, message: &str| {
        pod(json!({
            "metadata": {"name": "svc-abc"},
            "status": {"containerStatuses": [{
                "name": "model", "image": "triton:typo", "imageID": "", "ready": false,
                "restartCount": 4, "state": {"waiting": {"reason": reason, "message": message}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }))
    };
    for (reason, expected) in [
        ("ImagePullBackOff", "ImagePullFailed"),
        ("ErrImagePull", "ImagePullFailed"),
        ("CreateContainerConfigError", "ContainerConfigError"),
        ("CrashLoopBackOff", "ContainerCrashing"),
    ] {
        let pods = [waiting(reason, "secret \"creds\" not found")];
        let status = status_with(&isvc, Some(&d), &pods, &[], None, 1, None);
        let info = status.last_failure_info.unwrap();
        assert_eq!(info.reason, expected, "{reason}");
        if expected == "ContainerCrashing" {
            assert_eq!(info.exit_code, Some(137));
            assert!(info.message.contains("OOMKilled"), "{info:?}");
            assert!(info.message.contains("4 restarts"), "{info:?}");
        }
    }
}

#[test]
fn a_container_running_again_after_a_restart_is_not_a_failure() {
    let isvc = service(1);
    let d = rollout(1, 1, 1, true, json!([]));
    let restarted = pod(json!({
        "metadata": {"name": "svc-abc"},
        "status": {
            "initContainerStatuses": [{"name": "infergate", "image": "s", "imageID": "",
                "ready": true, "restartCount": 1, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1}}}],
            "containerStatuses": [{"name": "model", "image": "m", "imageID": "",
                "ready": true, "restartCount": 2, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1}}}]
        }
    }));
    let status = status_with(
        &isvc,
        Some(&d),
        &[restarted],
        &[healthy("svc-abc")],
        None,
        1,
        None,
    );
    assert_eq!(condition(&status, "Ready").status, "True");
    assert_eq!(condition(&status, "Degraded").status, "False");
    assert_eq!(status.last_failure_info, None);
}

#[test]
fn a_failing_pod_beside_serving_ones_degrades_a_ready_service() {
    let isvc = service(1);
    let d = rollout(2, 2, 2, true, json!([]));
    let crashing = pod(json!({
        "metadata": {"name": "svc-b"},
        "status": {"containerStatuses": [{"name": "model", "image": "m", "imageID": "",
            "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "message": "CUDA out of memory"}}}]}
    }));
    let status = status_with(
        &isvc,
        Some(&d),
        &[crashing],
        &[healthy("svc-a")],
        None,
        1,
        None,
    );
    assert_eq!(condition(&status, "Ready").status, "True");
    let degraded = condition(&status, "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "ContainerCrashing")
    );
    assert!(degraded.message.contains("CUDA out of memory"));
}

#[test]
fn the_last_failure_keeps_its_first_time_and_stays_after_recovery() {
    let isvc = service(1);
    let refused = || {
        Some(Failure {
            reason: "ChildRejected",
            message: "the API server refused Deployment 'svc' (422): volume not found".into(),
            location: Some("Deployment/svc".into()),
            exit_code: None,
        })
    };
    let first = status_with(&isvc, None, &[], &[], refused(), 10, None);
    assert_eq!(condition(&first, "Ready").reason, "ChildRejected");
    let again = status_with(&isvc, None, &[], &[], refused(), 50, Some(&first));
    assert_eq!(again.last_failure_info.as_ref().unwrap().time, at(10));
    assert_eq!(again, first, "an unchanged failure changes nothing");

    let d = rollout(1, 1, 1, true, json!([]));
    let recovered = status_with(
        &isvc,
        Some(&d),
        &[],
        &[healthy("a")],
        None,
        90,
        Some(&again),
    );
    assert_eq!(condition(&recovered, "Ready").status, "True");
    assert_eq!(recovered.last_failure_info, first.last_failure_info);
}
