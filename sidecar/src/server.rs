//! Binds the listeners, serves until SIGTERM or SIGINT, then drains: readiness turns false, no
//! new connections are accepted, in-flight requests get the grace period to finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use infergate_config::{BackendConfig, Limits, ModelControlMode, ServerSettings, SidecarConfig};
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use crate::accept::PortTls;
use crate::backend::builtin::Catalog;
use crate::backend::upstream::{Upstream, UpstreamLoader, run_discovery};
use crate::core::repository::Repository;
use crate::log::LogControl;
use crate::restricted::Guard;
use crate::state::{AppState, SharedState, UpstreamHandle};
use crate::tls::{Tls, TlsFiles};
use crate::trace::Tracing;

/// Addresses the server actually listens on (ports chosen when 0 was asked for).
#[derive(Clone, Copy, Debug)]
pub struct BoundAddrs {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
    pub admin: SocketAddr,
}

/// Builds the state a configuration describes.
pub fn build_state(config: &SidecarConfig, log: LogControl) -> anyhow::Result<SharedState> {
    let mut upstream = None;
    let repository = match &config.backend {
        BackendConfig::Builtin { models } => Repository::new(Arc::new(Catalog::default()), models)
            .map_err(|e| anyhow::anyhow!(e.message))?,
        BackendConfig::Upstream(up) => {
            let max_message =
                usize::try_from(config.limits.max_grpc_message_bytes).unwrap_or(usize::MAX);
            let client = Upstream::new(up, max_message).map_err(|e| anyhow::anyhow!(e.message))?;
            let loader = Arc::new(UpstreamLoader::default());
            let info = crate::backend::upstream::UpstreamInfo {
                url: up.url.clone(),
                ..Default::default()
            };
            upstream = Some(UpstreamHandle {
                upstream: Arc::new(client),
                loader: loader.clone(),
                config: up.clone(),
                info: Arc::new(parking_lot::RwLock::new(info)),
            });
            Repository::empty(loader)
        }
    };
    let pod_only = config
        .server
        .pod_only_categories()
        .map_err(|e| anyhow::anyhow!("--pod-only-api: {e}"))?;
    let http_restricted = config
        .server
        .http_restrictions()
        .and_then(|r| Guard::http(&r))
        .map_err(|e| anyhow::anyhow!("--http-restricted-api: {e}"))?
        .pod_only(&pod_only, false);
    let grpc_restricted = config
        .server
        .grpc_restrictions()
        .and_then(|r| Guard::grpc(&r))
        .map_err(|e| anyhow::anyhow!("--grpc-restricted-protocol: {e}"))?
        .pod_only(&pod_only, true);
    let identity = config
        .server
        .identity
        .as_ref()
        .map(crate::identity::Authenticator::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("server.identity: {e}"))?
        .map(Arc::new);
    let peers = sequence_peers(&config.server, &config.limits)?;
    let canary = canary(&config.server, &config.limits)?;
    let http_tls = port_tls(&config.server.http_tls, &["h2", "http/1.1"])
        .map_err(|e| anyhow::anyhow!("HTTP port TLS: {e}"))?;
    let grpc_tls = port_tls(&config.server.grpc_tls, &["h2"])
        .map_err(|e| anyhow::anyhow!("gRPC port TLS: {e}"))?;
    let metrics_tls = port_tls(&config.server.metrics_tls, &["http/1.1"])
        .map_err(|e| anyhow::anyhow!("metrics port TLS: {e}"))?;
    let admin_tls = config
        .server
        .status_client_ca
        .as_ref()
        .map(|ca| crate::tls::AdminTls::load(ca.into()))
        .transpose()
        .map_err(|e| anyhow::anyhow!("server.status_client_ca: {e}"))?;
    let tracing = config
        .server
        .trace()
        .and_then(Tracing::new)
        .map_err(|e| anyhow::anyhow!("--trace-config: {e}"))?;
    let mut state = AppState::new(
        Arc::new(repository),
        config.server.name.clone(),
        config.limits.clone(),
        log,
        config.server.allow_client_shm,
    );
    // The staging pool carries other clients' tensors: no client may register it.
    if let Some(pool) = upstream
        .as_ref()
        .and_then(|h| h.upstream.shared_pool.object_id())
    {
        state.shm.reserve(pool);
    }
    if let Some(state) = Arc::get_mut(&mut state) {
        state.upstream = upstream;
        state.model_control = config.server.model_control_mode;
        state.http_restricted = http_restricted;
        state.grpc_restricted = grpc_restricted;
        state.identity = identity;
        state.tracing = Arc::new(tracing);
        state.peers = peers;
        state.canary = canary;
        state.allow_remote_shm = config.server.allow_remote_shm;
        state.http_tls = http_tls;
        state.grpc_tls = grpc_tls;
        state.metrics_tls = metrics_tls;
        state.admin_tls = admin_tls;
        state.admin = crate::admin_access::AdminRules::new(
            &config.server.status_token_sha256,
            config.server.max_drain_seconds,
        )
        .with_client_certificates(state.admin_tls.is_some());
    }
    if config.server.allow_remote_shm {
        tracing::warn!(
            "shared memory is served to callers off loopback too (server.allow_remote_shm): any host that reaches the ports may register, read and write regions"
        );
    }
    Ok(state)
}

