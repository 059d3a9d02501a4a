//! Scale to zero (`spec.scaleToZero`), the operator's part: the client Service's endpoints (the
//! ready pods, or the activator's while there are none), the scale down to zero once every pod
//! has been quiet for idleSeconds, the count back at spec.replicas once the activator raised it,
//! and what the status says of it.
//!
//! The decisions are pure functions of what was read ([`endpoints`], [`decide`], [`report`]);
//! [`keep`] reads and writes.
//!
//! Going to zero, the Service is pointed at the activator first, then the Deployment's scale
//! set to 0: a call that comes in between reaches a pod that still serves (it drains as it
//! goes, finishing what it has), and a call that comes after is held by the activator, which
//! starts a pod again. The service never goes to zero while the activator has no ready pod.
//!
//! A service whose pods cannot start (a failure the operator finds in its pods or Deployment:
//! an image that cannot be pulled, a model that cannot be fetched, a crashing container, a pod no
//! node takes) answers every call with that failure through the activator, while its pods keep
//! what they asked for (a GPU, say). Once the activators have had no inference call for
//! idleSeconds, it goes to zero too; `lastFailureInfo` keeps the failure, and the next call
//! starts a pod again, which is how a failure that mended itself (an image pushed late, a node
//! added) is found.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use super::apply::{self, ApplyError};
use super::metrics::Metrics;
use super::metrics::ResourceLabels;
use super::probe::Prober;
use super::status::PodReport;
use crate::crd::{
    ConditionType, InferenceService, InferenceServiceStatus, ScaleToZeroSpec, ScaleToZeroStatus,
};
use crate::render;

/// The pods' address where they are ready and not going away.
pub fn ready_address(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then(|| status.pod_ip.clone()).flatten()
}

/// Whom the client Service sends calls to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// The service's ready pods.
    Pods(Vec<String>),
    /// The activator's ready pods: the service has none.
    Activator(Vec<String>),
    /// Neither has a ready pod.
    Nobody,
}

impl Endpoints {
    pub fn addresses(&self) -> &[String] {
        match self {
            Endpoints::Pods(a) | Endpoints::Activator(a) => a,
            Endpoints::Nobody => &[],
        }
    }
}

/// The service's ready pods, else the activator's.
pub fn endpoints(pods: &[Pod], activator_pods: &[Pod]) -> Endpoints {
    let sorted = |pods: &[Pod]| {
        let mut out: Vec<String> = pods.iter().filter_map(ready_address).collect();
        out.sort();
        out
    };
    let ready = sorted(pods);
    if !ready.is_empty() {
        return Endpoints::Pods(ready);
    }
    let activators = sorted(activator_pods);
    if activators.is_empty() {
        Endpoints::Nobody
    } else {
        Endpoints::Activator(activators)
    }
}

/// What to do about the count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// At zero already.
    AtZero,
    /// Every pod quiet for idleSeconds: go to zero.
    ScaleDown { quiet: u64 },
    /// Some pod was busy `quiet` seconds ago: look again in `recheck`.
    Wait { quiet: u64, recheck: Duration },
    /// Not now, for this reason (pods starting, a pod not reporting, no activator ready).
    Hold(&'static str),
}

/// The Deployment's desired replicas.
pub fn replicas_of(deployment: &Deployment) -> i32 {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
}

/// What the activators said, for [`decide`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Activators {
    /// Activator pods ready to hold calls.
    pub ready: usize,
    /// Seconds since an activator last had an inference call: the least of the ready ones'
    /// reports; `None` where one of them did not say (an older activator, a failed probe).
    pub quiet_seconds: Option<u64>,
}

