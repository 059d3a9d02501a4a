//! `POST /v2/models/{m}[/versions/{v}]/generate` and `/generate_stream`: Triton's generate
//! extension. The body is a flat JSON object converted into an inference request
//! ([`request`]); the model's answer comes back as one flat JSON object ([`response`]):
//! `/generate` answers with exactly one, `/generate_stream` with one Server-Sent Event per
//! response, sent as the model produces it. Any model may be asked, decoupled or not, here or
//! behind an upstream.
//!
//! Status codes follow Triton's: a request refused before it runs gets the usual JSON error;
//! once it runs, the first response (or error) sets the status, so a later error of a stream
//! arrives as an `{"error": ...}` event under 200.

mod request;
mod response;

use std::convert::Infallible;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, StatusCode, header};
use tokio::sync::mpsc;

use super::answer::{error_body, error_response};
use super::infer::{OFFLOAD_BYTES, off_worker};
use super::request_body::{json_too_large, read_body};
use crate::core::request::InferResponse;
use crate::error::{Error, Result};
use crate::front_door::{self, Call, DecoupledResponse, Origin, Target};
use crate::protocol::Protocol;
use crate::state::SharedState;
use crate::trace;

/// How the answer is sent.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `/generate`: one JSON object.
    Single,
    /// `/generate_stream`: one event per response.
    Stream,
}

pub(super) async fn generate(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, model, String::new(), headers, body, Mode::Single).await
}

pub(super) async fn generate_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, model, version, headers, body, Mode::Single).await
}

pub(super) async fn generate_stream(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, model, String::new(), headers, body, Mode::Stream).await
}

pub(super) async fn generate_stream_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, model, version, headers, body, Mode::Stream).await
}

async fn run(
    st: SharedState,
    model: String,
    version: String,
    headers: HeaderMap,
    body: Body,
    mode: Mode,
) -> Response {
    let received = Instant::now();
    let target = Target::resolve(&st, &model, &version);
    let mut call = Call::begin(&st, &target, &model, Protocol::Http, received, || {
        trace::context_of(|name| headers.get(name).and_then(|v| v.to_str().ok()))
    })
    .without_failure_line();
    let started = start(&st, &call, target, &version, &headers, body).await;
    let answer = match started {
        Ok(Started::One(result)) => one(result, mode),
        Ok(Started::Many(responses)) => match mode {
            Mode::Single => collect(responses).await,
            Mode::Stream => stream(responses).await,
        },
        Err(e) => Answer::Done(error_response(&e), Some(e)),
    };
    match answer {
        Answer::Done(response, failure) => {
            call.end(failure.as_ref());
            response
        }
        Answer::Streaming(response) => {
            // The span ends as the answer starts: the events after it are the model's.
            call.end(None);
            response
        }
    }
}

/// A request that ran, or was started on a decoupled model.
enum Started {
    One(Result<InferResponse>),
    Many(mpsc::Receiver<Result<DecoupledResponse>>),
}

