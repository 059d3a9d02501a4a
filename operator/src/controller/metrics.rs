//! The operator's own metrics (Prometheus text) and health endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the reconcile-duration buckets, in seconds: a settled resource reconciles in
/// milliseconds (reads only), one with writes and probes in tens to hundreds, one whose API
/// calls time out in tens of seconds (the reconcile's limit is 60 s).
const RECONCILE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// Upper bounds of the cold-start buckets, in seconds: a small model starts in seconds, a large
/// one (an image pull, weights to load) in minutes.
const COLD_START_BUCKETS: [f64; 10] = [1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0];

/// The labels of a per-resource metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub namespace: String,
    pub name: String,
}

/// The controller's metrics, registered once in their own registry (names below are as
/// exposed; counters get `_total`).
pub struct Metrics {
    registry: Registry,
    /// `infergate_operator_reconciles_total`.
    pub reconciles: Counter,
    /// `infergate_operator_reconcile_errors_total`.
    pub reconcile_errors: Counter,
    /// `infergate_operator_reconcile_duration_seconds` (histogram).
    pub reconcile_duration: Histogram,
    /// `infergate_operator_child_writes_total`.
    pub writes: Counter,
    /// `infergate_operator_child_unchanged_total`.
    pub unchanged: Counter,
    /// `infergate_operator_child_deletes_total`.
    pub deletes: Counter,
    /// `infergate_operator_status_writes_total`.
    pub status_writes: Counter,
    /// `infergate_operator_probe_failures_total`.
    pub probe_failures: Counter,
    /// `infergate_operator_leader` (1 leads, 0 waits).
    leader_gauge: Gauge,
    /// `infergate_operator_held_calls{namespace,name}`: calls the activators of a resource with
    /// scale to zero hold, as they last reported.
    pub held_calls: Family<ResourceLabels, Gauge>,
    /// `infergate_operator_scale_to_zero_total`: services this operator took to zero.
    pub scaled_to_zero: Counter,
    /// `infergate_operator_cold_start_seconds` (histogram): from a scale-up from zero to the first
    /// ready pod, as the operator saw them.
    pub cold_starts: Histogram,
    /// Set once the controller runs (as leader, or as the only replica).
    pub started: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("infergate_operator");
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let reconciles = counter(&mut registry, "reconciles", "Reconciles run");
        let reconcile_errors = counter(
            &mut registry,
            "reconcile_errors",
            "Reconciles that failed and were retried with backoff",
        );
        let reconcile_duration = Histogram::new(RECONCILE_BUCKETS);
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took, API calls and probes included",
            reconcile_duration.clone(),
        );
        let writes = counter(
            &mut registry,
            "child_writes",
            "Child objects created or changed (server-side apply)",
        );
        let unchanged = counter(
            &mut registry,
            "child_unchanged",
            "Child objects found as desired (no write)",
        );
        let deletes = counter(&mut registry, "child_deletes", "Child objects deleted");
        let status_writes = counter(&mut registry, "status_writes", "Status updates written");
        let probe_failures = counter(
            &mut registry,
            "probe_failures",
            "Sidecar admin probes that failed or timed out",
        );
        let leader_gauge = Gauge::default();
        registry.register(
            "leader",
            "Whether this replica leads (1) or waits (0)",
            leader_gauge.clone(),
        );
        let held_calls = Family::<ResourceLabels, Gauge>::default();
        registry.register(
            "held_calls",
            "Calls the activators of an InferenceService hold while it has no ready pod",
            held_calls.clone(),
        );
        let scaled_to_zero = counter(
            &mut registry,
            "scale_to_zero",
            "Times an idle InferenceService was taken to zero pods",
        );
        let cold_starts = Histogram::new(COLD_START_BUCKETS);
        registry.register(
            "cold_start_seconds",
            "From a scale-up from zero to the first ready pod",
            cold_starts.clone(),
        );
        Metrics {
            registry,
            held_calls,
            scaled_to_zero,
            cold_starts,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            writes,
            unchanged,
            deletes,
            status_writes,
            probe_failures,
            leader_gauge,
            started: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    /// One child's write, as `apply` reports it.
    pub fn count(&self, outcome: super::apply::Outcome) {
        use super::apply::Outcome;
        let counter = match outcome {
            Outcome::Written => &self.writes,
            Outcome::Unchanged => &self.unchanged,
            Outcome::Deleted => &self.deletes,
            Outcome::Absent => return,
        };
        counter.inc();
    }

    pub fn observe_reconcile(&self, took: Duration, ok: bool) {
        self.reconciles.inc();
        if !ok {
            self.reconcile_errors.inc();
        }
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// This replica now leads (or runs alone).
    pub fn set_leader(&self) {
        self.leader_gauge.set(1);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoding error would leave what was written.
        let _ = encode(&mut out, &self.registry);
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
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
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

    #[test]
    fn the_exposition_has_every_metric_and_a_real_histogram() {
        let m = Metrics::default();
        m.observe_reconcile(Duration::from_millis(30), true);
        m.observe_reconcile(Duration::from_secs(2), false);
        m.writes.inc_by(3);
        m.set_leader();
        let text = m.render();
        for line in [
            "infergate_operator_reconciles_total 2",
            "infergate_operator_reconcile_errors_total 1",
            "infergate_operator_child_writes_total 3",
            "infergate_operator_child_unchanged_total 0",
            "infergate_operator_child_deletes_total 0",
            "infergate_operator_status_writes_total 0",
            "infergate_operator_probe_failures_total 0",
            "infergate_operator_leader 1",
            "infergate_operator_reconcile_duration_seconds_count 2",
            "infergate_operator_reconcile_duration_seconds_bucket{le=\"0.05\"} 1",
            "infergate_operator_reconcile_duration_seconds_bucket{le=\"2.5\"} 2",
            "# TYPE infergate_operator_reconcile_duration_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[tokio::test]
    async fn the_default_address_answers_over_ipv4_whatever_the_system_has() {
        let listener = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connected = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
        assert!(connected.is_ok(), "{connected:?}");
    }
}