impl Activators {
    /// From the activator pods and their `/status` reports.
    pub fn seen(activator_pods: &[Pod], reports: &[PodReport]) -> Activators {
        let ready: Vec<String> = activator_pods
            .iter()
            .filter(|p| ready_address(p).is_some())
            .map(ResourceExt::name_any)
            .collect();
        let quiet: Option<Vec<u64>> = ready
            .iter()
            .map(|name| {
                let report = reports.iter().find(|r| &r.pod == name)?;
                report
                    .outcome
                    .as_ref()
                    .ok()?
                    .activator
                    .as_ref()?
                    .quiet_seconds
            })
            .collect();
        Activators {
            ready: ready.len(),
            quiet_seconds: quiet.and_then(|q| q.into_iter().min()),
        }
    }
}

/// Whether to go to zero: every pod of the Deployment ready, every one reporting, none busy for
/// `idle_seconds`, and the activator ready to take the calls. Or, where the pods cannot start
/// (`failure`, the reason the operator found), the activators without a call for `idle_seconds`
/// (module docs).
pub fn decide(
    zero: &ScaleToZeroSpec,
    replicas: i32,
    pods: &[Pod],
    reports: &[PodReport],
    activators: &Activators,
    failure: Option<&str>,
) -> Decision {
    if replicas == 0 {
        return Decision::AtZero;
    }
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if live.is_empty() || live.iter().any(|p| ready_address(p).is_none()) {
        // Only where no pod serves: while one does, the calls go to it, not to the activators,
        // whose quiet then says nothing.
        let none_serves = live.iter().all(|p| ready_address(p).is_none());
        return match failure {
            Some(_) if none_serves => failing(zero, activators),
            _ => Decision::Hold("pods are starting"),
        };
    }
    let mut quiet = u64::MAX;
    for pod in &live {
        let name = pod.name_any();
        let Some(report) = reports.iter().find(|r| r.pod == name) else {
            return Decision::Hold("a pod was not asked for its traffic");
        };
        let Ok(status) = &report.outcome else {
            return Decision::Hold("a pod did not say how busy it is");
        };
        let Some(traffic) = &status.traffic else {
            return Decision::Hold("a pod's sidecar does not report its traffic");
        };
        let pod_quiet = if traffic.in_flight > 0 || traffic.live_sequences > 0 {
            0
        } else {
            traffic.quiet_seconds
        };
        quiet = quiet.min(pod_quiet);
    }
    if let Some(wait) = not_idle_yet(zero, quiet) {
        return wait;
    }
    if activators.ready == 0 {
        return Decision::Hold("no activator pod is ready to hold calls");
    }
    Decision::ScaleDown { quiet }
}

/// Pods that cannot start: to zero once the activators, which answer the calls meanwhile, have
/// had none for idleSeconds.
fn failing(zero: &ScaleToZeroSpec, activators: &Activators) -> Decision {
    if activators.ready == 0 {
        return Decision::Hold("pods cannot start, and no activator pod is ready to hold calls");
    }
    let Some(quiet) = activators.quiet_seconds else {
        return Decision::Hold("pods cannot start, and an activator does not report its calls");
    };
    not_idle_yet(zero, quiet).unwrap_or(Decision::ScaleDown { quiet })
}

/// `Wait` while `quiet` is short of idleSeconds: a look again a second past the threshold, at
/// least 5 s apart.
fn not_idle_yet(zero: &ScaleToZeroSpec, quiet: u64) -> Option<Decision> {
    let idle = u64::try_from(zero.idle_seconds).unwrap_or(u64::MAX);
    (quiet < idle).then(|| Decision::Wait {
        quiet,
        recheck: Duration::from_secs((idle - quiet + 1).max(5)),
    })
}

/// The calls the activators hold, from their reports; `None` where none reported.
pub fn held_calls(reports: &[PodReport]) -> Option<u64> {
    let held: Vec<u64> = reports
        .iter()
        .filter_map(|r| Some(r.outcome.as_ref().ok()?.activator.as_ref()?.held_calls))
        .collect();
    (!held.is_empty()).then(|| held.iter().sum())
}

