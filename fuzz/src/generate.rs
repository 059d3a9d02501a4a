//! `POST /v2/models/{model}/generate` and `/generate_stream` through the real REST router: the
//! generate extension's flat JSON, every model (decoupled ones included), inputs given at the top
//! level or inside `parameters`, anything else read as request parameters.
//!
//! Input: the route after `/v2/models/` on the first line (`simple/generate`,
//! `repeat_int32/generate_stream`, `simple/versions/1/generate`), then `name: value` header
//! lines, an empty line, and the body:
//!
//! ```text
//! simple/generate
//!
//! {"INPUT0":[0,1,...],"INPUT1":[1,1,...]}
//! ```
//!
//! Checked: an answer that is not an event stream is one JSON object, with an `error` string when
//! its status is not 200 and with `model_name` and `model_version` strings when it is a response;
//! an event stream is a sequence of `data: <JSON object>` events, each a response or an error.

use http::{StatusCode, header};

use crate::harness;

pub fn run(data: &[u8]) {
    let Some(request) = harness::post(data, |route| format!("/v2/models/{route}")) else {
        return;
    };
    let (status, headers, body) = harness::answer(request);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("text/event-stream") {
        check_events(status, &body);
    } else {
        check_object(status, &body);
    }
}

/// One JSON object. BYTES outputs carry their bytes as they are (Triton does not validate them
/// either), so invalid UTF-8 is read as U+FFFD: the structure is what is checked.
fn object(text: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    let text = String::from_utf8_lossy(text);
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(other) => panic!("answer is not an object: {other}"),
        Err(e) => panic!("answer is not JSON ({e}): {text:?}"),
    }
}

fn check_object(status: StatusCode, body: &[u8]) {
    let map = object(body);
    if status != StatusCode::OK || map.contains_key("error") {
        // A decoupled model's wrong number of responses is an error under 200.
        assert!(
            map.get("error").is_some_and(|e| e.is_string()) && map.len() == 1,
            "{status} answer is not an error object: {map:?}"
        );
        return;
    }
    check_response(&map, body);
}

/// A response: its model's name and version, and its keys once each, in byte order (read
/// from the text, which keeps their order).
fn check_response(map: &serde_json::Map<String, serde_json::Value>, text: &[u8]) {
    for key in ["model_name", "model_version"] {
        assert!(
            map.get(key).is_some_and(|v| v.is_string()),
            "response without {key}: {map:?}"
        );
    }
    let Ok(infergate_sidecar::json::Value::Object(members)) =
        infergate_sidecar::json::parse(text, 128)
    else {
        panic!("response is not an object: {text:?}");
    };
    assert!(
        members.windows(2).all(|w| w[0].0 < w[1].0),
        "keys not once each in byte order: {text:?}"
    );
}

fn check_events(status: StatusCode, body: &[u8]) {
    assert!(
        body.is_empty() || body.ends_with(b"\n\n"),
        "{status} event stream does not end with a blank line: {body:?}"
    );
    for event in body.split(|&b| b == b'\n').collect::<Vec<_>>().chunks(2) {
        let line = event[0];
        if line.is_empty() {
            continue;
        }
        let json = line
            .strip_prefix(b"data: ")
            .unwrap_or_else(|| panic!("event without data: {line:?}"));
        let map = object(json);
        if !map.contains_key("error") {
            check_response(&map, json);
        }
    }
}