pub struct Running {
    pub addrs: BoundAddrs,
    pub state: SharedState,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Tasks that run until the process stops (upstream discovery and probing).
    background: Vec<tokio::task::JoinHandle<()>>,
}

pub(crate) async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    match TcpListener::bind((host, port)).await {
        // `::`, the default, is every address of both families (Linux accepts IPv4 on it unless
        // net.ipv6.bindv6only is set). In a pod or on a host without IPv6, every IPv4 address.
        Err(e) if host == "::" && ipv6_unavailable(&e) => {
            tracing::warn!(port, error = %e, "no IPv6 here: listening on 0.0.0.0 instead of ::");
            TcpListener::bind(("0.0.0.0", port))
                .await
                .with_context(|| format!("cannot listen on 0.0.0.0:{port}"))
        }
        bound => bound.with_context(|| format!("cannot listen on {host}:{port}")),
    }
}

/// Whether binding failed because the system has no IPv6 (the kernel has it off, or the network
/// namespace has no IPv6 address), not because of the port.
fn ipv6_unavailable(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error().is_some_and(|code| {
        code == Errno::EAFNOSUPPORT as i32 || code == Errno::EADDRNOTAVAIL as i32
    })
}

/// A port's TLS, loaded, where its settings turn it on.
pub(crate) fn port_tls(
    settings: &infergate_config::TlsSettings,
    alpn: &[&str],
) -> Result<Option<Arc<Tls>>, String> {
    if !settings.enabled() {
        return Ok(None);
    }
    let file = |f: &Option<String>| f.as_ref().map(std::path::PathBuf::from);
    let files = TlsFiles {
        cert: file(&settings.server_cert).ok_or("no server certificate")?,
        key: file(&settings.server_key).ok_or("no server key")?,
        root: file(&settings.root_cert),
        mutual: settings.use_ssl_mutual,
    };
    Tls::load(files, alpn).map(Some)
}

/// The TLS sequence peers are dialled with, where it is configured.
pub(crate) fn peer_tls(
    settings: &infergate_config::PeerTlsSettings,
) -> Result<Option<Arc<crate::tls::ClientTls>>, String> {
    let (Some(root), Some(name)) = (&settings.root_cert, &settings.server_name) else {
        return Ok(None);
    };
    let identity = settings
        .client_cert
        .as_ref()
        .zip(settings.client_key.as_ref())
        .map(|(cert, key)| (cert.into(), key.into()));
    let files = crate::tls::ClientTlsFiles {
        root: root.into(),
        identity,
    };
    crate::tls::ClientTls::load(files, name).map(Some)
}

