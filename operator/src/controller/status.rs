//! `status` from what the cluster and the sidecars report. Pure: the caller passes the
//! Deployment, the probe results of the ready pods, the previous status and the clock, so every
//! rule here is tested without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use serde::Deserialize;

use super::failures::{self, Failure};
use super::tls_status::{AdminTls, tls_status};
use crate::crd::{
    CallCounts, CanaryStatus, ConditionType, ExtensionState, ExtensionStatus, FailureInfo,
    Implementation, InferenceService, InferenceServiceStatus, ModelStatus, VariantCalls,
};
use crate::render;

/// Extensions every sidecar serves whatever the spec says: they count as requested.
pub const ALWAYS_ON: [&str; 4] = [
    "binary_tensor_data",
    "classification",
    "model_repository",
    "statistics",
];

/// What `GET /status` on a sidecar's admin port answers (the fields the operator reads).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminStatus {
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub extensions: Vec<AdminExtension>,
    #[serde(default)]
    pub backend: AdminBackend,
    #[serde(default)]
    pub tls: AdminTls,
    /// The canary the sidecar splits calls with, if any.
    #[serde(default)]
    pub canary: Option<AdminCanary>,
    /// How busy the sidecar is (scale to zero reads it); absent from older sidecars.
    #[serde(default)]
    pub traffic: Option<AdminTraffic>,
    /// An activator's report (scale to zero), where the pod is an activator.
    #[serde(default)]
    pub activator: Option<AdminActivator>,
}

/// What an activator holds.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminActivator {
    #[serde(default)]
    pub held_calls: u64,
    #[serde(default)]
    pub held_bytes: u64,
    /// Seconds since its last inference call (held, refused or passed on); absent from older
    /// activators.
    #[serde(default)]
    pub quiet_seconds: Option<u64>,
}

/// Inference calls and streams in flight, seconds since there were none, live sequences.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminTraffic {
    #[serde(default)]
    pub in_flight: u64,
    #[serde(default)]
    pub quiet_seconds: u64,
    #[serde(default)]
    pub live_sequences: u64,
}

/// The canary as a sidecar that splits calls with it reports it: each variant's calls.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminCanary {
    #[serde(default)]
    pub calls: AdminVariantCalls,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminVariantCalls {
    #[serde(default)]
    pub stable: AdminCalls,
    #[serde(default)]
    pub canary: AdminCalls,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminCalls {
    #[serde(default)]
    pub success: u64,
    #[serde(default)]
    pub failure: u64,
}

/// The canary's status, where the spec has one: its Deployment's counts, and each variant's
/// calls summed over the reports of the service's sidecars that split them.
pub fn canary_status(
    isvc: &InferenceService,
    deployment: Option<&Deployment>,
    reports: &[PodReport],
) -> Option<CanaryStatus> {
    let canary = isvc.spec.canary.as_ref()?;
    let counts = deployment.and_then(|d| d.status.as_ref());
    let splitting: Vec<&AdminCanary> = reports
        .iter()
        .filter_map(|r| r.outcome.as_ref().ok()?.canary.as_ref())
        .collect();
    let sum = |pick: fn(&AdminVariantCalls) -> &AdminCalls| CallCounts {
        success: splitting.iter().map(|c| pick(&c.calls).success).sum(),
        failure: splitting.iter().map(|c| pick(&c.calls).failure).sum(),
    };
    Some(CanaryStatus {
        traffic_percent: canary.traffic_percent,
        replicas: counts.and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: counts.and_then(|s| s.ready_replicas).unwrap_or(0),
        calls: (!splitting.is_empty()).then(|| VariantCalls {
            stable: sum(|c| &c.stable),
            canary: sum(|c| &c.canary),
        }),
    })
}

/// One extension as a sidecar reports it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminExtension {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub implementation: String,
    #[serde(default)]
    pub reason: String,
}

/// The sidecar's backend: built-in models, or a model server it discovered.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminBackend {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub models: Vec<String>,
}

/// The probe of one ready pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodReport {
    pub pod: String,
    pub outcome: Result<AdminStatus, String>,
}

/// Everything the status is computed from.
pub struct Observed<'a> {
    /// The Deployment as stored; `None` when it was not applied.
    pub deployment: Option<&'a Deployment>,
    /// The service's pods, all of them (ready or not, any generation).
    pub pods: &'a [Pod],
    /// The probes of the ready pods.
    pub reports: &'a [PodReport],
    /// Why the children could not be applied, when they could not (the spec or a child refused).
    pub refusal: Option<Failure>,
    pub now: Time,
}

