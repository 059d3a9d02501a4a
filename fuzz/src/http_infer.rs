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

use http::{StatusCode, header};

use crate::harness;

pub fn run(data: &[u8]) {
    let Some(request) = harness::post(data, |model| format!("/v2/models/{model}/infer")) else {
        return;
    };
    let (status, headers, body) = harness::answer(request);
    if headers.contains_key(header::CONTENT_ENCODING) {
        return; // compressed answers are checked by the conformance suite
    }
    check(status, &headers, &body);
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