/// What [`keep`] found and did, for the status.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub replicas: i32,
    pub ready_replicas: i32,
    pub activator_ready: i32,
    /// Calls the activator's pods hold, summed over those that reported.
    pub held_calls: Option<u64>,
    pub decision: Decision,
    pub endpoints: Endpoints,
}

impl Outcome {
    /// When to reconcile again for it, if sooner than otherwise.
    pub fn recheck(&self) -> Option<Duration> {
        match &self.decision {
            Decision::Wait { recheck, .. } => Some(*recheck),
            Decision::Hold(_) => Some(Duration::from_secs(10)),
            _ => None,
        }
    }
}

/// Reads the activator's pods, writes the client Service's endpoints, scales to zero when
/// [`decide`] says so, and brings an active Deployment (raised from zero by the activator) to
/// spec.replicas where no autoscaler owns the count.
pub async fn keep(
    isvc: &InferenceService,
    (client, prober, metrics): (&kube::Client, &Prober, &Metrics),
    ns: &str,
    deployment: &Deployment,
    pods: &[Pod],
    reports: &[PodReport],
    zero: &ScaleToZeroSpec,
) -> Result<Outcome, ApplyError> {
    let client = client.clone();
    let owner = render::owner_reference(isvc).unwrap_or_default();
    let activator_pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&render::activator_selector_string(isvc)))
        .await?
        .items;
    let mut endpoints = endpoints(pods, &activator_pods);
    let activator_reports = prober
        .probe_ready_pods(&activator_pods, isvc.spec.sidecar.ports.admin)
        .await;
    let activators = Activators::seen(&activator_pods, &activator_reports);
    let activator_ready = activators.ready;
    let held_calls = held_calls(&activator_reports);
    metrics
        .held_calls
        .get_or_create(&ResourceLabels {
            namespace: ns.to_string(),
            name: isvc.name_any(),
        })
        .set(i64::try_from(held_calls.unwrap_or(0)).unwrap_or(i64::MAX));
    let replicas = replicas_of(deployment);
    // As the status finds it (a refused spec stops the reconcile before this).
    let failure = super::failures::of_children(Some(deployment), pods).map(|f| f.reason);
    let decision = decide(zero, replicas, pods, reports, &activators, failure);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let name = isvc.name_any();
    if let Decision::ScaleDown { quiet } = &decision {
        // The activator first, then zero (module docs).
        let activators = self::endpoints(&[], &activator_pods);
        let slice = render::endpoint_slice(isvc, &owner, activators.addresses());
        metrics.count(apply::apply(&slices, &slice).await?.0);
        endpoints = activators;
        set_scale(&deployments, &name, 0).await?;
        metrics.scaled_to_zero.inc();
        // `reason`: where its pods could not start.
        tracing::info!(inferenceservice = %super::status::object_name(isvc), quiet_seconds = quiet, reason = failure, "scaled to zero: idle");
    } else {
        let slice = render::endpoint_slice(isvc, &owner, endpoints.addresses());
        metrics.count(apply::apply(&slices, &slice).await?.0);
        let wanted = isvc.spec.replicas;
        if isvc.spec.autoscaling.is_none() && replicas > 0 && replicas != wanted && wanted > 0 {
            set_scale(&deployments, &name, wanted).await?;
        }
    }
    let ready_replicas = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    Ok(Outcome {
        replicas: if matches!(decision, Decision::ScaleDown { .. }) {
            0
        } else {
            replicas
        },
        ready_replicas,
        activator_ready: i32::try_from(activator_ready).unwrap_or(i32::MAX),
        held_calls,
        decision,
        endpoints,
    })
}

/// Field manager of the operator's changes of the count (not its applies, which leave the count
/// alone with scale to zero).
const SCALE_MANAGER: &str = "infergate-operator-scale";

