//! The activator (`server.activator`; docs/sidecar.md, "Activator"): the sidecar's binary in
//! another role, in front of a service that may have no ready pod, because it scaled to zero or
//! because it is starting.
//!
//! The operator points the service's client Service at the activator's pods only while none of
//! the service's pods is ready; once one is, calls go to the pods and the activator is out of
//! their path (but for the connections clients opened to it before, which it keeps serving
//! until their maximum age sends them to the pods). Here:
//!
//! - [`hold`]: calls wait, in order and within caps, for a sidecar of the service to be ready;
//! - [`scale`]: the first held call raises the Deployment's scale from zero, and the service's
//!   status says why its pods cannot start, if they cannot;
//! - [`upstream`]: which of the service's sidecars are ready (the sequence peers' discovery and
//!   probes) and the connections to them;
//! - [`call`]: each call passed on, held, or answered with why not.
//!
//! It serves no model, so it knows nothing of models: every call, inference or health or
//! metadata, is passed on as it came and its answer comes back as the sidecar gave it.

pub mod call;
pub mod hold;
pub mod scale;
pub mod upstream;

use std::convert::Infallible;
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::get;
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use infergate_config::{ActivatorSettings, SidecarConfig};
use tokio::sync::watch;

use crate::accept::{Io, PortSetup, PortTls};
use crate::admin_access::AdminRules;
use crate::caller::{Caller, CertifiedClient};
use crate::inflight::{Budgeted, ByteBudget, Tracked};
use crate::peers::kubernetes::{self, Target};
use crate::peers::membership::Members;
use call::Activator;
use hold::{Hold, Limits, Phase};
use scale::Scaler;
use upstream::{Port, Upstreams};

/// How often whether a sidecar is ready is looked at (the probes themselves run every half
/// second).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The bound ports.
#[derive(Clone, Copy, Debug)]
pub struct BoundAddrs {
    pub http: std::net::SocketAddr,
    pub grpc: std::net::SocketAddr,
    pub metrics: std::net::SocketAddr,
    pub admin: std::net::SocketAddr,
}

/// The activator, serving.
pub struct Running {
    pub addrs: BoundAddrs,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets the calls in flight (held ones too) finish for up to `grace`.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let drained = futures::future::join_all(self.tasks);
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "calls still in flight after the grace period; exiting"
            );
        }
        self.background
            .iter()
            .for_each(tokio::task::JoinHandle::abort);
    }
}

/// The service's sidecars, as the settings name them.
fn upstreams(
    settings: &ActivatorSettings,
    config: &SidecarConfig,
) -> anyhow::Result<(Arc<Members>, Option<Target>)> {
    let (members, discovery) = crate::server::other_sidecars(
        &settings.tls,
        settings.service.as_deref(),
        settings.labels.as_deref(),
        &settings.peers,
        &config.limits,
        "service",
        "server.activator",
    )?;
    Ok((Arc::new(members), discovery))
}

/// What starts the service, where the settings name a Deployment or an InferenceService.
async fn scaler(settings: &ActivatorSettings) -> anyhow::Result<Option<Arc<Scaler>>> {
    if settings.deployment.is_none() && settings.inference_service.is_none() {
        return Ok(None);
    }
    let named = |setting: &Option<String>, field: &str| {
        setting
            .as_deref()
            .map(kubernetes::namespaced_name)
            .transpose()
            .map_err(|e| anyhow::anyhow!("server.activator.{field}: {e}"))
    };
    let deployment = named(&settings.deployment, "deployment")?;
    let service = named(&settings.inference_service, "inference_service")?;
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes client to scale the service with")?;
    Ok(Some(Arc::new(Scaler::new(
        client,
        deployment,
        service,
        settings.scale_to,
    ))))
}

