//! One reconcile of one InferenceService: apply its children, probe its ready pods, write its
//! status, and tell the user about transitions with Events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;

use super::apply::{self, ApplyError, FIELD_MANAGER, Outcome};
use super::failures::Failure;
use super::metrics::Metrics;
use super::probe::Prober;
use super::scale_to_zero;
use super::status::{self, Observed};
use crate::crd::{InferenceService, InferenceServiceStatus};
use crate::render::{self, OperatorSettings, RenderError};

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Render(#[from] RenderError),
    #[error("the InferenceService has no namespace")]
    NoNamespace,
    /// The client Service's endpoints or the scale could not be written (scale to zero).
    #[error("scale to zero: {0}")]
    ScaleToZero(String),
    /// The API server (or a probe) did not answer in time: a hung connection must not hold the
    /// resource's reconcile for ever; it is retried with backoff like any API error.
    #[error("reconcile did not finish within {}s (Kubernetes API not answering)", .0.as_secs())]
    Timeout(Duration),
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub settings: OperatorSettings,
    pub prober: Prober,
    pub metrics: Arc<Metrics>,
    /// Publishes Events; `None` where no events should be sent (unit tests).
    pub recorder: Option<Recorder>,
    /// Consecutive failures per resource, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The InferenceServices the controller knows (its watch cache), when it has one: backoff
    /// state of a resource deleted while failing is dropped with it.
    pub known: Option<Store<InferenceService>>,
    /// Requeue interval while the service is not Ready (pods starting, probes pending).
    pub requeue_not_ready: Duration,
    /// Requeue interval once Ready (to notice changes that no watch event reports).
    pub requeue_ready: Duration,
    /// Requeue interval after the API server refused a child (a policy or quota may change).
    pub requeue_rejected: Duration,
    /// Longest one reconcile may take, API calls and probes included.
    pub reconcile_timeout: Duration,
    /// The operator's status client certificate, whose CA each rendering takes as it is on disk
    /// now (a CA replaced in the chart's Secret reaches the sidecars without an operator
    /// restart); `None`: `settings.status_client_ca` as given.
    pub status_client: Option<crate::status_client::StatusClientCertificate>,
}

impl Context {
    pub fn new(
        client: Client,
        settings: OperatorSettings,
        prober: Prober,
        metrics: Arc<Metrics>,
        recorder: Option<Recorder>,
    ) -> Self {
        Context {
            client,
            settings,
            prober,
            metrics,
            recorder,
            failures: Mutex::new(HashMap::new()),
            known: None,
            requeue_not_ready: Duration::from_secs(10),
            requeue_ready: Duration::from_secs(120),
            requeue_rejected: Duration::from_secs(60),
            reconcile_timeout: Duration::from_secs(60),
            status_client: None,
        }
    }

    /// The settings to render with: `settings`, with the status client CA as it is now.
    fn current_settings(&self) -> std::borrow::Cow<'_, OperatorSettings> {
        match &self.status_client {
            None => std::borrow::Cow::Borrowed(&self.settings),
            Some(client) => std::borrow::Cow::Owned(OperatorSettings {
                status_client_ca: Some(client.ca_pem()),
                ..self.settings.clone()
            }),
        }
    }

    /// Consecutive failures of `key` after one more. Failure counts of resources that no longer
    /// exist are dropped first: a resource deleted while failing is not reconciled again, so
    /// nothing else would remove its entry.
    fn record_failure(&self, key: String) -> u32 {
        let mut failures = self.failures.lock();
        if let Some(store) = &self.known {
            let live: HashSet<String> = store
                .state()
                .iter()
                .map(|isvc| status::object_name(isvc))
                .collect();
            failures.retain(|k, _| live.contains(k));
        }
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Resources with failures counted for backoff.
    pub fn failing(&self) -> usize {
        self.failures.lock().len()
    }

    fn count(&self, outcome: Outcome) {
        self.metrics.count(outcome);
    }

    async fn event(
        &self,
        isvc: &InferenceService,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &isvc.object_ref(&())).await {
            tracing::warn!(resource = %status::object_name(isvc), error = %e, "could not publish an event");
        }
    }
}

/// The reconcile function the controller runs.
pub async fn reconcile(isvc: Arc<InferenceService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = tokio::time::timeout(ctx.reconcile_timeout, reconcile_inner(&isvc, &ctx))
        .await
        .unwrap_or(Err(Error::Timeout(ctx.reconcile_timeout)));
    ctx.metrics
        .observe_reconcile(started.elapsed(), result.is_ok());
    if result.is_ok() {
        ctx.failures.lock().remove(&status::object_name(&isvc));
    }
    result
}

