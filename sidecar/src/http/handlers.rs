//! What the REST handlers share: empty answers, and reading the control-plane bodies.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::Value as J;

use super::read_body;
use crate::error::{Error, Result};
use crate::json;

pub(super) fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

/// A control-plane body: none when empty or blank, else its JSON (syntax errors in rapidjson's
/// words).
pub(super) async fn optional_json(body: Body, stall: std::time::Duration) -> Result<Option<J>> {
    let raw = read_body(body, 64 << 20, None, stall).await?;
    if raw.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    // Syntax errors in rapidjson's words and offsets, as the infer route gives them. Past
    // serde's own nesting limit (128) the reader stops, and serde answers a bomb.
    if let Err(e @ json::JsonError::Syntax { .. }) = json::parse(&raw, 128) {
        return Err(Error::internal(e.request_message()));
    }
    serde_json::from_slice(&raw)
        .map(Some)
        .map_err(|e| Error::internal(format!("failed to parse the request JSON buffer: {e}")))
}

pub(super) fn empty_json_ok() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::empty(),
    )
        .into_response()
}