/// The peers sequences are routed across: the fixed list, or the Service whose pods they are.
fn sequence_peers(
    server: &ServerSettings,
    limits: &Limits,
) -> anyhow::Result<Option<Arc<crate::peers::Peers>>> {
    use crate::peers::kubernetes::Target;
    use crate::peers::membership::{Dial, Members};
    let max_message_bytes = usize::try_from(limits.max_grpc_message_bytes).unwrap_or(usize::MAX);
    let dial = Dial {
        max_message_bytes,
        tls: peer_tls(&server.sequence_peers_tls)
            .map_err(|e| anyhow::anyhow!("sequence peers' TLS: {e}"))?,
    };
    let peers = match (
        &server.sequence_peers_service,
        server.sequence_peers.as_slice(),
    ) {
        (Some(service), _) => {
            let mut target = Target::from_setting(service, server.grpc_port)
                .map_err(|e| anyhow::anyhow!("--sequence-peers-service: {e}"))?;
            target.labels = server.sequence_peers_labels.clone();
            let members = Members::discovered(&target.me, dial)
                .map_err(|e| anyhow::anyhow!("--sequence-peers-service: {e}"))?;
            crate::peers::Peers::new(members, Some(target))
        }
        (None, []) => return Ok(None),
        (None, list) => {
            let members = Members::fixed(
                list,
                server.sequence_self.as_deref(),
                server.grpc_port,
                dial,
            )
            .map_err(|e| anyhow::anyhow!("--sequence-peers: {e}"))?;
            crate::peers::Peers::new(members, None)
        }
    };
    Ok(Some(Arc::new(peers)))
}

/// Sidecars this one is not among (a canary's, or the service's for its activator), named
/// `group` in the log: the fixed list `peers`, or the pods of the headless Service `service`
/// (`field` names the setting in errors).
pub(crate) fn other_sidecars(
    tls: &infergate_config::PeerTlsSettings,
    service: Option<&str>,
    labels: Option<&str>,
    peers: &[String],
    limits: &Limits,
    group: &'static str,
    field: &str,
) -> anyhow::Result<(
    crate::peers::membership::Members,
    Option<crate::peers::kubernetes::Target>,
)> {
    use crate::peers::kubernetes::Target;
    use crate::peers::membership::{Dial, Members};
    let dial = Dial {
        max_message_bytes: usize::try_from(limits.max_grpc_message_bytes).unwrap_or(usize::MAX),
        tls: peer_tls(tls).map_err(|e| anyhow::anyhow!("{field}.tls: {e}"))?,
    };
    let members = Members::others(dial, group);
    let discovery = match service {
        Some(service) => {
            let mut target =
                Target::of_others(service).map_err(|e| anyhow::anyhow!("{field}.service: {e}"))?;
            target.labels = labels.map(str::to_string);
            Some(target)
        }
        None => {
            members.replace(peers);
            None
        }
    };
    Ok((members, discovery))
}

/// The canary given a share of the calls, where one is configured.
fn canary(
    server: &ServerSettings,
    limits: &Limits,
) -> anyhow::Result<Option<Arc<crate::canary::Canary>>> {
    use crate::canary::{Canary, share::Share};
    let Some(settings) = &server.canary else {
        return Ok(None);
    };
    let (members, discovery) = other_sidecars(
        &settings.tls,
        settings.service.as_deref(),
        settings.labels.as_deref(),
        &settings.peers,
        limits,
        "canary",
        "server.canary",
    )?;
    let share = Share::new(
        settings.traffic_percent,
        settings.traffic_percent_file.as_ref().map(Into::into),
    );
    Ok(Some(Arc::new(Canary::new(members, discovery, share))))
}

