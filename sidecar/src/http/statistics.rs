//! `/v2/models/stats` and `/v2/models/{m}[/versions/{v}]/stats`: the statistics extension's JSON.

use axum::extract::{Path, State};
use axum::response::Response;
use http::StatusCode;
use serde_json::{Value as J, json};

use super::answer::{json_error, json_ok};
use crate::core::model::Model;
use crate::core::stats::{Duration2, Snapshot};
use crate::state::SharedState;

fn duration(d: Duration2) -> J {
    json!({"count": d.count, "ns": d.ns})
}

pub fn stats_json(model: &Model, s: &Snapshot) -> J {
    json!({
        "name": model.name,
        "version": model.version_string(),
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": duration(s.success),
            "fail": duration(s.fail),
            "queue": duration(s.queue),
            "compute_input": duration(s.compute_input),
            "compute_infer": duration(s.compute_infer),
            "compute_output": duration(s.compute_output),
            "cache_hit": duration(s.cache_hit),
            "cache_miss": duration(s.cache_miss),
        },
        "response_stats": {},
        "batch_stats": s.batches.iter().map(|(size, b)| json!({
            "batch_size": size,
            "compute_input": duration(b.compute_input),
            "compute_infer": duration(b.compute_infer),
            "compute_output": duration(b.compute_output),
        })).collect::<Vec<_>>(),
        "memory_usage": [],
    })
}

fn stats_document(models: &[std::sync::Arc<Model>]) -> J {
    let list: Vec<J> = models
        .iter()
        .map(|m| stats_json(m, &m.stats.snapshot()))
        .collect();
    json!({"model_stats": list})
}

pub(super) async fn all_stats(State(st): State<SharedState>) -> Response {
    json_ok(&stats_document(&st.repository.ready_models()))
}

pub(super) async fn model_stats(
    State(st): State<SharedState>,
    Path(model): Path<String>,
) -> Response {
    stats_for(&st, &model, "")
}

pub(super) async fn model_stats_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    stats_for(&st, &model, &version)
}

fn stats_for(st: &SharedState, model: &str, version: &str) -> Response {
    match st.repository.get(model, version) {
        Ok(m) => json_ok(&stats_document(&[m])),
        Err(_) if version.is_empty() => json_error(
            StatusCode::BAD_REQUEST,
            &format!("requested model '{model}' is not available"),
        ),
        Err(_) => json_error(
            StatusCode::BAD_REQUEST,
            &format!("requested model version is not available for model '{model}'"),
        ),
    }
}
