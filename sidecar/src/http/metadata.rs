//! Server metadata and health (`/v2`, `/v2/health/*`), and each model's metadata, readiness and
//! configuration (`/v2/models/{m}[/versions/{v}][/ready|/config]`).

use axum::extract::{Path, State};
use axum::response::Response;
use http::StatusCode;
use serde_json::{Value as J, json};

use super::answer::{error_response, json_error, json_ok};
use super::handlers::empty;
use crate::core::model::Model;
use crate::error::Result;
use crate::state::SharedState;

pub(super) async fn server_metadata(State(st): State<SharedState>) -> Response {
    json_ok(
        &json!({"name": st.server.name, "version": st.server.version, "extensions": st.extensions()}),
    )
}

pub(super) async fn live() -> Response {
    empty(StatusCode::OK)
}

pub(super) async fn ready(State(st): State<SharedState>) -> Response {
    empty(if st.health.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    })
}

pub fn metadata_json(model: &Model) -> J {
    let tensor = |spec: &crate::core::model::TensorSpec| json!({"name": spec.name, "datatype": spec.datatype.as_protocol(), "shape": model.metadata_shape(spec)});
    json!({
        "name": model.name,
        "versions": [model.version_string()],
        "platform": model.platform,
        "inputs": model.inputs.iter().map(tensor).collect::<Vec<_>>(),
        "outputs": model.outputs.iter().map(tensor).collect::<Vec<_>>(),
    })
}

pub(super) async fn model_metadata(
    State(st): State<SharedState>,
    Path(model): Path<String>,
) -> Result<Response> {
    metadata(&st, &model, "")
}

pub(super) async fn model_metadata_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Result<Response> {
    metadata(&st, &model, &version)
}

fn metadata(st: &SharedState, model: &str, version: &str) -> Result<Response> {
    st.repository
        .get(model, version)
        .map(|m| json_ok(&metadata_json(&m)))
}

pub(super) async fn model_ready(
    State(st): State<SharedState>,
    Path(model): Path<String>,
) -> Response {
    readiness(&st, &model, "")
}

pub(super) async fn model_ready_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    readiness(&st, &model, &version)
}

fn readiness(st: &SharedState, model: &str, version: &str) -> Response {
    match st.repository.is_ready(model, version) {
        Ok(true) => empty(StatusCode::OK),
        Ok(false) => json_error(StatusCode::BAD_REQUEST, "Model version not ready"),
        Err(e) => error_response(&e),
    }
}

pub(super) async fn model_config(
    State(st): State<SharedState>,
    Path(model): Path<String>,
) -> Result<Response> {
    config(&st, &model, "")
}

pub(super) async fn model_config_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Result<Response> {
    config(&st, &model, &version)
}

fn config(st: &SharedState, model: &str, version: &str) -> Result<Response> {
    st.repository
        .get(model, version)
        .map(|m| json_ok(&infergate_proto::model_config::to_json(&m.config)))
}