/// Binds and starts serving; returns once every listener accepts connections.
pub async fn start(config: &SidecarConfig, state: SharedState) -> anyhow::Result<Running> {
    if let Some(dir) = &config.server.drain_hook_dir {
        install_drain_hook(std::path::Path::new(dir))?;
    }
    let host = config.server.bind_host();
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
    let (shutdown, rx) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut tasks = Vec::new();
    let mut background = Vec::new();
    let app = crate::http::front(state.clone());
    let stop = signal(rx.clone());
    let limits = state.limits.clone();
    let tls = state.http_tls.clone();
    tasks.push(tokio::spawn(async move {
        crate::http::serve::serve(http, app, &limits, tls, stop).await;
    }));

    let grpc_services = crate::grpc::Restricted::new(
        state.clone(),
        crate::grpc::Services::new(
            crate::grpc::inference_service(state.clone()),
            crate::grpc::health_service(state.clone()),
        ),
    );
    let stop = signal(rx.clone());
    let drain = state.health.draining();
    let limits = state.limits.clone();
    let budget = state.request_bytes.clone();
    let tls = state.grpc_tls.clone();
    tasks.push(tokio::spawn(async move {
        crate::grpc::serve(grpc, grpc_services, &limits, budget, tls, stop, drain).await;
    }));
    // Renewed certificates are picked up while serving.
    let every = Duration::from_secs(config.server.tls_reload_seconds);
    for tls in [&state.http_tls, &state.grpc_tls, &state.metrics_tls]
        .into_iter()
        .flatten()
    {
        background.push(tokio::spawn(tls.clone().watch(every)));
    }
    if let Some(tls) = state.peers.as_ref().and_then(|p| p.tls()) {
        background.push(tokio::spawn(tls.watch(every)));
    }
    // And changed restricted-API keys, where they come from files.
    if state.http_restricted.has_key_files() || state.grpc_restricted.has_key_files() {
        let every = Duration::from_secs(config.server.key_reload_seconds);
        let state = state.clone();
        background.push(tokio::spawn(crate::reload::every(every, move || {
            state.http_restricted.reload();
            state.grpc_restricted.reload();
        })));
    }

    // The API server is reached, and the issuer's keys read, before the first caller waits.
    if let Some(identity) = state.identity.clone() {
        background.push(tokio::spawn(async move { identity.warm_up().await }));
    }

    // The admin port speaks plain HTTP to the kubelet's probes and the preStop hook, which
    // cannot present a certificate, and TLS to the operator, which presents one of
    // `server.status_client_ca` to read /status.
    let admin_tls = state.admin_tls.clone();
    if let Some(tls) = &admin_tls {
        background.push(tokio::spawn(tls.clone().watch(every)));
    }
    for (listener, port, router, tls) in [
        (
            admin,
            "admin",
            crate::admin::router(state.clone()),
            admin_tls.map(PortTls::Offered),
        ),
        (
            metrics,
            "metrics",
            crate::metrics::router(state.clone()),
            state.metrics_tls.clone().map(PortTls::Required),
        ),
    ] {
        let stop = signal(rx.clone());
        let limits = state.limits.clone();
        tasks.push(tokio::spawn(async move {
            crate::http::serve::serve_http1(listener, port, router, &limits, tls, stop).await;
        }));
    }
    drop(rx);

    if let Some(peers) = &state.peers {
        tracing::info!(me = peers.address(), peers = ?peers.states(false), "routing sequences across replicas");
        background.extend(peers.spawn());
    }
    if let Some(canary) = &state.canary {
        tracing::info!(percent = canary.percent(), peers = ?canary.peers(), "splitting calls with a canary");
        background.extend(canary.spawn());
    }
    match &state.upstream {
        // Ready once the upstream's models are discovered, and from then on as the upstream is.
        Some(h) => {
            let task = run_discovery(
                state.repository.clone(),
                state.health.clone(),
                h.upstream.clone(),
                h.config.clone(),
                h.loader.clone(),
                h.info.clone(),
            );
            background.push(tokio::spawn(task));
        }
        None => state.health.set_ready(true),
    }
    Ok(Running {
        addrs,
        state,
        shutdown,
        tasks,
        background,
    })
}

