//! The answers every REST handler shares, in Triton's forms: an error as its status and
//! `{"error": "..."}` body (so handlers return `Result<Response>`), a JSON body with 200, and the
//! router's own plain-text refusals rewritten as JSON errors.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::error::Error;
use crate::json::Writer;

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

/// The admin port's refusal (`admin_access.rs`) as its answer: `{"error":"<message>"}`, with
/// the bearer challenge on a 401.
pub fn admin_refusal(refusal: &crate::admin_access::Refusal) -> Response {
    let mut answer = json_error(refusal.status(), refusal.message());
    if let Some(challenge) = refusal.challenge() {
        answer.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    answer
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

/// The router's own refusals (a path segment that is not UTF-8, for one) are plain text; every
/// error of the protocol is `{"error": ...}`, which is all tritonclient can read.
pub(super) async fn json_rejections(response: Response) -> Response {
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