/// Backoff for failed reconciles: 1 s doubling per consecutive failure up to 5 minutes.
pub fn error_policy(isvc: Arc<InferenceService>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = status::object_name(&isvc);
    let failures = ctx.record_failure(key.clone());
    let delay = backoff(failures);
    tracing::warn!(resource = %key, error = %error, failures, retry_in_ms = delay.as_millis() as u64, "reconcile failed");
    let note = error.to_string();
    let ctx2 = ctx.clone();
    tokio::spawn(async move {
        ctx2.event(
            &isvc,
            EventType::Warning,
            "ReconcileFailed",
            "Reconcile",
            truncate(note, 1000),
        )
        .await;
    });
    Action::requeue(delay)
}

/// 1 s × 2^(n-1), at most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(9);
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(300))
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

async fn reconcile_inner(isvc: &InferenceService, ctx: &Context) -> Result<Action, Error> {
    if isvc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the children.
        return Ok(Action::await_change());
    }
    let ns = isvc.namespace().ok_or(Error::NoNamespace)?;
    let children = match render::build_children(isvc, &ctx.current_settings()) {
        Ok(children) => children,
        Err(e @ RenderError::Invalid { .. }) => {
            // A spec the schema let through but that cannot run: tell the user, do not retry
            // until the spec changes.
            write_refusal_status(isvc, ctx, "InvalidSpec", &e.to_string(), None).await?;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e.into()),
    };

    // The Deployment as stored (read or written just now) gives the status its replica counts.
    let (deployment, canary) = match apply_children(isvc, ctx, &ns, &children).await {
        Ok(deployments) => deployments,
        Err(e @ ApplyError::NotControlled { .. }) => {
            // Someone else's object under a child's name: never taken over. Looked at again
            // later, in case its owner removes or renames it.
            let location = match &e {
                ApplyError::NotControlled { kind, name, .. } => Some(format!("{kind}/{name}")),
                _ => None,
            };
            write_refusal_status(isvc, ctx, "Conflict", &e.to_string(), location).await?;
            return Ok(Action::requeue(ctx.requeue_not_ready));
        }
        Err(ApplyError::Rejected {
            kind,
            name,
            code,
            message,
        }) => {
            // The object as rendered is refused (a typo the CRD keeps, a policy, a quota):
            // retrying at once cannot help, but a policy or quota may change, so it is tried
            // again now and then.
            let text = format!("the API server refused {kind} '{name}' ({code}): {message}");
            let location = Some(format!("{kind}/{name}"));
            write_refusal_status(isvc, ctx, "ChildRejected", &text, location).await?;
            return Ok(Action::requeue(ctx.requeue_rejected));
        }
        Err(ApplyError::Kube(e)) => return Err(e.into()),
    };
    let client = ctx.client.clone();

    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&render::selector_string(isvc)))
        .await?
        .items;
    let reports = ctx
        .prober
        .probe_ready_pods(&pods, isvc.spec.sidecar.ports.admin)
        .await;
    let failed = reports.iter().filter(|r| r.outcome.is_err()).count() as u64;
    ctx.metrics.probe_failures.inc_by(failed);
    let observed = Observed {
        deployment: Some(&deployment),
        pods: &pods,
        reports: &reports,
        refusal: None,
        now: now(),
    };
    let zero = match &isvc.spec.scale_to_zero {
        Some(zero) => Some((
            zero,
            scale_to_zero::keep(
                isvc,
                (&ctx.client, &ctx.prober, &ctx.metrics),
                &ns,
                &deployment,
                &pods,
                &reports,
                zero,
            )
            .await
            .map_err(|e| match e {
                ApplyError::Kube(e) => Error::Kube(e),
                other => Error::ScaleToZero(other.to_string()),
            })?,
        )),
        None => None,
    };
    let mut new_status = status::compute(isvc, &observed, isvc.status.as_ref());
    new_status.canary = status::canary_status(isvc, canary.as_ref(), &reports);
    if let Some((spec, outcome)) = &zero {
        scale_to_zero::report(
            &mut new_status,
            outcome,
            spec,
            isvc.status.as_ref(),
            &observed.now,
        );
        if let Some(took) = scale_to_zero::cold_start_ended(isvc.status.as_ref(), &new_status) {
            ctx.metrics.cold_starts.observe(took);
        }
    }
    write_status(isvc, ctx, &new_status).await?;
    announce_transition(isvc, ctx, isvc.status.as_ref(), &new_status).await;

    let requeue = if status::is_ready(Some(&new_status)) == Some(true) {
        ctx.requeue_ready
    } else {
        ctx.requeue_not_ready
    };
    let recheck = zero.and_then(|(_, outcome)| outcome.recheck());
    Ok(Action::requeue(recheck.map_or(requeue, |r| r.min(requeue))))
}