/// Binds the ports and starts serving.
pub async fn start(config: &SidecarConfig) -> anyhow::Result<Running> {
    let settings = config
        .server
        .activator
        .as_ref()
        .context("no server.activator settings")?;
    let (members, discovery) = upstreams(settings, config)?;
    let scaler = scaler(settings).await?;
    let hold = Arc::new(Hold::new(Limits {
        max_calls: settings.max_held_calls as usize,
        max_bytes: settings.max_held_bytes,
        timeout: Duration::from_secs(settings.hold_timeout_seconds),
    }));
    let activator = Arc::new(Activator {
        hold: hold.clone(),
        upstreams: Arc::new(Upstreams::new(members.clone(), settings.upstream_http_port)),
        scaler: scaler.clone(),
        counts: Default::default(),
        retry_after_seconds: settings.retry_after_seconds,
        last_cold_start: Default::default(),
        cold_starts: Default::default(),
        traffic: Default::default(),
    });
    let http_tls = crate::server::port_tls(&config.server.http_tls, &["h2", "http/1.1"])
        .map_err(|e| anyhow::anyhow!("HTTP TLS: {e}"))?;
    let grpc_tls = crate::server::port_tls(&config.server.grpc_tls, &["h2"])
        .map_err(|e| anyhow::anyhow!("gRPC TLS: {e}"))?;
    let metrics_tls = crate::server::port_tls(&config.server.metrics_tls, &["http/1.1"])
        .map_err(|e| anyhow::anyhow!("metrics TLS: {e}"))?;

    let host = config.server.bind_host();
    let bind = crate::server::bind;
    let http = bind(host, config.server.http_port).await?;
    let grpc = bind(host, config.server.grpc_port).await?;
    let metrics = bind(host, config.server.metrics_port).await?;
    let admin = bind(host, config.server.admin_port).await?;
    let addrs = BoundAddrs {
        http: http.local_addr()?,
        grpc: grpc.local_addr()?,
        metrics: metrics.local_addr()?,
        admin: admin.local_addr()?,
    };

    let mut background = crate::peers::keep(&members, discovery.as_ref());
    background.push(tokio::spawn(watch_phase(activator.clone())));
    if let Some(scaler) = scaler {
        background.push(tokio::spawn(scaler.run(hold.clone())));
    }
    let every = Duration::from_secs(config.server.tls_reload_seconds);
    for tls in [&http_tls, &grpc_tls, &metrics_tls].into_iter().flatten() {
        background.push(tokio::spawn(tls.clone().watch(every)));
    }
    if let Some(tls) = members.tls() {
        background.push(tokio::spawn(tls.clone().watch(every)));
    }

    let (shutdown, rx) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let budget = ByteBudget::new(config.limits.max_inflight_request_bytes);
    let mut tasks = Vec::new();
    for (listener, port, name, tls) in [
        (http, Port::Http, "HTTP", http_tls),
        (grpc, Port::Grpc, "gRPC", grpc_tls),
    ] {
        let setup = PortSetup::client(&config.limits, tls);
        let serve = serve_port(activator.clone(), port, &config.limits, budget.clone());
        let stop = signal(rx.clone());
        tasks.push(tokio::spawn(crate::accept::serve_until(
            listener, name, setup, stop, None, serve,
        )));
    }
    // The admin port as the sidecar's: probes in plain HTTP for anyone, `/status` to the
    // operator (its client certificate over TLS, or its token) and to loopback.
    let admin_tls = config
        .server
        .status_client_ca
        .as_ref()
        .map(|ca| crate::tls::AdminTls::load(ca.into()))
        .transpose()
        .map_err(|e| anyhow::anyhow!("server.status_client_ca: {e}"))?;
    if let Some(tls) = &admin_tls {
        background.push(tokio::spawn(tls.clone().watch(every)));
    }
    let rules = AdminRules::new(&config.server.status_token_sha256, 0)
        .with_client_certificates(admin_tls.is_some());
    for (listener, name, router, tls) in [
        (
            admin,
            "admin",
            admin_router(activator.clone(), rules),
            admin_tls.map(PortTls::Offered),
        ),
        (
            metrics,
            "metrics",
            metrics_router(activator.clone()),
            metrics_tls.map(PortTls::Required),
        ),
    ] {
        let stop = signal(rx.clone());
        let limits = config.limits.clone();
        tasks.push(tokio::spawn(async move {
            crate::http::serve::serve_http1(listener, name, router, &limits, tls, stop).await;
        }));
    }
    tracing::info!(
        http_addr = %addrs.http,
        grpc_addr = %addrs.grpc,
        metrics_addr = %addrs.metrics,
        admin_addr = %addrs.admin,
        service = settings.service.as_deref().unwrap_or_default(),
        peers = ?settings.peers,
        deployment = settings.deployment.as_deref().unwrap_or_default(),
        max_held_calls = settings.max_held_calls,
        max_held_bytes = settings.max_held_bytes,
        hold_timeout_seconds = settings.hold_timeout_seconds,
        "infergate activator is serving"
    );
    Ok(Running {
        addrs,
        shutdown,
        tasks,
        background,
    })
}

