//! The REST front end (axum): every route of the protocol with Triton's status codes, error
//! bodies (`{"error": "..."}`) and header rules.

pub(crate) mod body;
pub mod compression;
mod front;
mod generate;
mod handlers;
pub(crate) mod infer;
mod inference;
mod lenient_base64;
mod logging;
mod metadata;
mod params;
mod repository;
pub mod restricted;
mod routes;
pub mod serve;
mod shared_memory;
mod statistics;
mod trace_setting;

use axum::Router;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http::{StatusCode, header};
use http_body_util::BodyExt;

use infergate_proto::config::Limits;

use crate::error::{Error, Result};
use crate::json::Writer;
use crate::state::SharedState;

pub use front::Front;

/// The HTTP port's service: inference calls straight to their handler, the rest to `router`.
pub fn front(state: SharedState) -> Front {
    Front::new(state.clone(), router(state))
}

/// The REST router over shared state.
pub fn router(state: SharedState) -> Router {
    let routes = routes::router()
        .with_state(state)
        .layer(axum::middleware::map_response(json_rejections));
    // The outer router only hands every request to the routes, after Triton's path rules.
    Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn(triton_path_rules))
}

/// A version segment as Triton's route pattern takes it: `[0-9]+`, before any percent-decoding.
fn is_decimal_version(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// What Triton's HTTP server refuses before any handler runs. Paths its route patterns cannot
/// match: an empty segment (names are `[^/]+`) or a version that is not a decimal number
/// (`[0-9]+`, on the path as sent, before any percent-decoding) is an unknown path (404),
/// whatever the method. HEAD: each of its handlers allows only its own methods and none allows
/// HEAD, so a known path answers 405 and an unknown one 404; the routes would answer HEAD like
/// GET, so it reaches them as a method none of them takes (the connection still answers it as a
/// HEAD, without a body).
async fn triton_path_rules(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.method() == http::Method::HEAD {
        *request.method_mut() =
            http::Method::from_bytes(b"HEAD-AS-TRITON").unwrap_or(http::Method::CONNECT);
    }
    let path = request.uri().path();
    let mut segments = path.split('/').skip(1);
    let empty_segment = path.split('/').skip(1).any(str::is_empty);
    let bad_version = segments.next() == Some("v2")
        && segments.next() == Some("models")
        && segments.next().is_some()
        && segments.next() == Some("versions")
        && !segments.next().is_some_and(is_decimal_version);
    if empty_segment || bad_version {
        return json_error(StatusCode::NOT_FOUND, "Not Found");
    }
    let mut response = next.run(request).await;
    if response.status() == StatusCode::METHOD_NOT_ALLOWED {
        refuse_head_in_allow(&mut response);
    }
    response
}

/// A 405's `Allow` lists what the path takes; the router would list HEAD beside GET, which no
/// path here takes.
fn refuse_head_in_allow(response: &mut Response) {
    let Some(allow) = response
        .headers()
        .get(http::header::ALLOW)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let methods: Vec<&str> = allow
        .split(',')
        .map(str::trim)
        .filter(|m| !m.eq_ignore_ascii_case("HEAD"))
        .collect();
    if let Ok(value) = http::HeaderValue::from_str(&methods.join(",")) {
        response.headers_mut().insert(http::header::ALLOW, value);
    }
}

/// The router's own refusals (a path segment that is not UTF-8, for one) are plain text; every
/// error of the protocol is `{"error": ...}`, which is all tritonclient can read.
async fn json_rejections(response: Response) -> Response {
    let plain_error = (response.status().is_client_error() || response.status().is_server_error())
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"));
    if !plain_error {
        return response;
    }
    let status = response.status();
    // Rejection texts are a line or two; anything unreadable keeps the status alone.
    let text = match axum::body::to_bytes(response.into_body(), 64 << 10).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    json_error(status, &message)
}

/// A handler's error is Triton's status and `{"error": "..."}` body, so handlers return
/// `Result<Response>`.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        error_response(&self)
    }
}

/// `{"error":"<message>"}` with the error's status.
pub fn error_response(err: &Error) -> Response {
    json_error(err.http_status(), &err.message)
}

pub fn json_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error_body(message),
    )
        .into_response()
}

/// `{"error":"<message>"}`, Triton's error body.
pub(super) fn error_body(message: &str) -> Vec<u8> {
    let mut w = Writer::default();
    w.byte(b'{')
        .key("error")
        .string(message.as_bytes())
        .byte(b'}');
    w.into_bytes()
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

/// A body of `length` bytes, all JSON, over the input limit: current Triton's words (its JSON
/// reader's check).
pub(super) fn json_too_large(length: u64, limit: u64) -> Error {
    Error::invalid_arg(format!(
        "request JSON size of {length} bytes exceeds the maximum allowed input size of {limit} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// A body of `length` bytes that is one raw input, over the input limit: current Triton's words.
pub(super) fn raw_input_too_large(length: u64, limit: u64) -> Error {
    Error::invalid_arg(format!(
        "Raw input has a byte_size ({length} bytes) that exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// Reads a request body, refusing more than `limit` bytes before buffering them, one that goes
/// `limits.http_body_timeout_seconds` without sending a byte, and one still arriving after
/// `limits.http_body_deadline_seconds`. Bytes past the process's budget of request bytes in
/// flight are refused with 503 `server is busy` (`crate::inflight`).
pub async fn read_body(
    body: Body,
    limit: u64,
    content_length: Option<u64>,
    limits: &Limits,
) -> Result<Bytes> {
    let too_large = || {
        Error::invalid_arg(format!(
            "request body size exceeds the maximum allowed input size of {limit} bytes"
        ))
    };
    if content_length.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let stall = limits.http_body_timeout();
    let deadline = limits.http_body_deadline();
    let mut body = body;
    let stalled = || {
        Error::invalid_arg(format!(
            "timed out reading the request body: no data for {} s",
            stall.as_secs()
        ))
    };
    let late = || {
        Error::invalid_arg(format!(
            "timed out reading the request body: not complete after {} s",
            deadline.as_secs()
        ))
    };
    let give_up_at = tokio::time::Instant::now() + deadline;
    // The frames as they come, joined once at the end: the buffer is never sized from the
    // declared length (a client could declare much and send little), and no byte is copied
    // twice. Most bodies arrive as one frame, kept without a copy.
    let mut frames: Vec<Bytes> = Vec::new();
    let mut len = 0u64;
    loop {
        let next = tokio::time::timeout_at(give_up_at, tokio::time::timeout(stall, body.frame()));
        let Some(frame) = next.await.map_err(|_| late())?.map_err(|_| stalled())? else {
            break;
        };
        let frame = frame.map_err(|e| {
            if crate::inflight::is_busy(&e) {
                Error::unavailable(crate::inflight::BUSY)
            } else {
                Error::invalid_arg(format!("failed to read the request body: {e}"))
            }
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len += data.len() as u64;
        if len > limit {
            return Err(too_large());
        }
        if !data.is_empty() {
            frames.push(data);
        }
    }
    Ok(match frames.len() {
        0 => Bytes::new(),
        1 => frames.swap_remove(0),
        _ => {
            let mut joined = BytesMut::with_capacity(len as usize);
            frames.iter().for_each(|f| joined.extend_from_slice(f));
            joined.freeze()
        }
    })
}