/// Applies the ConfigMap, the Deployment, the Service and the PodDisruptionBudget (or deletes
/// ours when the spec wants none), and the canary's objects; returns the Deployments as stored
/// (the canary's where there is one).
async fn apply_children(
    isvc: &InferenceService,
    ctx: &Context,
    ns: &str,
    children: &render::Children,
) -> Result<(Deployment, Option<Deployment>), ApplyError> {
    let client = ctx.client.clone();
    let (outcome, _) = apply::apply(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        &children.config_map,
    )
    .await?;
    ctx.count(outcome);
    // Before the Deployment: its pods need the service account.
    apply_peer_objects(isvc, ctx, ns, children.peers.as_ref()).await?;
    apply_identity_objects(isvc, ctx, ns, children.identity.as_ref()).await?;
    let (outcome, deployment) = apply::apply(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &children.deployment,
    )
    .await?;
    ctx.count(outcome);
    let (outcome, _) = apply::apply(
        &Api::<Service>::namespaced(client.clone(), ns),
        &children.service,
    )
    .await?;
    ctx.count(outcome);
    let name = isvc.name_any();
    let uid = isvc.uid().unwrap_or_default();
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    let outcome = match &children.pdb {
        Some(pdb) => apply::apply(&pdbs, pdb).await?.0,
        None => apply::delete_owned(&pdbs, &name, &uid).await?,
    };
    ctx.count(outcome);
    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns);
    let outcome = match &children.hpa {
        Some(hpa) => apply::apply(&hpas, hpa).await?.0,
        None => apply::delete_owned(&hpas, &name, &uid).await?,
    };
    ctx.count(outcome);
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns);
    let outcome = match &children.network_policy {
        Some(policy) => apply::apply(&policies, policy).await?.0,
        None => apply::delete_owned(&policies, &name, &uid).await?,
    };
    ctx.count(outcome);
    // Other projects' kinds. One that is not wanted is still looked for, so that an autoscaler
    // or monitor dropped from the spec goes too; where the cluster does not serve the kind, that
    // read answers 404 and nothing more happens.
    let certificate = crate::crd::certificate_secret_name(&name);
    for (wanted, resource, object_name) in [
        (
            &children.scaled_object,
            render::scaled_object_resource(),
            &name,
        ),
        (&children.pod_monitor, render::pod_monitor_resource(), &name),
        (&children.http_route, render::http_route_resource(), &name),
        (&children.grpc_route, render::grpc_route_resource(), &name),
        (
            &children.certificate,
            render::certificate_resource(),
            &certificate,
        ),
    ] {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource);
        let outcome = match wanted {
            Some(object) => apply::apply_typed(&api, object, &resource).await?.0,
            None => apply::delete_owned(&api, object_name, &uid).await?,
        };
        ctx.count(outcome);
    }
    let canary = apply_canary_objects(isvc, ctx, ns, children.canary.as_ref()).await?;
    apply_activator_objects(isvc, ctx, ns, children.activator.as_ref()).await?;
    Ok((deployment, canary))
}

/// The canary's objects, or (where the spec no longer has a canary) the deletion of ours;
/// returns the canary's Deployment as stored.
async fn apply_canary_objects(
    isvc: &InferenceService,
    ctx: &Context,
    ns: &str,
    canary: Option<&render::CanaryObjects>,
) -> Result<Option<Deployment>, ApplyError> {
    let client = &ctx.client;
    let uid = isvc.uid().unwrap_or_default();
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns);
    let keda = render::scaled_object_resource();
    let scaled_objects = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &keda);
    let name = render::Variant::Canary.name(isvc, "");
    let Some(canary) = canary else {
        // The ConfigMap is made first and deleted last: where it is absent (the common case,
        // one read), so are the rest.
        let config_map = render::Variant::Canary.name(isvc, "-sidecar");
        if apply::read(&config_maps, &config_map).await?.is_none() {
            return Ok(None);
        }
        ctx.count(apply::delete_owned(&hpas, &name, &uid).await?);
        ctx.count(apply::delete_owned(&scaled_objects, &name, &uid).await?);
        ctx.count(apply::delete_owned(&deployments, &name, &uid).await?);
        let peers = render::canary_peers_name(isvc);
        ctx.count(apply::delete_owned(&services, &peers, &uid).await?);
        ctx.count(apply::delete_owned(&config_maps, &config_map, &uid).await?);
        return Ok(None);
    };
    ctx.count(apply::apply(&config_maps, &canary.config_map).await?.0);
    ctx.count(apply::apply(&services, &canary.peers_service).await?.0);
    let (outcome, deployment) = apply::apply(&deployments, &canary.deployment).await?;
    ctx.count(outcome);
    let outcome = match &canary.hpa {
        Some(hpa) => apply::apply(&hpas, hpa).await?.0,
        None => apply::delete_owned(&hpas, &name, &uid).await?,
    };
    ctx.count(outcome);
    let outcome = match &canary.scaled_object {
        Some(object) => apply::apply_typed(&scaled_objects, object, &keda).await?.0,
        None => apply::delete_owned(&scaled_objects, &name, &uid).await?,
    };
    ctx.count(outcome);
    Ok(Some(deployment))
}