/// The extensions the spec asks for (always-on ones included), by protocol name.
pub fn requested_extensions(isvc: &InferenceService) -> Vec<&'static str> {
    let ext = &isvc.spec.extensions;
    let mut out: Vec<&'static str> = ALWAYS_ON.to_vec();
    if ext.system_shared_memory.enabled {
        out.push("system_shared_memory");
    }
    if ext.cuda_shared_memory.enabled {
        out.push("cuda_shared_memory");
    }
    if ext.sequence.enabled {
        out.push("sequence");
    }
    out.sort_unstable();
    out
}

/// The whole status for `isvc`.
pub fn compute(
    isvc: &InferenceService,
    observed: &Observed<'_>,
    previous: Option<&InferenceServiceStatus>,
) -> InferenceServiceStatus {
    let generation = isvc.metadata.generation;
    let deployment_status = observed.deployment.and_then(|d| d.status.as_ref());
    let answered: Vec<&AdminStatus> = observed
        .reports
        .iter()
        .filter_map(|r| r.outcome.as_ref().ok())
        .collect();
    let silent: Vec<&PodReport> = observed
        .reports
        .iter()
        .filter(|r| r.outcome.is_err())
        .collect();
    let requested = requested_extensions(isvc);
    let extensions = aggregate_extensions(&requested, &answered);

    let available = available_condition(isvc, observed.deployment);
    let rolled_out = rolled_out_condition(observed.deployment);
    // The cause before the symptom: a refused spec or child first, then what the children show.
    let failure = observed
        .refusal
        .clone()
        .or_else(|| failures::of_children(observed.deployment, observed.pods));
    let model_ready = model_ready_condition(observed.reports, &answered);
    let not_ready: Vec<&str> = extensions
        .iter()
        .filter(|e| {
            e.requested && !matches!(e.state, ExtensionState::Active | ExtensionState::Degraded)
        })
        .map(|e| e.name.as_str())
        .collect();
    let extensions_ready = if not_ready.is_empty() {
        (
            true,
            "ExtensionsActive",
            "every requested extension is active".to_string(),
        )
    } else {
        (
            false,
            "ExtensionsNotActive",
            format!("not active: {}", not_ready.join(", ")),
        )
    };
    let degraded_ext: Vec<&str> = extensions
        .iter()
        .filter(|e| e.requested && e.state == ExtensionState::Degraded)
        .map(|e| e.name.as_str())
        .collect();
    let ready_parts = [
        (&available, ConditionType::Available),
        (&rolled_out, ConditionType::RolledOut),
        (&model_ready, ConditionType::ModelReady),
        (&extensions_ready, ConditionType::ExtensionsReady),
    ];
    let failing: Vec<&str> = ready_parts
        .iter()
        .filter(|(c, _)| !c.0)
        .map(|(_, kind)| kind.as_str())
        .collect();
    let ready = if failing.is_empty() {
        (
            true,
            "Ready",
            "the service is available with its models and extensions".to_string(),
        )
    } else if let Some(f) = &failure {
        (false, f.reason, f.message.clone())
    } else {
        let first = ready_parts
            .iter()
            .find(|(c, _)| !c.0)
            .map(|(c, _)| c.2.as_str())
            .unwrap_or_default();
        (
            false,
            "NotReady",
            format!("not yet: {}; {first}", failing.join(", ")),
        )
    };
    let degraded = if let Some(f) = failure.as_ref().filter(|_| ready.0) {
        (true, f.reason, f.message.clone())
    } else if !silent.is_empty() {
        let pods: Vec<&str> = silent.iter().map(|r| r.pod.as_str()).collect();
        (
            true,
            "PodsNotReporting",
            format!("no admin status from ready pods: {}", pods.join(", ")),
        )
    } else if !degraded_ext.is_empty() {
        (
            true,
            "ExtensionsDegraded",
            format!("degraded: {}", degraded_ext.join(", ")),
        )
    } else {
        (false, "AsExpected", "nothing is degraded".to_string())
    };

    let models_ready = model_ready.0;
    let conditions = [
        (ConditionType::Ready, ready),
        (ConditionType::Available, available),
        (ConditionType::RolledOut, rolled_out),
        (ConditionType::ModelReady, model_ready),
        (ConditionType::ExtensionsReady, extensions_ready),
        (ConditionType::Degraded, degraded),
    ]
    .into_iter()
    .map(|(kind, (ok, reason, message))| {
        condition(
            kind,
            ok,
            reason,
            message,
            generation,
            &observed.now,
            previous,
        )
    })
    .collect();

    let active = extensions
        .iter()
        .filter(|e| e.requested && e.state == ExtensionState::Active)
        .count();
    InferenceServiceStatus {
        observed_generation: generation,
        replicas: deployment_status.and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: deployment_status
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        selector: Some(render::selector_string(isvc)),
        url: Some(render::service_urls(isvc)),
        model: model_status(isvc, &answered, models_ready),
        conditions,
        extensions_summary: Some(format!("{active}/{} active", requested.len())),
        extensions,
        last_failure_info: last_failure_info(failure, generation, &observed.now, previous),
        tls: Some(tls_status(
            isvc,
            &answered.iter().map(|a| &a.tls).collect::<Vec<_>>(),
        )),
        canary: None,
        scale_to_zero: None,
    }
}