/// Finds the model, reads and converts the body, and runs the request; an error here is a
/// refusal before the model ran.
async fn start(
    st: &SharedState,
    call: &Call,
    target: Target,
    version: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Started> {
    let model = target.model()?.clone();
    if headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.is_empty() && v.as_bytes() != b"identity")
    {
        return Err(Error::invalid_arg(
            "Unsupported content-encoding, only 'identity' is supported.",
        ));
    }
    let limit = st.limits.max_http_body_bytes;
    let content_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    // The body is all JSON: a declared length beyond the limit gets the JSON limit's words.
    if let Some(length) = content_length.filter(|&n| n > limit) {
        return Err(json_too_large(length, limit));
    }
    let raw = read_body(body, limit, content_length, &st.limits).await?;
    let limits = request::Limits {
        max_depth: st.limits.max_json_depth,
        max_input_bytes: limit,
    };
    let mut request = if raw.len() >= OFFLOAD_BYTES {
        let (model, version) = (model.clone(), version.to_string());
        off_worker(move || request::decode(&model, &version, &raw, limits)).await?
    } else {
        request::decode(&model, version, &raw, limits)?
    };
    if model.is_decoupled() {
        let responses = front_door::infer_decoupled(st, call, target, request).await?;
        return Ok(Started::Many(responses));
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    request.credential = front_door::credential(st, authorization);
    match front_door::infer(st, call, target, request, Origin::Client).await {
        // What the model raised is its response; a refusal is the request's.
        Err(e) if !e.from_model => Err(e),
        result => Ok(Started::One(result)),
    }
}

enum Answer {
    /// The whole answer, and the error it reports, if any.
    Done(Response, Option<Error>),
    /// An event stream under way.
    Streaming(Response),
}

/// The answer of a model that answered once.
fn one(result: Result<InferResponse>, mode: Mode) -> Answer {
    let (status, body, failure) = event(result);
    match mode {
        Mode::Single => Answer::Done(json_answer(status, body), failure),
        Mode::Stream => Answer::Done(event_answer(status, Body::from(sse(&body))), failure),
    }
}

/// `/generate` on a decoupled model: exactly one response is expected; the status is the
/// first's (200 when the model sent none).
async fn collect(mut responses: mpsc::Receiver<Result<DecoupledResponse>>) -> Answer {
    let mut first: Option<(StatusCode, Vec<u8>, Option<Error>)> = None;
    let mut count = 0usize;
    while let Some(next) = responses.recv().await {
        count += 1;
        if first.is_none() {
            first = Some(event(next.map(|d| d.response)));
        }
    }
    match (first, count) {
        (Some((status, body, failure)), 1) => Answer::Done(json_answer(status, body), failure),
        (first, _) => {
            let status = first.map_or(StatusCode::OK, |(status, ..)| status);
            let e = Error::internal(
                "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
            );
            Answer::Done(json_answer(status, error_body(&e.message)), Some(e))
        }
    }
}

/// `/generate_stream` on a decoupled model: the first response sets the status; each is sent
/// as it comes. Dropping the body (the client went away) drops the receiver, which stops the
/// request.
async fn stream(mut responses: mpsc::Receiver<Result<DecoupledResponse>>) -> Answer {
    let Some(first) = responses.recv().await else {
        // Ended without a response: an empty stream.
        return Answer::Done(event_answer(StatusCode::OK, Body::empty()), None);
    };
    let (status, first, _) = event(first.map(|d| d.response));
    let first = futures::stream::once(async move { sse(&first) });
    let rest = tokio_stream::wrappers::ReceiverStream::new(responses)
        .map(|next| sse(&event(next.map(|d| d.response)).1));
    let events = first
        .chain(rest)
        .map(|event| Ok::<Bytes, Infallible>(Bytes::from(event)));
    Answer::Streaming(event_answer(status, Body::from_stream(events)))
}

/// One response or error as its status and JSON object.
fn event(result: Result<InferResponse>) -> (StatusCode, Vec<u8>, Option<Error>) {
    match result.and_then(|r| response::encode(&r)) {
        Ok(body) => (StatusCode::OK, body, None),
        Err(e) => (e.http_status(), error_body(&e.message), Some(e)),
    }
}

/// A Server-Sent Event carrying one JSON object.
fn sse(json: &[u8]) -> Vec<u8> {
    let mut event = Vec::with_capacity(json.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(json);
    event.extend_from_slice(b"\n\n");
    event
}

fn json_answer(status: StatusCode, body: Vec<u8>) -> Response {
    answer(status, "application/json", Body::from(body))
}

fn event_answer(status: StatusCode, body: Body) -> Response {
    answer(status, "text/event-stream; charset=utf-8", body)
}

fn answer(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_data_and_a_blank_line() {
        assert_eq!(sse(br#"{"a":1}"#), b"data: {\"a\":1}\n\n");
    }

    #[test]
    fn an_error_event_has_the_errors_status() {
        let (status, body, failure) = event(Err(Error::invalid_arg("no")));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, br#"{"error":"no"}"#);
        assert!(failure.is_some());
    }
}