/// A client port's connections: HTTP/1.1 and HTTP/2, each call through the activator.
fn serve_port(
    activator: Arc<Activator>,
    port: Port,
    limits: &infergate_config::Limits,
    budget: Arc<ByteBudget>,
) -> impl Fn(
    Io,
    crate::inflight::Activity,
) -> hyper_util::server::conn::auto::UpgradeableConnection<
    'static,
    TokioIo<Io>,
    TowerToHyperService<Tracked<PortService>>,
    TokioExecutor,
> + Clone
+ Send
+ 'static {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout())
        .half_close(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1 << 20)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(limits.keepalive())
        .keep_alive_timeout(limits.keepalive_timeout());
    move |io: Io, activity| {
        let service = PortService {
            activator: activator.clone(),
            port,
        };
        let service = Tracked::new(service, activity, budget.clone());
        builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
            .into_owned()
    }
}

/// One port's calls, each served by the activator.
#[derive(Clone)]
pub struct PortService {
    activator: Arc<Activator>,
    port: Port,
}

impl tower::Service<Request<Budgeted<Incoming>>> for PortService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Budgeted<Incoming>>) -> Self::Future {
        let activator = self.activator.clone();
        let port = self.port;
        Box::pin(async move { Ok(activator.serve(port, request).await) })
    }
}

/// Keeps the hold's phase: ready while a sidecar is, failed while the service's status says it
/// cannot start, starting otherwise. Until aborted.
async fn watch_phase(activator: Arc<Activator>) {
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let phase = if activator.upstreams.any_ready() {
            Phase::Ready
        } else if let Some(reason) = activator.scaler.as_ref().and_then(|s| s.failure()) {
            Phase::Failed(reason)
        } else {
            Phase::Starting
        };
        let was = activator.hold.phase();
        if was == phase {
            continue;
        }
        let (held, bytes) = activator.hold.held();
        if let Some(took) = activator.hold.set_phase(phase.clone()).await {
            activator.record_cold_start(took);
            tracing::info!(
                seconds = took.as_secs_f64(),
                held,
                bytes,
                "the service is ready: held calls go on"
            );
        } else {
            tracing::info!(from = ?was, to = ?phase, held, "the service changed");
        }
    }
}

impl Activator {
    fn record_cold_start(&self, took: Duration) {
        *self.last_cold_start.lock() = Some(took);
        self.cold_starts.fetch_add(1, Ordering::Relaxed);
    }
}

