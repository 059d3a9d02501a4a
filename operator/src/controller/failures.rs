//! Failures the cluster reports about an InferenceService's Deployment and pods, found and put in
//! plain words for `status.lastFailureInfo` and the conditions. Pure: the caller passes what it
//! read, so every rule is tested without a cluster.
//!
//! Kubernetes reports these in places a user of the InferenceService does not look: the
//! Deployment's conditions (pods refused by admission, a rollout that stopped progressing) and
//! each pod's container statuses (an image that cannot be pulled, a model that cannot be fetched,
//! a container that keeps crashing, a pod no node can take).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

use crate::pod_names::{SIDECAR_CONTAINER, STORAGE_INIT_CONTAINER};

/// One failure, before it gets its time and generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The kind of failure (`FailureInfo.reason`).
    pub reason: &'static str,
    /// What went wrong, in words.
    pub message: String,
    /// The object, or the pod and container.
    pub location: Option<String>,
    /// Exit code of the failed container, when one failed.
    pub exit_code: Option<i32>,
}

/// Pods the API server would not create (admission: PodSecurity, quotas, webhooks), as the
/// Deployment reports them (its `ReplicaFailure` condition, copied from the ReplicaSet).
pub fn pods_rejected(deployment: &Deployment) -> Option<Failure> {
    let conditions = deployment.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| Failure {
            reason: "PodsRejected",
            message: format!(
                "the cluster refused to create pods: {}",
                c.message.as_deref().unwrap_or("no reason given")
            ),
            location: Some(format!("Deployment/{}", deployment.name_any())),
            exit_code: None,
        })
}

/// The failure the Deployment and its pods show, the cause before the symptom: pods the cluster
/// will not create, then what the pods say, and only then a rollout past its deadline.
pub fn of_children(deployment: Option<&Deployment>, pods: &[Pod]) -> Option<Failure> {
    deployment
        .and_then(pods_rejected)
        .or_else(|| from_pods(pods))
        .or_else(|| deployment.and_then(stalled))
}

/// A rollout past its progress deadline. The pods usually say why (no node, an image that
/// cannot be pulled): their failure is shown before this one.
pub fn stalled(deployment: &Deployment) -> Option<Failure> {
    let conditions = deployment.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| {
            c.type_ == "Progressing"
                && c.status == "False"
                && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        })
        .map(|c| Failure {
            reason: "ProgressDeadlineExceeded",
            message: format!(
                "the rollout made no progress within its deadline (rollout.progressDeadlineSeconds): {}",
                c.message.as_deref().unwrap_or("no reason given")
            ),
            location: Some(format!("Deployment/{}", deployment.name_any())),
            exit_code: None,
        })
}

/// The most telling failure among the pods (terminating ones left out): a model that could not
/// be fetched first, then images, configuration, crashes, and pods no node takes.
pub fn from_pods(pods: &[Pod]) -> Option<Failure> {
    let mut found: Vec<(u8, Failure)> = Vec::new();
    let mut sorted: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    sorted.sort_by_key(|p| p.name_any());
    for pod in sorted {
        found.extend(pod_failures(pod));
    }
    found
        .into_iter()
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, f)| f)
}

/// Every failure of one pod, each with its rank (lower is shown first).
fn pod_failures(pod: &Pod) -> Vec<(u8, Failure)> {
    let mut out = Vec::new();
    let name = pod.name_any();
    let Some(status) = pod.status.as_ref() else {
        return out;
    };
    let init = status.init_container_statuses.iter().flatten();
    let regular = status.container_statuses.iter().flatten();
    for (container, is_init) in init.map(|c| (c, true)).chain(regular.map(|c| (c, false))) {
        if let Some(failure) = container_failure(&name, container, is_init) {
            out.push(failure);
        }
    }
    if let Some(c) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        out.push((
            6,
            Failure {
                reason: "Unschedulable",
                message: format!(
                    "no node can take the pod: {}",
                    c.message.as_deref().unwrap_or("no reason given")
                ),
                location: Some(format!("Pod/{name}")),
                exit_code: None,
            },
        ));
    }
    out
}

fn container_failure(pod: &str, c: &ContainerStatus, is_init: bool) -> Option<(u8, Failure)> {
    let location = Some(format!("Pod/{pod}, container {}", c.name));
    let state = c.state.as_ref();
    let waiting = state.and_then(|s| s.waiting.as_ref());
    let waiting_reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
    let waiting_message = waiting.and_then(|w| w.message.as_deref()).unwrap_or("");
    // A failed run: the current state when the container stopped for good (an init container
    // without restarts), else the last one (crash loops, init containers being retried).
    let terminated = state
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.exit_code != 0)
        .or_else(|| {
            c.last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .filter(|t| t.exit_code != 0)
        });

    if matches!(
        waiting_reason,
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull"
    ) {
        return Some((
            2,
            Failure {
                reason: "ImagePullFailed",
                message: format!(
                    "image {} of container {} cannot be pulled ({waiting_reason}): {waiting_message}",
                    c.image, c.name
                ),
                location,
                exit_code: None,
            },
        ));
    }
    if matches!(
        waiting_reason,
        "CreateContainerConfigError" | "CreateContainerError"
    ) {
        return Some((
            3,
            Failure {
                reason: "ContainerConfigError",
                message: format!(
                    "container {} cannot be created ({waiting_reason}): {waiting_message}",
                    c.name
                ),
                location,
                exit_code: None,
            },
        ));
    }
    let terminated = terminated?;
    // A container that stopped with an error and is not running again: an init container as it
    // stopped, or any container waiting to be restarted after crashing. One that runs again
    // after a restart is not (yet) a failure.
    let stopped = state.is_some_and(|s| s.terminated.is_some());
    if !(waiting_reason == "CrashLoopBackOff" || (is_init && stopped)) {
        return None;
    }
    // A termination message may quote a URL with its credentials (a fetch error naming a
    // presigned URL, a user's container): status and Events carry it redacted.
    let said = terminated
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {}", crate::storage_uri::redact_urls(m)))
        .unwrap_or_default();
    let why = terminated.reason.as_deref().unwrap_or("Error");
    let code = terminated.exit_code;
    Some(if is_init && c.name == STORAGE_INIT_CONTAINER {
        (
            1,
            Failure {
                reason: "ModelFetchFailed",
                message: format!(
                    "the model could not be fetched from storage (exit code {code}){said}"
                ),
                location,
                exit_code: Some(code),
            },
        )
    } else if is_init && c.name != SIDECAR_CONTAINER {
        (
            4,
            Failure {
                reason: "InitContainerFailed",
                message: format!(
                    "init container {} failed (exit code {code}, {why}){said}",
                    c.name
                ),
                location,
                exit_code: Some(code),
            },
        )
    } else {
        (
            5,
            Failure {
                reason: "ContainerCrashing",
                message: format!(
                    "container {} keeps stopping (exit code {code}, {why}, {} restarts){said}",
                    c.name, c.restart_count
                ),
                location,
                exit_code: Some(code),
            },
        )
    })
}