/// The failure seen now, keeping the time of the same failure seen before; the previous one when
/// nothing fails now.
fn last_failure_info(
    failure: Option<Failure>,
    generation: Option<i64>,
    now: &Time,
    previous: Option<&InferenceServiceStatus>,
) -> Option<FailureInfo> {
    let before = previous.and_then(|p| p.last_failure_info.as_ref());
    let Some(failure) = failure else {
        return before.cloned();
    };
    let same = before.filter(|b| b.reason == failure.reason && b.location == failure.location);
    Some(FailureInfo {
        reason: failure.reason.to_string(),
        message: failure.message,
        location: failure.location,
        exit_code: failure.exit_code,
        generation: same.map_or(generation, |b| b.generation),
        time: same.map_or_else(|| now.clone(), |b| b.time.clone()),
    })
}

/// One entry per extension that is requested or that a pod reported, by name.
fn aggregate_extensions(requested: &[&str], answered: &[&AdminStatus]) -> Vec<ExtensionStatus> {
    let mut by_name: BTreeMap<&str, Vec<&AdminExtension>> = BTreeMap::new();
    for name in requested {
        by_name.entry(name).or_default();
    }
    for status in answered {
        for ext in &status.extensions {
            by_name.entry(ext.name.as_str()).or_default().push(ext);
        }
    }
    by_name
        .into_iter()
        .map(|(name, reports)| {
            let requested = requested.contains(&name);
            extension_status(name, requested, &reports, answered.len())
        })
        .collect()
}

fn extension_status(
    name: &str,
    requested: bool,
    reports: &[&AdminExtension],
    pods_answering: usize,
) -> ExtensionStatus {
    let pods_reporting = i32::try_from(reports.len()).unwrap_or(i32::MAX);
    let implementation = reports
        .first()
        .and_then(|r| match r.implementation.as_str() {
            "sidecar" => Some(Implementation::Sidecar),
            "upstream" => Some(Implementation::Upstream),
            _ => None,
        });
    let reason_of = |r: &AdminExtension| (!r.reason.is_empty()).then(|| r.reason.clone());
    let (state, reason) = if reports.is_empty() {
        if pods_answering == 0 {
            (
                ExtensionState::Pending,
                Some("no pod has reported yet".to_string()),
            )
        } else {
            (
                ExtensionState::Unsupported,
                Some("the sidecar does not report this extension".to_string()),
            )
        }
    } else {
        let states: Vec<ExtensionState> = reports.iter().map(|r| parse_state(&r.state)).collect();
        let active = states
            .iter()
            .filter(|s| **s == ExtensionState::Active)
            .count();
        if active == reports.len() && reports.len() == pods_answering {
            (ExtensionState::Active, None)
        } else if states.iter().all(|s| *s == states[0]) && reports.len() == pods_answering {
            (states[0], reports.first().and_then(|r| reason_of(r)))
        } else if active > 0 {
            (
                ExtensionState::Degraded,
                Some(format!("active on {active} of {pods_answering} pods")),
            )
        } else {
            let first = reports
                .iter()
                .find(|r| parse_state(&r.state) != ExtensionState::Active)
                .or(reports.first());
            (
                first.map_or(ExtensionState::Unsupported, |r| parse_state(&r.state)),
                first.and_then(|r| reason_of(r)),
            )
        }
    };
    ExtensionStatus {
        name: name.to_string(),
        state,
        implementation,
        requested,
        reason,
        pods_reporting,
    }
}

fn parse_state(text: &str) -> ExtensionState {
    match text {
        "Active" => ExtensionState::Active,
        "Degraded" => ExtensionState::Degraded,
        "Disabled" => ExtensionState::Disabled,
        "Pending" => ExtensionState::Pending,
        _ => ExtensionState::Unsupported,
    }
}

