//! Prometheus text exposition on the metrics port, with Triton's `nv_inference_*` families.

use std::fmt::Write;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};

use crate::core::sequence::SequenceCounters;
use crate::state::SharedState;

pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/", get(metrics))
        .fallback(|method: http::Method| async move {
            if method == http::Method::GET {
                StatusCode::OK.into_response()
            } else {
                StatusCode::METHOD_NOT_ALLOWED.into_response()
            }
        })
        .method_not_allowed_fallback(|| async { StatusCode::METHOD_NOT_ALLOWED })
        .with_state(state)
}

async fn metrics(State(state): State<SharedState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        render(&state),
    )
        .into_response()
}

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "nv_inference_request_success",
        help: "Number of successful inference requests, all batch sizes",
        kind: "counter",
    },
    Family {
        name: "nv_inference_request_failure",
        help: "Number of failed inference requests, all batch sizes",
        kind: "counter",
    },
    Family {
        name: "nv_inference_count",
        help: "Number of inferences performed (does not include cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_exec_count",
        help: "Number of model executions performed (does not include cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_pending_request_count",
        help: "Instantaneous number of pending requests awaiting execution per-model.",
        kind: "gauge",
    },
    Family {
        name: "nv_inference_request_duration_us",
        help: "Cumulative inference request duration in microseconds (includes cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_queue_duration_us",
        help: "Cumulative inference queuing duration in microseconds (includes cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_compute_input_duration_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_compute_infer_duration_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        kind: "counter",
    },
    Family {
        name: "nv_inference_compute_output_duration_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        kind: "counter",
    },
];

pub fn render(state: &SharedState) -> String {
    let models = state.repository.ready_models();
    let snapshots: Vec<_> = models.iter().map(|m| (m, m.stats.snapshot())).collect();
    let mut out = String::with_capacity(4096);
    for family in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (model, s) in &snapshots {
            let labels = format!(
                "model=\"{}\",version=\"{}\"",
                escape(&model.name),
                model.version
            );
            let us = |ns: u64| ns / 1000;
            match family.name {
                "nv_inference_request_failure" => {
                    // Labels in Triton's order (sorted by name), reasons in its order too.
                    for (reason, n) in [
                        ("OTHER", 0),
                        ("BACKEND", s.failures_backend),
                        ("CANCELED", 0),
                        ("REJECTED", s.failures_rejected),
                    ] {
                        let _ = writeln!(
                            out,
                            "{}{{model=\"{}\",reason=\"{reason}\",version=\"{}\"}} {n}",
                            family.name,
                            escape(&model.name),
                            model.version
                        );
                    }
                    continue;
                }
                "nv_inference_pending_request_count" => {
                    let _ = writeln!(out, "{}{{{labels}}} {}", family.name, model.stats.pending());
                    continue;
                }
                _ => {}
            }
            let value = match family.name {
                "nv_inference_request_success" => s.success.count,
                "nv_inference_count" => s.inference_count,
                "nv_inference_exec_count" => s.execution_count,
                "nv_inference_request_duration_us" => us(s.success.ns.saturating_add(s.fail.ns)),
                "nv_inference_queue_duration_us" => us(s.queue.ns),
                "nv_inference_compute_input_duration_us" => us(s.compute_input.ns),
                "nv_inference_compute_infer_duration_us" => us(s.compute_infer.ns),
                "nv_inference_compute_output_duration_us" => us(s.compute_output.ns),
                _ => 0,
            };
            let _ = writeln!(out, "{}{{{labels}}} {value}", family.name);
        }
    }
    crate::host_metrics::render(&mut out);
    render_sequences(&mut out, &models);
    render_upstream(&mut out, state);
    out
}

/// The upstream: calls by protocol, how many tensor bytes went through shared memory instead
/// of the socket, and how full the pool is.
fn render_upstream(out: &mut String, state: &SharedState) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(handle) = &state.upstream else {
        return;
    };
    let staging = &handle.upstream.staging;
    let counters = &staging.counters;
    let status = staging.status();
    let mut family = |name: &str, help: &str, kind: &str, rows: &[(&str, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family(
        "infergate_staging_bytes_total",
        "Tensor bytes moved to and from the upstream through the staging pool",
        "counter",
        &[
            ("{direction=\"input\"}", counters.input_bytes.load(Relaxed)),
            (
                "{direction=\"output\"}",
                counters.output_bytes.load(Relaxed),
            ),
        ],
    );
    family(
        "infergate_passthrough_bytes_total",
        "Tensor bytes the upstream read from and wrote to clients' shared-memory regions itself",
        "counter",
        &[
            (
                "{direction=\"input\"}",
                handle.upstream.passthrough.input_bytes.load(Relaxed),
            ),
            (
                "{direction=\"output\"}",
                handle.upstream.passthrough.output_bytes.load(Relaxed),
            ),
        ],
    );
    family(
        "infergate_upstream_calls_total",
        "Inference calls made to the upstream, by the protocol they went over",
        "counter",
        &[
            (
                "{protocol=\"grpc\"}",
                handle.upstream.calls.grpc.load(Relaxed),
            ),
            (
                "{protocol=\"rest\"}",
                handle.upstream.calls.rest.load(Relaxed),
            ),
        ],
    );
    family(
        "infergate_staging_pool_full_total",
        "Tensors sent over the socket because the staging pool had no free slot",
        "counter",
        &[("", counters.pool_full.load(Relaxed))],
    );
    family(
        "infergate_staging_registrations_total",
        "Registrations of the staging pool with the upstream",
        "counter",
        &[("", counters.registrations.load(Relaxed))],
    );
    family(
        "infergate_staging_pool_bytes",
        "Size of the staging pool",
        "gauge",
        &[("", status.byte_size)],
    );
    family(
        "infergate_staging_pool_in_use_bytes",
        "Bytes of the staging pool held by requests in flight",
        "gauge",
        &[("", status.in_use)],
    );
    family(
        "infergate_staging_pool_active",
        "1 while the staging pool is registered with the upstream",
        "gauge",
        &[("", u64::from(status.state == "Active"))],
    );
}

/// Name, help, type and reader of one sequence metric family.
type SequenceFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&SequenceCounters) -> u64,
);

/// Sequence-batcher state of sequence models: slots in use, sequences waiting, idle releases.
fn render_sequences(out: &mut String, models: &[std::sync::Arc<crate::core::model::Model>]) {
    let families: [SequenceFamily; 3] = [
        (
            "infergate_sequence_active",
            "Sequences holding a slot",
            "gauge",
            |c| c.active,
        ),
        (
            "infergate_sequence_backlog",
            "Sequences waiting for a slot",
            "gauge",
            |c| c.backlog,
        ),
        (
            "infergate_sequence_idle_timeouts_total",
            "Sequences released after their idle timeout",
            "counter",
            |c| c.timeouts,
        ),
    ];
    let sequencers: Vec<_> = models
        .iter()
        .filter_map(|m| m.sequencer.as_ref().map(|s| (m, s.counters())))
        .collect();
    if sequencers.is_empty() {
        return;
    }
    for (name, help, kind, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (model, counters) in &sequencers {
            let _ = writeln!(
                out,
                "{name}{{model=\"{}\",version=\"{}\"}} {}",
                escape(&model.name),
                model.version,
                value(counters)
            );
        }
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
