//! `POST /v2/models/{m}[/versions/{v}]/infer`: the body read, decoded ([`decode`]), inferred
//! (here or on the peer that holds its sequence), encoded ([`encode`]); traced when sampled.

mod decode;
mod encode;

use std::time::Instant;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, header};

use super::answer::error_response;
use super::compression::{self, Encoding};
use super::request_body::{json_too_large, raw_input_too_large, read_body};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::front_door::{self, Call, Origin, Target};
use crate::protocol::Protocol;
use crate::state::SharedState;
use crate::trace;

pub(super) async fn infer_latest(
    State(st): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = caller.map(|Extension(c)| c);
    run_infer(st, caller, model, String::new(), headers, body).await
}

pub(super) async fn infer_v(
    State(st): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = caller.map(|Extension(c)| c);
    run_infer(st, caller, model, version, headers, body).await
}

/// `caller`: the connection's address; shared memory is served to local callers only (see
/// `AppState::shm_for`).
pub(super) async fn run_infer(
    st: SharedState,
    caller: Option<Caller>,
    model: String,
    version: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let received = Instant::now();
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let target = Target::resolve(&st, &model, &version);
    let mut call = Call::begin(&st, &target, &model, Protocol::Http, received, || {
        trace::context_of(|name| headers.get(name).and_then(|v| v.to_str().ok()))
    });
    let encoding = match compression::request_encoding(header(header::CONTENT_ENCODING)) {
        Ok(e) => e,
        Err(e) => {
            let mut resp = error_response(&e);
            resp.headers_mut().insert(
                header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("gzip, deflate"),
            );
            return resp;
        }
    };
    let limit = st.limits.max_http_body_bytes;
    let content_length = header(header::CONTENT_LENGTH).and_then(|v| v.parse().ok());
    let result = async {
        // As Triton, before the body is read.
        target.refuse_decoupled_over_http()?;
        if encoding == Encoding::Identity
            && let Some(refusal) = declared_too_large(&headers, content_length, limit)
        {
            return Err(refusal);
        }
        let raw = read_body(body, limit, content_length, &st.limits).await?;
        call.event("HTTP_RECV_END", Instant::now());
        let body = if encoding == Encoding::Identity {
            raw
        } else {
            compression::inflate(&raw, limit)?
        };
        let (request, target) = if decode::json_bytes(&headers, body.len()) >= OFFLOAD_BYTES {
            let (st, headers) = (st.clone(), headers.clone());
            off_worker(move || {
                let request =
                    decode::request(&st, caller, &target, &model, &version, &headers, body);
                request.map(|request| (request, target))
            })
            .await?
        } else {
            let request = decode::request(&st, caller, &target, &model, &version, &headers, body)?;
            (request, target)
        };
        call.note_id(&request.id);
        let mut request = request;
        request.credential = front_door::credential(&st, header(header::AUTHORIZATION));
        let response = front_door::infer(&st, &call, target, request, Origin::Client).await?;
        call.event("INFER_RESPONSE_COMPLETE", Instant::now());
        let accept_encoding = header(header::ACCEPT_ENCODING);
        if encode::heavy_to_encode(&response, accept_encoding, OFFLOAD_BYTES) {
            let accept_encoding = accept_encoding.map(str::to_owned);
            off_worker(move || encode::response(&response, accept_encoding.as_deref())).await
        } else {
            encode::response(&response, accept_encoding)
        }
    }
    .await;
    call.end(result.as_ref().err());
    result.into_response()
}

/// A declared length over the input limit, refused before the body is read, in current Triton's
/// words for what the body holds: all JSON, one raw input, or JSON (its declared part) beyond the
/// limit. Where only binary tensors take a body past the limit (Triton sets none on them), or the
/// JSON length is unreadable, `read_body` refuses it in the sidecar's own words.
fn declared_too_large(
    headers: &HeaderMap,
    content_length: Option<u64>,
    limit: u64,
) -> Option<Error> {
    let length = content_length.filter(|&n| n > limit)?;
    let Some(json_length) = headers.get(infergate_proto::wire::HEADER_LENGTH) else {
        return Some(json_too_large(length, limit));
    };
    match json_length.to_str().ok()?.trim().parse::<u64>().ok()? {
        0 => Some(raw_input_too_large(length, limit)),
        n if n > limit && n <= length => Some(json_too_large(n, limit)),
        _ => None,
    }
}

/// JSON of at least this many bytes to read or write (or a body to compress) is handled on a
/// blocking thread, so that the runtime's workers (one by default) go on serving the other
/// connections meanwhile.
pub(super) const OFFLOAD_BYTES: usize = 256 * 1024;

/// Runs `work` on the runtime's blocking threads.
pub(super) async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::internal(format!("the request's worker thread failed: {e}")))?
}
