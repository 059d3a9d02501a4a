//! The sidecar's own families (`infergate_*`): the upstream's calls and staging pool, and the
//! sequence batchers' state, encoded by prometheus-client at scrape time.
//!
//! The values are the counters the request path already keeps (atomics it bumps anyway), read
//! when the metrics port is scraped: the library costs the request path nothing.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::core::sequence::SequenceCounters;
use crate::state::SharedState;

/// Appends the families, in the Prometheus text format (version 0.0.4), to `out`.
pub fn render(state: &SharedState, out: &mut String) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Own(state.clone())));
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(out, &registry) {
        tracing::warn!(error = %e, "the sidecar's own metrics could not be written");
    }
}

struct Own(SharedState);

impl fmt::Debug for Own {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("infergate metrics")
    }
}

impl Collector for Own {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        sequences(&self.0, &mut encoder)?;
        canary(&self.0, &mut encoder)?;
        upstream(&self.0, &mut encoder)
    }
}

/// One family of rows (labels, value); counters are named without `_total`, which the encoder
/// adds.
fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: impl IntoIterator<Item = (Vec<(&'static str, String)>, u64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        let encoder = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(encoder)?,
            _ => ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder)?,
        }
    }
    Ok(())
}

fn label(key: &'static str, value: &str) -> Vec<(&'static str, String)> {
    vec![(key, value.to_string())]
}

/// Name, help, type and reader of one sequence family.
type SequenceFamily = (
    &'static str,
    &'static str,
    MetricType,
    fn(&SequenceCounters) -> u64,
);

/// Sequence-batcher state of sequence models: slots in use, sequences waiting, idle releases.
fn sequences(state: &SharedState, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let models = state.repository.ready_models();
    let sequencers: Vec<_> = models
        .iter()
        .filter_map(|m| m.sequencer.as_ref().map(|s| (m, s.counters())))
        .collect();
    if sequencers.is_empty() {
        return Ok(());
    }
    let families: [SequenceFamily; 3] = [
        (
            "infergate_sequence_active",
            "Sequences holding a slot",
            MetricType::Gauge,
            |c| c.active,
        ),
        (
            "infergate_sequence_backlog",
            "Sequences waiting for a slot",
            MetricType::Gauge,
            |c| c.backlog,
        ),
        (
            "infergate_sequence_idle_timeouts",
            "Sequences released after their idle timeout",
            MetricType::Counter,
            |c| c.timeouts,
        ),
    ];
    for (name, help, kind, value) in families {
        let rows = sequencers.iter().map(|(model, counters)| {
            let labels = vec![
                ("model", model.name.clone()),
                ("version", model.version.to_string()),
            ];
            (labels, value(counters))
        });
        family(encoder, name, help, kind, rows)?;
    }
    Ok(())
}

/// The canary's split, where there is one: the share, and the clients' calls of each variant as
/// this sidecar saw them (those it served, and those the canary answered), by outcome.
fn canary(state: &SharedState, encoder: &mut DescriptorEncoder) -> fmt::Result {
    use crate::canary::Variant;
    let Some(canary) = &state.canary else {
        return Ok(());
    };
    family(
        encoder,
        "infergate_canary_traffic_percent",
        "Percent of the clients' calls given to the canary",
        MetricType::Gauge,
        [(Vec::new(), u64::from(canary.percent()))],
    )?;
    let rows = [Variant::Stable, Variant::Canary]
        .into_iter()
        .flat_map(|variant| {
            let (succeeded, failed) = canary.calls(variant);
            let labels = |outcome: &str| {
                vec![
                    ("variant", variant.as_str().to_string()),
                    ("outcome", outcome.to_string()),
                ]
            };
            [(labels("success"), succeeded), (labels("failure"), failed)]
        });
    family(
        encoder,
        "infergate_variant_requests",
        "Clients' inference calls by the variant that served them (stable here, or the canary)",
        MetricType::Counter,
        rows,
    )
}

/// The upstream: calls by protocol, how many tensor bytes went through shared memory instead
/// of the socket, and how full the pool is.
fn upstream(state: &SharedState, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let Some(handle) = &state.upstream else {
        return Ok(());
    };
    let upstream = &handle.upstream;
    let counters = &upstream.shared_pool.counters;
    let status = upstream.shared_pool.status();
    let by_direction = |input: u64, output: u64| {
        [
            (label("direction", "input"), input),
            (label("direction", "output"), output),
        ]
    };
    family(
        encoder,
        "infergate_staging_bytes",
        "Tensor bytes moved to and from the upstream through the staging pool",
        MetricType::Counter,
        by_direction(
            counters.input_bytes.load(Relaxed),
            counters.output_bytes.load(Relaxed),
        ),
    )?;
    family(
        encoder,
        "infergate_passthrough_bytes",
        "Tensor bytes the upstream read from and wrote to clients' shared-memory regions itself",
        MetricType::Counter,
        by_direction(
            upstream.passthrough.input_bytes.load(Relaxed),
            upstream.passthrough.output_bytes.load(Relaxed),
        ),
    )?;
    family(
        encoder,
        "infergate_upstream_calls",
        "Inference calls made to the upstream, by the protocol they went over",
        MetricType::Counter,
        [
            (label("protocol", "grpc"), upstream.calls.grpc.load(Relaxed)),
            (label("protocol", "rest"), upstream.calls.rest.load(Relaxed)),
        ],
    )?;
    let single = |value: u64| [(Vec::new(), value)];
    family(
        encoder,
        "infergate_staging_pool_full",
        "Tensors sent over the socket because the staging pool had no free slot",
        MetricType::Counter,
        single(counters.pool_full.load(Relaxed)),
    )?;
    family(
        encoder,
        "infergate_staging_registrations",
        "Registrations of the staging pool with the upstream",
        MetricType::Counter,
        single(counters.registrations.load(Relaxed)),
    )?;
    family(
        encoder,
        "infergate_staging_pool_bytes",
        "Size of the staging pool",
        MetricType::Gauge,
        single(status.byte_size),
    )?;
    family(
        encoder,
        "infergate_staging_pool_in_use_bytes",
        "Bytes of the staging pool held by requests in flight",
        MetricType::Gauge,
        single(status.in_use),
    )?;
    family(
        encoder,
        "infergate_staging_pool_active",
        "1 while the staging pool is registered with the upstream",
        MetricType::Gauge,
        single(u64::from(status.state == "Active")),
    )
}
