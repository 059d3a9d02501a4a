//! The REST front end (axum): every route of the protocol with Triton's status codes, error
//! bodies (`{"error": "..."}`) and header rules.

mod body;
pub mod compression;
mod infer;
mod params;
mod routes;

pub use routes::{LogValue, apply_log_setting};

use axum::Router;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http::{StatusCode, header};
use http_body_util::BodyExt;

use crate::error::{Error, Result};
use crate::json::Writer;
use crate::state::SharedState;

/// The REST router over shared state.
pub fn router(state: SharedState) -> Router {
    routes::router().with_state(state)
}

/// `{"error":"<message>"}` with the error's status.
pub fn error_response(err: &Error) -> Response {
    json_error(err.http_status(), &err.message)
}

pub fn json_error(status: StatusCode, message: &str) -> Response {
    let mut w = Writer::default();
    w.byte(b'{')
        .key("error")
        .string(message.as_bytes())
        .byte(b'}');
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        w.into_bytes(),
    )
        .into_response()
}

/// A JSON body with status 200.
pub fn json_ok(value: &serde_json::Value) -> Response {
    let mut w = Writer::default();
    w.json(value);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        w.into_bytes(),
    )
        .into_response()
}

/// Reads a request body, refusing more than `limit` bytes before buffering them.
pub async fn read_body(body: Body, limit: u64, content_length: Option<u64>) -> Result<Bytes> {
    let too_large = || {
        Error::invalid_arg(format!(
            "request body size exceeds the maximum allowed input size of {limit} bytes"
        ))
    };
    if content_length.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut body = body;
    let mut buf = BytesMut::with_capacity(content_length.unwrap_or(0).min(limit) as usize);
    let mut single: Option<Bytes> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| Error::invalid_arg(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // Most bodies arrive as one frame: keep it without copying.
        if buf.is_empty() && single.is_none() {
            single = Some(data);
        } else {
            if let Some(first) = single.take() {
                buf.extend_from_slice(&first);
            }
            buf.extend_from_slice(&data);
        }
        let len = single.as_ref().map_or(buf.len(), Bytes::len) as u64;
        if len > limit {
            return Err(too_large());
        }
    }
    Ok(single.unwrap_or_else(|| buf.freeze()))
}
