//! The operator's own metrics (Prometheus text) and health endpoints.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// Counters of the controller's work.
#[derive(Default)]
pub struct Metrics {
    pub reconciles: AtomicU64,
    pub reconcile_errors: AtomicU64,
    /// Sum of reconcile durations, in microseconds.
    pub reconcile_micros: AtomicU64,
    pub writes: AtomicU64,
    pub unchanged: AtomicU64,
    pub deletes: AtomicU64,
    pub status_writes: AtomicU64,
    pub probe_failures: AtomicU64,
    pub leader: AtomicBool,
    /// Set once the controller runs (as leader, or as the only replica).
    pub started: AtomicBool,
}

impl Metrics {
    pub fn observe_reconcile(&self, took: Duration, ok: bool) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.reconcile_errors.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.reconcile_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut out,
            "infergate_operator_reconciles_total",
            "Reconciles run.",
            load(&self.reconciles),
        );
        counter(
            &mut out,
            "infergate_operator_reconcile_errors_total",
            "Reconciles that failed and were retried with backoff.",
            load(&self.reconcile_errors),
        );
        let _ = writeln!(
            out,
            "# HELP infergate_operator_reconcile_seconds_total Time spent reconciling.\n# TYPE infergate_operator_reconcile_seconds_total counter\ninfergate_operator_reconcile_seconds_total {:.6}",
            load(&self.reconcile_micros) as f64 / 1e6
        );
        counter(
            &mut out,
            "infergate_operator_child_writes_total",
            "Child objects created or changed (server-side apply).",
            load(&self.writes),
        );
        counter(
            &mut out,
            "infergate_operator_child_unchanged_total",
            "Child objects found as desired (no write).",
            load(&self.unchanged),
        );
        counter(
            &mut out,
            "infergate_operator_child_deletes_total",
            "Child objects deleted.",
            load(&self.deletes),
        );
        counter(
            &mut out,
            "infergate_operator_status_writes_total",
            "Status updates written.",
            load(&self.status_writes),
        );
        counter(
            &mut out,
            "infergate_operator_probe_failures_total",
            "Sidecar admin probes that failed or timed out.",
            load(&self.probe_failures),
        );
        let _ = writeln!(
            out,
            "# HELP infergate_operator_leader Whether this replica leads (1) or waits (0).\n# TYPE infergate_operator_leader gauge\ninfergate_operator_leader {}",
            u8::from(self.leader.load(Ordering::Relaxed))
        );
        out
    }
}

/// Serves `/metrics`, `/healthz` (the process runs) and `/readyz` (the controller has started,
/// or waits as a follower: both are healthy states).
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    let listener = bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "metrics and health endpoints listening");
    axum::serve(listener, app).await?;
    Ok(())
}

/// Binds `addr`; the IPv6 wildcard falls back to the IPv4 one where the system has no IPv6, so
/// that the same default serves every cluster (the kubelet probes the pod's address, whichever
/// family it has).
async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use nix::errno::Errno;
    match tokio::net::TcpListener::bind(addr).await {
        Err(e)
            if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED
                && e.raw_os_error().is_some_and(|code| {
                    code == Errno::EAFNOSUPPORT as i32 || code == Errno::EADDRNOTAVAIL as i32
                }) =>
        {
            tracing::warn!(error = %e, "no IPv6 here: listening on 0.0.0.0 instead of [::]");
            tokio::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port())).await
        }
        bound => bound,
    }
}

async fn metrics_text(
    State(m): State<Arc<Metrics>>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.render(),
    )
}

async fn readyz(State(m): State<Arc<Metrics>>) -> (StatusCode, &'static str) {
    if m.started.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_default_address_answers_over_ipv4_whatever_the_system_has() {
        let listener = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connected = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
        assert!(connected.is_ok(), "{connected:?}");
    }
}
