//! A request message above `limits.max_grpc_message_bytes` in gRPC's usual form.
//!
//! tonic refuses such a message with `OUT_OF_RANGE` "Error, decoded message length too large:
//! found N bytes, the limit is: M bytes"; gRPC's own implementations, and so Triton and the clients
//! written against it, answer `RESOURCE_EXHAUSTED` "Received message larger than max (N vs. M)".
//! A unary call refused this way gets a trailers-only answer, whose status is in the headers; that
//! is where this rewrites it. (On a stream the refusal comes in the trailers and keeps tonic's form.)

use http::HeaderValue;

const TONIC_PREFIX: &str = "Error, decoded message length too large: found ";
const OUT_OF_RANGE: &str = "11";

/// Rewrites tonic's oversized-message refusal; every other response passes unchanged.
pub fn as_resource_exhausted<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    if headers.get("grpc-status").is_none_or(|s| s != OUT_OF_RANGE) {
        return response;
    }
    let Some((found, limit)) = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .and_then(|m| sizes(&percent_decode(m)))
    else {
        return response;
    };
    let message = format!("Received message larger than max ({found} vs. {limit})");
    if let Ok(message) = HeaderValue::from_str(&message) {
        headers.insert("grpc-status", HeaderValue::from_static("8"));
        headers.insert("grpc-message", message);
    }
    response
}

/// The two sizes of tonic's message, or `None` for any other message.
fn sizes(message: &str) -> Option<(u64, u64)> {
    let rest = message.strip_prefix(TONIC_PREFIX)?;
    let (found, rest) = rest.split_once(" bytes, the limit is: ")?;
    let limit = rest.strip_suffix(" bytes")?;
    Some((found.parse().ok()?, limit.parse().ok()?))
}

/// `grpc-message` is percent-encoded (tonic encodes spaces and a few more).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(value as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: &str, message: &str) -> http::Response<()> {
        http::Response::builder()
            .header("grpc-status", status)
            .header("grpc-message", message)
            .body(())
            .unwrap_or_default()
    }

    #[test]
    fn tonics_refusal_becomes_resource_exhausted() {
        let tonic = "Error,%20decoded%20message%20length%20too%20large:%20found%20268436523%20bytes,%20the%20limit%20is:%20268435456%20bytes";
        let out = as_resource_exhausted(response("11", tonic));
        assert_eq!(out.headers()["grpc-status"], "8");
        assert_eq!(
            out.headers()["grpc-message"],
            "Received message larger than max (268436523 vs. 268435456)"
        );
    }

    #[test]
    fn other_answers_pass_unchanged() {
        for (status, message) in [
            ("11", "offset%20out%20of%20range"),
            (
                "3",
                "Error,%20decoded%20message%20length%20too%20large:%20found%201%20bytes,%20the%20limit%20is:%200%20bytes",
            ),
        ] {
            let out = as_resource_exhausted(response(status, message));
            assert_eq!(out.headers()["grpc-status"], status);
            assert_eq!(out.headers()["grpc-message"], message);
        }
        let ok = as_resource_exhausted(http::Response::new(()));
        assert!(ok.headers().get("grpc-status").is_none());
    }
}