/// The headless Service and the access of sidecars that route sequences among themselves, or
/// (where the spec no longer asks for that) the deletion of ours.
async fn apply_peer_objects(
    isvc: &InferenceService,
    ctx: &Context,
    ns: &str,
    peers: Option<&render::PeerObjects>,
) -> Result<(), ApplyError> {
    let client = &ctx.client;
    let uid = isvc.uid().unwrap_or_default();
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let roles = Api::<Role>::namespaced(client.clone(), ns);
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
    let Some(peers) = peers else {
        // The headless Service is made first and deleted last: where it is absent (the common
        // case, one read), so are the rest. With scale to zero it stays, the activator's, and
        // the Role tells whether the rest is there.
        let service = render::peers_name(isvc);
        let access = render::peer_access_name(isvc);
        let activators = isvc.spec.scale_to_zero.is_some();
        let present = if activators {
            apply::read(&roles, &access).await?.is_some()
        } else {
            apply::read(&services, &service).await?.is_some()
        };
        if !present {
            return Ok(());
        }
        ctx.count(apply::delete_owned(&bindings, &access, &uid).await?);
        ctx.count(apply::delete_owned(&roles, &access, &uid).await?);
        ctx.count(apply::delete_owned(&accounts, &access, &uid).await?);
        if !activators {
            ctx.count(apply::delete_owned(&services, &service, &uid).await?);
        }
        return Ok(());
    };
    ctx.count(apply::apply(&services, &peers.service).await?.0);
    let access = peers.role.name_any();
    let outcome = match &peers.service_account {
        Some(account) => apply::apply(&accounts, account).await?.0,
        None => apply::delete_owned(&accounts, &access, &uid).await?,
    };
    ctx.count(outcome);
    ctx.count(apply::apply(&roles, &peers.role).await?.0);
    ctx.count(apply::apply(&bindings, &peers.role_binding).await?.0);
    Ok(())
}

/// The activator's objects, or (where the spec no longer scales to zero) the deletion of ours
/// and of the client Service's EndpointSlice (the Service has its selector again).
async fn apply_activator_objects(
    isvc: &InferenceService,
    ctx: &Context,
    ns: &str,
    activator: Option<&render::ActivatorObjects>,
) -> Result<(), ApplyError> {
    let client = &ctx.client;
    let uid = isvc.uid().unwrap_or_default();
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let roles = Api::<Role>::namespaced(client.clone(), ns);
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
    let name = render::activator_name(isvc);
    let Some(activator) = activator else {
        // The ConfigMap is made first and deleted last: where it is absent (the common case,
        // one read), so are the rest.
        if apply::read(&config_maps, &name).await?.is_none() {
            return Ok(());
        }
        let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns);
        let slice = render::endpoint_slice_name(isvc);
        ctx.count(apply::delete_owned(&slices, &slice, &uid).await?);
        ctx.count(apply::delete_owned(&deployments, &name, &uid).await?);
        ctx.count(apply::delete_owned(&bindings, &name, &uid).await?);
        ctx.count(apply::delete_owned(&roles, &name, &uid).await?);
        ctx.count(apply::delete_owned(&accounts, &name, &uid).await?);
        if !isvc.spec.sidecars_dial_peers() {
            let peers = render::peers_name(isvc);
            ctx.count(apply::delete_owned(&services, &peers, &uid).await?);
        }
        ctx.count(apply::delete_owned(&config_maps, &name, &uid).await?);
        return Ok(());
    };
    ctx.count(apply::apply(&config_maps, &activator.config_map).await?.0);
    if let Some(service) = &activator.peers_service {
        ctx.count(apply::apply(&services, service).await?.0);
    }
    ctx.count(apply::apply(&accounts, &activator.service_account).await?.0);
    ctx.count(apply::apply(&roles, &activator.role).await?.0);
    ctx.count(apply::apply(&bindings, &activator.role_binding).await?.0);
    ctx.count(apply::apply(&deployments, &activator.deployment).await?.0);
    Ok(())
}

