//! Prometheus text exposition on the metrics port: Triton's `nv_inference_*` families, written
//! here, then the sidecar's own ([`own`], through prometheus-client).
//!
//! Triton's families are written by hand because their names are Triton's: its counters have no
//! `_total` suffix (`nv_inference_request_success`), and prometheus-client's encoders add one to
//! every counter, which would rename the families that dashboards made for Triton read.

mod own;

use std::fmt::Write;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};

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
    // Metrics count across reloads, where statistics start again (see `EarlierLoads`).
    let snapshots: Vec<_> = models.iter().map(|m| (m, m.metrics_snapshot())).collect();
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
                    let _ = writeln!(
                        out,
                        "{}{{{labels}}} {}",
                        family.name,
                        model.metrics_pending()
                    );
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
    own::render(state, &mut out);
    out
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
