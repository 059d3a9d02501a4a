//! `POST /v2/models/{model}/infer` through the real REST router: JSON requests, binary tensor
//! data (`Inference-Header-Content-Length`), compression, shared-memory parameters, every model.
//!
//! Input: the model (or `model/versions/N`) on the first line, then `name: value` header lines,
//! an empty line, and the body:
//!
//! ```text
//! simple
//! inference-header-content-length: 312
//!
//! {"inputs":[...]}<binary tensors>
//! ```
//!
//! Checked: an error is a JSON object with an `error` string; a success is JSON (its BYTES strings
//! may hold bytes that are not UTF-8, as Triton's do), or JSON followed by binary outputs whose
//! header length fits the body.

use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::harness;

pub fn run(data: &[u8]) {
    let Some(request) = parse(data) else {
        return;
    };
    let router = infergate_sidecar::http::router(harness::sidecar().clone());
    let (status, headers, body) = harness::runtime().block_on(async move {
        let response = match router.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .unwrap_or_else(|e| panic!("response body: {e}"))
            .to_bytes();
        (parts.status, parts.headers, body)
    });
    if headers.contains_key(header::CONTENT_ENCODING) {
        return; // compressed answers are checked by the conformance suite
    }
    check(status, &headers, &body);
}

fn parse(data: &[u8]) -> Option<Request<Body>> {
    let split = data.windows(2).position(|w| w == b"\n\n")?;
    let head = std::str::from_utf8(&data[..split]).ok()?;
    let body = data[split + 2..].to_vec();
    let mut lines = head.split('\n');
    let model = lines.next()?;
    let mut builder = Request::builder()
        .method("POST")
        .uri(format!("/v2/models/{model}/infer"));
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name.trim(), value.trim());
    }
    builder.body(Body::from(body)).ok()
}

fn check(status: StatusCode, headers: &http::HeaderMap, body: &[u8]) {
    if status != StatusCode::OK {
        let value: serde_json::Value = serde_json::from_slice(body)
            .unwrap_or_else(|e| panic!("{status} answer is not JSON ({e}): {body:?}"));
        assert!(
            value.get("error").is_some_and(|e| e.is_string()),
            "{status} answer without an error string: {value}"
        );
        return;
    }
    let json_len = match headers.get("inference-header-content-length") {
        None => body.len(),
        Some(v) => {
            let n: usize = v
                .to_str()
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad inference-header-content-length {v:?}"));
            assert!(n <= body.len(), "header length {n} > body {}", body.len());
            n
        }
    };
    // BYTES outputs sent as JSON strings carry the element's bytes as they are, valid UTF-8 or
    // not, as Triton writes them (it does not validate them either): the structure is what is
    // checked, with any invalid sequence read as U+FFFD.
    let text = String::from_utf8_lossy(&body[..json_len]);
    let value: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("200 answer is not JSON ({e}): {body:?}"));
    assert!(
        value.get("outputs").is_some_and(|o| o.is_array()),
        "200 answer without outputs: {value}"
    );
}