/// The service account and Role that let the sidecars ask for LocalSubjectAccessReviews, where
/// inference takes an identity, or (where the spec no longer asks for that) the deletion of ours.
async fn apply_identity_objects(
    isvc: &InferenceService,
    ctx: &Context,
    ns: &str,
    identity: Option<&render::IdentityObjects>,
) -> Result<(), ApplyError> {
    let client = &ctx.client;
    let uid = isvc.uid().unwrap_or_default();
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let roles = Api::<Role>::namespaced(client.clone(), ns);
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
    let name = render::identity_name(isvc);
    let Some(identity) = identity else {
        // The Role is made first and deleted last: where it is absent (the common case, one
        // read), so are the rest.
        if apply::read(&roles, &name).await?.is_none() {
            return Ok(());
        }
        ctx.count(apply::delete_owned(&bindings, &name, &uid).await?);
        ctx.count(apply::delete_owned(&accounts, &name, &uid).await?);
        ctx.count(apply::delete_owned(&roles, &name, &uid).await?);
        return Ok(());
    };
    ctx.count(apply::apply(&roles, &identity.role).await?.0);
    let outcome = match &identity.service_account {
        Some(account) => apply::apply(&accounts, account).await?.0,
        None => apply::delete_owned(&accounts, &name, &uid).await?,
    };
    ctx.count(outcome);
    ctx.count(apply::apply(&bindings, &identity.role_binding).await?.0);
    Ok(())
}

/// The clock at the precision the API server keeps for `metav1.Time` (whole seconds), so that a
/// condition read back compares equal to the one written.
fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Writes `status` through the status subresource (server-side apply, same field manager),
/// unless it is what the server already holds.
async fn write_status(
    isvc: &InferenceService,
    ctx: &Context,
    new: &InferenceServiceStatus,
) -> Result<(), Error> {
    if isvc.status.as_ref() == Some(new) {
        return Ok(());
    }
    let ns = isvc.namespace().ok_or(Error::NoNamespace)?;
    let api = Api::<InferenceService>::namespaced(ctx.client.clone(), &ns);
    let patch = json!({
        "apiVersion": InferenceService::api_version(&()),
        "kind": InferenceService::kind(&()),
        "status": new,
    });
    api.patch_status(
        &isvc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.metrics.status_writes.inc();
    Ok(())
}

/// A status that says why the children cannot be applied (`reason` on `Ready` and in
/// `lastFailureInfo`, `message` its words), written and announced with a Warning Event of the
/// same reason when it changes.
async fn write_refusal_status(
    isvc: &InferenceService,
    ctx: &Context,
    reason: &'static str,
    message: &str,
    location: Option<String>,
) -> Result<(), Error> {
    let message = truncate(message.to_string(), 1000);
    let observed = Observed {
        deployment: None,
        pods: &[],
        reports: &[],
        refusal: Some(Failure {
            reason,
            message: message.clone(),
            location,
            exit_code: None,
        }),
        now: now(),
    };
    let new = status::compute(isvc, &observed, isvc.status.as_ref());
    let changed = isvc.status.as_ref() != Some(&new);
    write_status(isvc, ctx, &new).await?;
    if changed {
        ctx.event(isvc, EventType::Warning, reason, "Reconcile", message)
            .await;
    }
    Ok(())
}

/// An Event when `Ready` changes, or when the first status is written.
async fn announce_transition(
    isvc: &InferenceService,
    ctx: &Context,
    old: Option<&InferenceServiceStatus>,
    new: &InferenceServiceStatus,
) {
    let before = status::is_ready(old);
    let after = status::is_ready(Some(new));
    if before == after {
        return;
    }
    let message = new
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match after {
        Some(true) => {
            ctx.event(isvc, EventType::Normal, "Ready", "Reconcile", message)
                .await
        }
        _ if before == Some(true) => {
            ctx.event(isvc, EventType::Warning, "NotReady", "Reconcile", message)
                .await
        }
        _ => {
            ctx.event(isvc, EventType::Normal, "Reconciling", "Reconcile", message)
                .await
        }
    }
}
