//! What Triton's HTTP server refuses before any handler runs: paths its route patterns cannot
//! match, and HEAD, which none of its handlers takes.

use axum::response::Response;
use http::StatusCode;

use super::answer::json_error;

/// A version segment as Triton's route pattern takes it: `[0-9]+`, before any percent-decoding.
pub(super) fn is_decimal_version(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// What Triton's HTTP server refuses before any handler runs. Paths its route patterns cannot
/// match: an empty segment (names are `[^/]+`) or a version that is not a decimal number
/// (`[0-9]+`, on the path as sent, before any percent-decoding) is an unknown path (404),
/// whatever the method. HEAD: each of its handlers allows only its own methods and none allows
/// HEAD, so a known path answers 405 and an unknown one 404; the routes would answer HEAD like
/// GET, so it reaches them as a method none of them takes (the connection still answers it as a
/// HEAD, without a body).
pub(super) async fn triton_path_rules(
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