/// Copies the preStop hook, `infergate-drain` beside this binary, into `dir`: a volume the model
/// server's container mounts, whose hook runs it there (the hook must reach the admin port on
/// loopback, so it runs in the pod; `infergate-drain` is static, so it runs in any image).
fn install_drain_hook(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let me = std::env::current_exe().context("cannot find this binary")?;
    let hook = me.with_file_name(infergate_drain::BINARY);
    let installed = infergate_drain::install(&hook, dir).with_context(|| {
        format!(
            "cannot copy the preStop hook {} into server.drain_hook_dir {}",
            hook.display(),
            dir.display()
        )
    })?;
    tracing::info!(path = %installed.display(), "preStop hook installed");
    Ok(())
}

impl Running {
    /// Stops accepting, lets in-flight requests finish for up to `grace`, then returns.
    pub async fn shutdown(self, grace: Duration) {
        self.state.health.begin_shutdown();
        self.background
            .iter()
            .for_each(tokio::task::JoinHandle::abort);
        let _ = self.shutdown.send(true);
        let drained = futures::future::join_all(self.tasks);
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "requests still in flight after the grace period; exiting"
            );
        }
        if let Some(h) = &self.state.upstream {
            h.upstream.passthrough.release(h.upstream.link()).await;
            h.upstream.shared_pool.release(h.upstream.client()).await;
        }
        // The exporter's last batch: sent from a blocking thread, as its client blocks.
        let tracing = self.state.tracing.clone();
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    }

    /// Triton's start summary, logged before its "Started ..." lines: the model table (for an
    /// upstream, discovery logs it once the models are known) and the options table, with the
    /// rows that mean something here and the upstream's address.
    pub fn log_start_summary(&self, config: &SidecarConfig) {
        let state = &self.state;
        if state.upstream.is_none() {
            state.repository.log_model_table();
        }
        let mode = match state.model_control {
            ModelControlMode::None => "MODE_NONE",
            ModelControlMode::Poll => "MODE_POLL",
            ModelControlMode::Explicit => "MODE_EXPLICIT",
        };
        let mut rows = vec![
            vec!["server_id".to_string(), state.server.name.clone()],
            vec!["server_version".to_string(), state.server.version.clone()],
            vec![
                "server_extensions".to_string(),
                state.server.extensions.join(" "),
            ],
            vec!["model_control_mode".to_string(), mode.to_string()],
        ];
        if let Some(handle) = &state.upstream {
            rows.push(vec!["upstream".to_string(), handle.config.url.clone()]);
        }
        rows.push(vec![
            "exit_timeout".to_string(),
            config.server.shutdown_grace_seconds.to_string(),
        ]);
        let table = crate::log::line::table(&["Option", "Value"], &rows);
        tracing::info!(table = %table, "options");
    }
}

/// SIGTERM and SIGINT, listened for from the moment this is made. Make it before the server
/// says it is up: until a handler exists, SIGTERM's default action kills the process, so a stop
/// sent right after start-up would not be graceful.
pub struct Termination {
    term: Option<Signal>,
    interrupt: Option<Signal>,
}

impl Termination {
    pub fn listen() -> Termination {
        Termination {
            term: signal(SignalKind::terminate()).ok(),
            interrupt: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// Resolves on the first of the two signals (never, if neither could be listened for).
    pub async fn wait(mut self) {
        async fn next(signal: &mut Option<Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => {}
            () = next(&mut self.interrupt) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    #[test]
    fn only_a_missing_address_family_falls_back_to_ipv4() {
        let os = |errno: Errno| std::io::Error::from_raw_os_error(errno as i32);
        assert!(ipv6_unavailable(&os(Errno::EAFNOSUPPORT)));
        assert!(ipv6_unavailable(&os(Errno::EADDRNOTAVAIL)));
        assert!(!ipv6_unavailable(&os(Errno::EADDRINUSE)));
        assert!(!ipv6_unavailable(&os(Errno::EACCES)));
    }

    #[tokio::test]
    async fn the_default_host_listens_on_both_families_where_the_system_has_them() {
        let listener = bind("::", 0).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // IPv4 always answers: on `::` itself, or on 0.0.0.0 after the fallback.
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        );
        if listener.local_addr().unwrap().is_ipv6() {
            assert!(tokio::net::TcpStream::connect(("::1", port)).await.is_ok());
        }
    }
}
