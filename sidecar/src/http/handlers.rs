//! What the REST handlers share: empty answers, and reading the control-plane bodies.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, header};

use infergate_config::Limits;

use super::request_body::read_body;
use crate::error::{Error, Result};
use crate::json::{self, JsonError, Number, Value};

pub(super) fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

/// Nesting the control-plane bodies may have. Triton parses any depth; deeper documents get the
/// answer Triton gives a body it cannot parse.
const CONTROL_DEPTH: u32 = 128;

/// A control-plane body (repository, shared-memory registration), read whole.
pub(super) async fn control_body(body: Body, limits: &Limits) -> Result<Bytes> {
    read_body(body, 64 << 20, None, limits).await
}

/// A control-plane body's JSON, parsed once by the reader the infer route uses: none when the
/// body is empty or blank. What does not parse is a 500 "failed to parse the request JSON
/// buffer: …", Triton's answer on every route.
pub(super) fn control_json(raw: &[u8]) -> Result<Option<Value<'_>>> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    json::parse(raw, CONTROL_DEPTH)
        .map(Some)
        .map_err(|e| match e {
            JsonError::Syntax { .. } => Error::internal(e.request_message()),
            JsonError::TooDeep { limit } => Error::internal(format!(
                "failed to parse the request JSON buffer: nested deeper than {limit} levels"
            )),
        })
}

/// A string member's text, as Triton's JSON accessor reads it: anything else is its error.
pub(super) fn string_text(value: &Value<'_>) -> Result<String> {
    match value {
        Value::String(s) => Ok(String::from_utf8_lossy(s).into_owned()),
        _ => Err(Error::internal(
            "attempt to access JSON non-string as string",
        )),
    }
}

/// An unsigned integer member, as Triton's JSON accessor reads it.
pub(super) fn unsigned(value: &Value<'_>) -> Result<u64> {
    match value {
        Value::Number(Number::Uint(n)) => Ok(*n),
        _ => Err(Error::internal(
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        )),
    }
}

pub(super) fn empty_json_ok() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::empty(),
    )
        .into_response()
}