fn available_condition(
    isvc: &InferenceService,
    deployment: Option<&Deployment>,
) -> (bool, &'static str, String) {
    if isvc.spec.autoscaling.is_none() && isvc.spec.replicas == 0 {
        return (false, "ScaledToZero", "spec.replicas is 0".to_string());
    }
    if isvc.spec.autoscaling.is_some()
        && deployment.and_then(|d| d.spec.as_ref()?.replicas) == Some(0)
    {
        return (
            false,
            "ScaledToZero",
            "the autoscaler scaled the service to zero pods".to_string(),
        );
    }
    let Some(deployment) = deployment else {
        return (
            false,
            "DeploymentMissing",
            "the Deployment does not exist yet".to_string(),
        );
    };
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
    match available {
        Some(c) if c.status == "True" => (
            true,
            "MinimumReplicasAvailable",
            c.message
                .clone()
                .unwrap_or_else(|| "the Deployment has its minimum availability".into()),
        ),
        Some(c) => (
            false,
            "MinimumReplicasUnavailable",
            c.message
                .clone()
                .unwrap_or_else(|| "the Deployment does not have minimum availability".into()),
        ),
        None => (
            false,
            "DeploymentProgressing",
            "the Deployment reports no availability yet".to_string(),
        ),
    }
}

/// Whether every pod runs the current spec. A Deployment that is available can still be rolling
/// out: the pods of the previous spec serve while the new ones start (or stay Pending), and the
/// service must not be called Ready for a spec it does not run yet.
fn rolled_out_condition(deployment: Option<&Deployment>) -> (bool, &'static str, String) {
    let Some(deployment) = deployment else {
        return (
            false,
            "DeploymentMissing",
            "the Deployment does not exist yet".to_string(),
        );
    };
    let status = deployment.status.clone().unwrap_or_default();
    if let Some(generation) = deployment.metadata.generation
        && status.observed_generation.unwrap_or(0) < generation
    {
        return (
            false,
            "RolloutPending",
            "the Deployment controller has not yet acted on the current spec".to_string(),
        );
    }
    if let Some(stalled) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    }) {
        return (
            false,
            "ProgressDeadlineExceeded",
            stalled
                .message
                .clone()
                .unwrap_or_else(|| "the rollout stopped progressing".to_string()),
        );
    }
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let running = status.replicas.unwrap_or(0);
    if updated < desired {
        return (
            false,
            "RolloutInProgress",
            format!("{updated} of {desired} pods run the current spec"),
        );
    }
    if running > updated {
        return (
            false,
            "RolloutInProgress",
            format!(
                "{} pods of the previous spec are still running",
                running - updated
            ),
        );
    }
    (
        true,
        "RolloutComplete",
        format!("every pod ({updated}) runs the current spec"),
    )
}

fn model_ready_condition(
    reports: &[PodReport],
    answered: &[&AdminStatus],
) -> (bool, &'static str, String) {
    if reports.is_empty() {
        return (
            false,
            "NoReadyPods",
            "no pod is ready to be asked".to_string(),
        );
    }
    if answered.is_empty() {
        return (
            false,
            "NoPodReporting",
            "no ready pod answered the status probe".to_string(),
        );
    }
    let ready = answered.iter().filter(|s| s.ready).count();
    if ready == answered.len() {
        (
            true,
            "ModelsReady",
            format!(
                "{ready} of {} ready pods report their models ready",
                reports.len()
            ),
        )
    } else {
        (
            false,
            "ModelsNotReady",
            format!(
                "{ready} of {} reporting pods have their models ready",
                answered.len()
            ),
        )
    }
}

fn model_status(
    isvc: &InferenceService,
    answered: &[&AdminStatus],
    ready: bool,
) -> Option<ModelStatus> {
    let reported: Vec<String> = answered
        .iter()
        .find(|s| !s.backend.models.is_empty())
        .map(|s| s.backend.models.clone())
        .unwrap_or_default();
    let (name, count) = match isvc.spec.models.first() {
        Some(first) => (first.name.clone(), isvc.spec.models.len()),
        None => (reported.first()?.clone(), reported.len()),
    };
    Some(ModelStatus {
        name,
        ready,
        count: i32::try_from(count).unwrap_or(i32::MAX),
    })
}

/// A condition whose `lastTransitionTime` moves only when its status does.
fn condition(
    kind: ConditionType,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
    previous: Option<&InferenceServiceStatus>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == kind.as_str()))
        .filter(|c| c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: kind.as_str().to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The `Ready` condition's status, if any.
pub fn is_ready(status: Option<&InferenceServiceStatus>) -> Option<bool> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
        .map(|c| c.status == "True")
}

/// `name` for logs and events: namespace/name.
pub fn object_name(isvc: &InferenceService) -> String {
    format!(
        "{}/{}",
        isvc.namespace().unwrap_or_default(),
        isvc.name_any()
    )
}