fn admin_router(activator: Arc<Activator>, rules: AdminRules) -> Router {
    // Live and ready while it serves: held calls are what it is for.
    Router::new()
        .route("/livez", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/readyz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route(
            "/status",
            get(
                move |caller: Option<axum::Extension<Caller>>,
                      certified: Option<axum::Extension<CertifiedClient>>,
                      headers: http::HeaderMap| {
                    let activator = activator.clone();
                    let rules = rules.clone();
                    async move {
                        let caller = caller.map(|axum::Extension(c)| c);
                        match rules.may_read_status(caller, certified.is_some(), &headers) {
                            Ok(()) => (
                                [(header::CONTENT_TYPE, "application/json")],
                                status(&activator).to_string(),
                            )
                                .into_response(),
                            Err(refusal) => crate::http::answer::admin_refusal(&refusal),
                        }
                    }
                },
            ),
        )
}

/// The activator's `/status`: where the service is, what is held, and the calls by outcome.
fn status(a: &Activator) -> serde_json::Value {
    let (held, bytes) = a.hold.held();
    let phase = match a.hold.phase() {
        Phase::Ready => "Ready".to_string(),
        Phase::Starting => "Starting".to_string(),
        Phase::Failed(reason) => format!("Failed: {reason}"),
    };
    let c = &a.counts;
    let n = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    serde_json::json!({
        "ready": true,
        "activator": {
            "phase": phase,
            "held_calls": held,
            "held_bytes": bytes,
            "in_flight": a.traffic.in_flight(),
            "quiet_seconds": a.traffic.quiet_for().as_secs(),
            "ready_sidecars": a.upstreams.ready().len(),
            "calls": {
                "passed": n(&c.passed),
                "released": n(&c.released),
                "refused": n(&c.refused),
                "failed": n(&c.failed),
                "timed_out": n(&c.timed_out),
                "unreachable": n(&c.unreachable),
            },
            "cold_starts": n(&a.cold_starts),
            "last_cold_start_seconds": a.last_cold_start.lock().map(|d| d.as_secs_f64()),
            "scale_ups": a.scaler.as_ref().map_or(0, |s| s.scale_ups()),
        },
    })
}

fn metrics_router(activator: Arc<Activator>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let activator = activator.clone();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    render_metrics(&activator),
                )
                    .into_response()
            }
        }),
    )
}

/// The activator's metrics, in the Prometheus text format.
fn render_metrics(a: &Activator) -> String {
    let mut out = String::new();
    let (held, bytes) = a.hold.held();
    let ready = a.upstreams.ready().len();
    let gauge = |out: &mut String, name: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        &mut out,
        "infergate_activator_held_calls",
        "Calls held now, waiting for a ready sidecar of the service.",
        held as f64,
    );
    gauge(
        &mut out,
        "infergate_activator_held_bytes",
        "Request bytes of the calls held now.",
        bytes as f64,
    );
    gauge(
        &mut out,
        "infergate_activator_ready_sidecars",
        "Sidecars of the service ready now.",
        ready as f64,
    );
    let last = a.last_cold_start.lock().map_or(0.0, |d| d.as_secs_f64());
    gauge(
        &mut out,
        "infergate_activator_last_cold_start_seconds",
        "From the first call held to a ready sidecar, the last time the service started with calls waiting.",
        last,
    );
    let c = &a.counts;
    let name = "infergate_activator_calls_total";
    let _ = writeln!(
        out,
        "# HELP {name} Calls by what became of them.\n# TYPE {name} counter"
    );
    for (outcome, n) in [
        ("passed", &c.passed),
        ("released", &c.released),
        ("refused", &c.refused),
        ("failed", &c.failed),
        ("timed_out", &c.timed_out),
        ("unreachable", &c.unreachable),
    ] {
        let _ = writeln!(
            out,
            "{name}{{outcome=\"{outcome}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }
    let name = "infergate_activator_cold_starts_total";
    let _ = writeln!(
        out,
        "# HELP {name} Times the service became ready with calls held.\n# TYPE {name} counter\n{name} {}",
        a.cold_starts.load(Ordering::Relaxed)
    );
    let name = "infergate_activator_scale_ups_total";
    let scale_ups = a.scaler.as_ref().map_or(0, |s| s.scale_ups());
    let _ = writeln!(
        out,
        "# HELP {name} Times this activator raised the Deployment's scale from zero.\n# TYPE {name} counter\n{name} {scale_ups}"
    );
    out
}
