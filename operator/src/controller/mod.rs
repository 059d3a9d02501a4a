//! The controller (`infergate-operator run`): watches InferenceServices and the objects they own,
//! and reconciles each into its children and status.
//!
//! | module | job |
//! |---|---|
//! | [`reconcile`] | one reconcile: apply children, probe pods, write status, events; backoff |
//! | [`apply`] | server-side apply with one field manager, skipped when nothing changed |
//! | [`status`] | pure: status and conditions from the Deployment, the pods and the probe results |
//! | [`tls_status`] | pure: `status.tls` from the sidecars' reports of their client ports |
//! | [`failures`] | pure: failures the Deployment and the pods report, in plain words |
//! | [`probe`] | `GET /status` on each ready pod's sidecar admin port, bounded in time |
//! | [`leader`] | Lease-based leader election |
//! | [`rbac`] | the permissions all of the above need |
//! | [`metrics`] | the operator's metrics and health endpoints |

pub mod apply;
pub mod failures;
pub mod leader;
pub mod metrics;
pub mod probe;
pub mod rbac;
pub mod reconcile;
pub mod scale_to_zero;
pub mod status;
pub mod tls_status;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::crd::InferenceService;
use crate::render::OperatorSettings;

/// Everything `run` needs, from the command line.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub settings: OperatorSettings,
    /// Watch one namespace, or every namespace when `None`.
    pub namespace: Option<String>,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// Metrics and health endpoints.
    pub metrics_addr: SocketAddr,
    /// Leader election: the namespace of the Lease, or `None` to run without election (one
    /// replica only).
    pub leader_election_namespace: Option<String>,
    pub lease_name: String,
    pub identity: String,
    /// The token presented to read sidecars' `/status` (its digest is in `settings`).
    pub status_token: Option<crate::status_token::StatusToken>,
    /// The client certificate presented instead, over TLS (its CA is in `settings`).
    pub status_client_certificate: Option<crate::status_client::StatusClientCertificate>,
    /// Time limit of one sidecar admin probe.
    pub probe_timeout: Duration,
    /// Test-only: `pod-ip:port` → `host:port` for the probes.
    pub probe_address_map: HashMap<String, String>,
    /// Requeue interval while a service is not Ready.
    pub requeue_not_ready: Duration,
    /// Longest one reconcile may take before it fails and is retried with backoff.
    pub reconcile_timeout: Duration,
}

/// Runs until SIGTERM/SIGINT (graceful: reconciles in flight finish; exit 0) or until leadership
/// is lost (an error, so the process exits non-zero and restarts as a candidate).
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster service account, KUBECONFIG or ~/.kube/config)")?;
    let metrics = Arc::new(metrics::Metrics::default());
    let server = tokio::spawn(metrics::serve(config.metrics_addr, metrics.clone()));

    let mut lost_leadership: Option<tokio::task::JoinHandle<()>> = None;
    let mut release: Option<(leader::Election, Api<Lease>, tokio::task::AbortHandle)> = None;
    if let Some(lease_ns) = &config.leader_election_namespace {
        let election = leader::Election {
            lease_name: config.lease_name.clone(),
            identity: config.identity.clone(),
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        };
        let leases = Api::<Lease>::namespaced(client.clone(), lease_ns);
        metrics.started.store(true, Ordering::Relaxed);
        tokio::select! {
            () = election.acquire(&leases) => {}
            () = shutdown_signal() => return Ok(()),
        }
        metrics.set_leader();
        let (holder, holder_leases) = (election.clone(), leases.clone());
        let handle = tokio::spawn(async move { holder.hold(&holder_leases).await });
        release = Some((election, leases, handle.abort_handle()));
        lost_leadership = Some(handle);
    } else {
        metrics.set_leader();
    }

    let reporter = Reporter {
        controller: "infergate-operator".into(),
        instance: Some(config.identity.clone()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let prober = probe::Prober::new(config.probe_timeout, config.probe_address_map.clone())
        .with_token(config.status_token.clone())
        .with_client_certificate(config.status_client_certificate.as_ref())
        .map_err(|e| anyhow::anyhow!("the status client certificate: {e}"))?;
    let mut context = reconcile::Context::new(
        client.clone(),
        config.settings.clone(),
        prober,
        metrics.clone(),
        Some(recorder),
    );
    context.requeue_not_ready = config.requeue_not_ready;
    context.status_client = config.status_client_certificate.clone();
    context.reconcile_timeout = config.reconcile_timeout;

    let (services, deployments, config_maps, pdbs) = match &config.namespace {
        Some(ns) => (
            Api::<InferenceService>::namespaced(client.clone(), ns),
            Api::<Deployment>::namespaced(client.clone(), ns),
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    let service_api: Api<Service> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // Children are watched by the managed-by label only, so the operator does not cache every
    // ConfigMap and Service of the cluster.
    let owned =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=infergate-operator");
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lost_flag = lost.clone();
    let stop = async move {
        match lost_leadership {
            Some(handle) => tokio::select! {
                _ = handle => {
                    tracing::error!("stopping: leadership lost");
                    lost_flag.store(true, Ordering::SeqCst);
                }
                () = shutdown_signal() => {}
            },
            None => shutdown_signal().await,
        }
    };
    metrics.started.store(true, Ordering::Relaxed);
    tracing::info!(
        namespace = config.namespace.as_deref().unwrap_or("(all)"),
        concurrency = config.concurrency,
        "controller starting"
    );
    let controller = Controller::new(services, watcher::Config::default());
    context.known = Some(controller.store());
    let context = Arc::new(context);
    controller
        .owns(deployments, owned.clone())
        .owns(service_api, owned.clone())
        .owns(config_maps, owned.clone())
        .owns(pdbs, owned)
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile::reconcile, reconcile::error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(resource = %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                Err(e) => tracing::warn!(error = %e, "controller"),
            }
        })
        .await;
    server.abort();
    if let Some((election, leases, renewals)) = release.filter(|_| !lost.load(Ordering::SeqCst)) {
        renewals.abort();
        let released =
            tokio::time::timeout(Duration::from_secs(3), election.release(&leases)).await;
        match released {
            Ok(Ok(true)) => tracing::info!(lease = %election.lease_name, "leadership released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %election.lease_name, error = %e, "could not release the lease; it will expire")
            }
            Err(_) => {
                tracing::warn!(lease = %election.lease_name, "releasing the lease timed out; it will expire")
            }
        }
    }
    if lost.load(Ordering::SeqCst) {
        // Exit non-zero so that the pod restarts and stands for election again.
        anyhow::bail!("leadership lost");
    }
    tracing::info!("controller stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
