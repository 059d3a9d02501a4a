//! The model repository extension: `/v2/repository/index`, and load and unload.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::Value as J;

use super::answer::{error_response, json_ok};
use super::handlers::{control_body, control_json, empty_json_ok, string_text};
use crate::core::repository::Repository;
use crate::error::{Error, Result};
use crate::json::Value;
use crate::state::SharedState;

pub(super) async fn repository_index(
    State(st): State<SharedState>,
    body: Body,
) -> Result<Response> {
    let raw = control_body(body, &st.limits).await?;
    let ready = match control_json(&raw)? {
        None => false,
        Some(doc) => match doc.get("ready") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(Error::invalid_arg(
                    "Invalid value for 'ready': expected a boolean",
                ));
            }
        },
    };
    let rows: Vec<J> = st
        .repository
        .index(ready)
        .into_iter()
        .map(|e| {
            let mut row = serde_json::Map::new();
            row.insert("name".into(), J::String(e.name));
            if let Some(v) = e.version {
                row.insert("version".into(), J::String(v));
            }
            if let Some(s) = e.state {
                row.insert("state".into(), J::String(s.to_string()));
            }
            if !e.reason.is_empty() {
                row.insert("reason".into(), J::String(e.reason));
            }
            J::Object(row)
        })
        .collect();
    Ok(json_ok(&J::Array(rows)))
}

pub(super) async fn load(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    body: Body,
) -> Result<Response> {
    let raw = control_body(body, &st.limits).await?;
    let doc = control_json(&raw)?;
    // Triton reads every parameter before it loads: each value must be a JSON string, and
    // only `config` and `file:*` keys are parameters; its JSON reader's texts are kept.
    let params = match doc.as_ref().and_then(|d| d.get("parameters")) {
        None => None,
        Some(Value::Object(params)) => Some(params),
        Some(_) => return Err(Error::internal("attempt to get members for non-object")),
    };
    let mut config_override = None;
    let mut files = false;
    for (key, value) in params.into_iter().flatten() {
        let text = string_text(value)?;
        if key.as_ref() == b"config" {
            config_override = Some(text);
        } else if key.starts_with(b"file:") {
            files = true;
        } else {
            return Err(Error::internal(
                "unexpected error on creating Triton parameter",
            ));
        }
    }
    // Triton checks its mode once the request is read, before anything else.
    st.check_model_control()?;
    if files {
        return Err(Repository::file_overrides_refused(&model));
    }
    st.repository.load(&model, config_override.as_deref())?;
    Ok(empty_json_ok())
}

/// `parameters.unload_dependents` is read as Triton reads it over HTTP: a value that is not a
/// boolean does not fail the call, the model is unloaded alone. The built-in models have no
/// dependents (no ensembles), so the flag changes nothing here.
pub(super) async fn unload(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    body: Body,
) -> Result<Response> {
    let raw = control_body(body, &st.limits).await?;
    control_json(&raw)?;
    st.check_model_control()?;
    st.repository.unload(&model)?;
    Ok(empty_json_ok())
}

pub(super) async fn named_repository() -> Response {
    error_response(&Error::unsupported(
        "'repository_name' specification is not supported",
    ))
}