/// The Deployment's replicas set to `replicas`, by a patch of the Deployment (which the
/// operator-writes policy checks is the operator's own), not of its scale subresource: the
/// operator holds `deployments/scale` only to grant it to the activator's Role, and the policy
/// refuses it any use of it.
async fn set_scale(api: &Api<Deployment>, name: &str, replicas: i32) -> Result<(), ApplyError> {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    let params = PatchParams {
        field_manager: Some(SCALE_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(ApplyError::from)
}

/// The status's `scaleToZero` and its effect on the conditions: `ScaledToZero` true at zero;
/// `Ready` true at zero where the activator is ready (calls are held and answered, as Knative
/// and KServe report a service scaled to zero), with the reason ScaledToZero.
pub fn report(
    status: &mut InferenceServiceStatus,
    outcome: &Outcome,
    zero: &ScaleToZeroSpec,
    previous: Option<&InferenceServiceStatus>,
    now: &Time,
) {
    let before = previous.and_then(|p| p.scale_to_zero.as_ref());
    let state = if outcome.replicas == 0 {
        "ScaledToZero"
    } else if outcome.ready_replicas == 0
        && before.is_some_and(|b| b.state == "ScaledToZero" || b.state == "Starting")
    {
        "Starting"
    } else {
        "Active"
    };
    let since = match before {
        Some(b) if b.state == state => b.since.clone(),
        _ => Some(now.clone()),
    };
    let mut last_cold_start_seconds = before.and_then(|b| b.last_cold_start_seconds);
    if state == "Active"
        && let Some(b) = before.filter(|b| b.state == "Starting")
        && let Some(started) = &b.since
    {
        let took = now.0.duration_since(started.0);
        last_cold_start_seconds = Some((took.as_secs_f64() * 10.0).round() / 10.0);
    }
    let quiet_seconds = match &outcome.decision {
        Decision::ScaleDown { quiet } | Decision::Wait { quiet, .. } => {
            Some(i64::try_from(*quiet).unwrap_or(i64::MAX))
        }
        _ => None,
    };
    status.scale_to_zero = Some(ScaleToZeroStatus {
        state: state.to_string(),
        since,
        last_cold_start_seconds,
        activator_ready_replicas: outcome.activator_ready,
        held_calls: outcome
            .held_calls
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        quiet_seconds,
    });
    let at_zero = state == "ScaledToZero";
    let (reason, message) = if at_zero {
        (
            "Idle",
            format!(
                "no pod: no call for {} s; the activator holds calls and starts one",
                zero.idle_seconds
            ),
        )
    } else {
        ("Active", format!("{state}: pods run"))
    };
    set_condition(
        status,
        ConditionType::ScaledToZero,
        at_zero,
        reason,
        message,
        previous,
        now,
    );
    if at_zero && outcome.activator_ready > 0 {
        set_condition(
            status,
            ConditionType::Ready,
            true,
            "ScaledToZero",
            "scaled to zero: calls are held by the activator while a pod starts".to_string(),
            previous,
            now,
        );
    }
}

/// The seconds of a start from zero that ended between `previous` and `now` (Starting, then
/// Active), if one did.
pub fn cold_start_ended(
    previous: Option<&InferenceServiceStatus>,
    now: &InferenceServiceStatus,
) -> Option<f64> {
    let before = previous?.scale_to_zero.as_ref()?;
    let after = now.scale_to_zero.as_ref()?;
    (before.state == "Starting" && after.state == "Active")
        .then_some(after.last_cold_start_seconds)
        .flatten()
}

fn set_condition(
    status: &mut InferenceServiceStatus,
    kind: ConditionType,
    ok: bool,
    reason: &str,
    message: String,
    previous: Option<&InferenceServiceStatus>,
    now: &Time,
) {
    let text = if ok { "True" } else { "False" };
    let transition = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == kind.as_str()))
        .filter(|c| c.status == text)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    let condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: kind.as_str().to_string(),
        status: text.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: status.observed_generation,
        last_transition_time: transition,
    };
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == kind.as_str())
    {
        Some(existing) => *existing = condition,
        None => status.conditions.push(condition),
    }
}
