//! One call through the activator: passed on at once where a sidecar of the service is ready,
//! held otherwise (`hold`), and answered by the activator itself only when it cannot be passed
//! on: the hold full, the service failing to start, no sidecar ready in time.
//!
//! A unary call's body is read before it is passed on (held, it counts against the cap on held
//! bytes; and a sidecar that cannot be reached is replaced by the next ready one, the body
//! sent again). A `ModelStreamInfer` stream is passed on as it flows: held, its messages wait in
//! the client's HTTP/2 window, not here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;

use super::hold::{Hold, Refusal};
use super::upstream::{Port, Upstreams};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The gRPC method whose calls are streams.
const STREAM_METHOD: &str = "/inference.GRPCInferenceService/ModelStreamInfer";
const INFER_METHOD: &str = "/inference.GRPCInferenceService/ModelInfer";

/// Whether a call is an inference, which counts as the service's traffic (`/status`
/// `quiet_seconds`): health checks and metadata do not, as in the sidecar (`traffic.rs`), or a
/// client polling readiness would keep a failing service's pods for ever.
fn is_inference(path: &str) -> bool {
    path == INFER_METHOD
        || path == STREAM_METHOD
        || (path.starts_with("/v2/models/")
            && ["/infer", "/generate", "/generate_stream"]
                .iter()
                .any(|end| path.ends_with(end)))
}

/// Headers of one HTTP/1.1 connection, not of the call (RFC 9110, 7.6.1): not passed on.
const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Calls by what became of them.
#[derive(Debug, Default)]
pub struct Counts {
    /// Passed on at once, a sidecar being ready.
    pub passed: AtomicU64,
    /// Passed on after being held.
    pub released: AtomicU64,
    /// Refused: the hold was full.
    pub refused: AtomicU64,
    /// Answered with the reason the service cannot start.
    pub failed: AtomicU64,
    /// Answered when no sidecar was ready in time (the hold's or the caller's).
    pub timed_out: AtomicU64,
    /// No ready sidecar could be reached.
    pub unreachable: AtomicU64,
}

/// What a call is, for its answers and for how it is passed on.
struct Kind {
    grpc: bool,
    stream: bool,
    /// The caller's own deadline (`grpc-timeout`), from when the call came.
    deadline: Option<Instant>,
}

impl Kind {
    fn of<B>(request: &Request<B>, received: Instant) -> Kind {
        let grpc = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        let deadline = grpc
            .then(|| request.headers().get("grpc-timeout"))
            .flatten()
            .and_then(crate::grpc::parse_timeout)
            .map(|timeout| received + timeout);
        Kind {
            grpc,
            stream: grpc && request.uri().path() == STREAM_METHOD,
            deadline,
        }
    }
}

/// What the activator needs to serve a call.
pub struct Activator {
    pub hold: Arc<Hold>,
    pub upstreams: Arc<Upstreams>,
    pub scaler: Option<Arc<super::scale::Scaler>>,
    pub counts: Counts,
    pub retry_after_seconds: u32,
    /// The last cold start's duration, and how many there were.
    pub last_cold_start: parking_lot::Mutex<Option<Duration>>,
    pub cold_starts: AtomicU64,
    /// Inference calls here (held, refused or passed on) and since when there have been none:
    /// the operator takes a service whose pods cannot start to zero once it is quiet long
    /// enough. A stream counts until it is passed on.
    pub traffic: Arc<crate::traffic::Traffic>,
}

/// A call's body: read whole (unary), or passed on as it comes (a stream).
enum Payload<B> {
    Whole(Bytes),
    Flowing(B),
}

impl Activator {
    /// Serves one call that came on `port`.
    pub async fn serve<B>(self: Arc<Self>, port: Port, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let received = Instant::now();
        let _busy = is_inference(request.uri().path()).then(|| self.traffic.begin());
        let kind = Kind::of(&request, received);
        let (head, body) = request.into_parts();
        if self.hold.is_ready() {
            let payload = match read(body, &kind, None).await {
                Ok(payload) => payload,
                Err(unread) => return self.unread(&kind, unread),
            };
            self.counts.passed.fetch_add(1, Ordering::Relaxed);
            return self.pass_on(port, &kind, head, payload, None).await;
        }
        let mut held = match self.hold.admit() {
            Ok(held) => held,
            Err(refusal) => return self.refuse(&kind, refusal),
        };
        let payload = match read(body, &kind, Some(&mut held)).await {
            Ok(payload) => payload,
            Err(unread) => return self.unread(&kind, unread),
        };
        let hold_deadline = received + self.hold.limits().timeout;
        let (deadline, by_caller) = match kind.deadline {
            Some(caller) if caller < hold_deadline => (caller, true),
            _ => (hold_deadline, false),
        };
        let turn = loop {
            let turn = match self.hold.wait(&held, deadline, by_caller).await {
                Ok(turn) => turn,
                Err(refusal) => return self.refuse(&kind, refusal),
            };
            if self.upstreams.any_ready() {
                break turn;
            }
            // The last sidecar went between the hold opening and this turn: wait again.
            drop(turn);
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.counts.released.fetch_add(1, Ordering::Relaxed);
        let answer = self.pass_on(port, &kind, head, payload, Some((turn, held)));
        answer.await
    }

    /// Sends the call to a ready sidecar, the next one where one cannot be reached (a unary
    /// call's); its answer as the sidecar gives it. `turn` (the held call's place in line) is let
    /// go once the call is sent, so the next held call goes after it.
    async fn pass_on<B>(
        &self,
        port: Port,
        kind: &Kind,
        head: http::request::Parts,
        payload: Payload<B>,
        turn: Option<(tokio::sync::OwnedMutexGuard<()>, super::hold::Held)>,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let mut turn = turn;
        let mut payload = Some(payload);
        let mut last_error = String::from("no sidecar of the service is ready");
        for address in self.upstreams.ready() {
            let sender = match self.upstreams.sender(&address, port).await {
                Ok(sender) => sender,
                Err(e) => {
                    last_error = format!("{address}: {e}");
                    continue;
                }
            };
            let body = match payload.take() {
                Some(Payload::Whole(bytes)) => {
                    payload = Some(Payload::Whole(bytes.clone()));
                    Body::from(bytes)
                }
                Some(Payload::Flowing(body)) => Body::new(body),
                None => break,
            };
            let request = match self.upstream_request(&address, port, kind, &head, body) {
                Ok(request) => request,
                Err(e) => {
                    last_error = e.to_string();
                    break;
                }
            };
            let sending = Upstreams::send(sender, request);
            let answer = if let Some(passing) = turn.take() {
                // Queued on the connection in the order of the turns; then the next one goes.
                let mut sending = std::pin::pin!(sending);
                let first = futures::poll!(&mut sending);
                drop(passing);
                match first {
                    std::task::Poll::Ready(answer) => answer,
                    std::task::Poll::Pending => sending.await,
                }
            } else {
                sending.await
            };
            match answer {
                Ok(response) => return response.map(Body::new),
                Err(e) => last_error = format!("{address}: {e}"),
            }
        }
        self.counts.unreachable.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %last_error, "a call could not be passed on");
        answer(
            kind,
            StatusCode::SERVICE_UNAVAILABLE,
            tonic::Code::Unavailable,
            &format!("no sidecar of the service could take the call: {last_error}"),
            None,
        )
    }

    fn upstream_request(
        &self,
        address: &str,
        port: Port,
        kind: &Kind,
        head: &http::request::Parts,
        body: Body,
    ) -> Result<Request<Body>, BoxError> {
        let mut request = Request::new(body);
        *request.method_mut() = head.method.clone();
        *request.uri_mut() = self.upstreams.uri(address, port, &head.uri)?;
        *request.version_mut() = Version::HTTP_2;
        let headers = request.headers_mut();
        *headers = head.headers.clone();
        strip_hop_by_hop(headers);
        headers.remove(header::HOST);
        // What is left of the caller's deadline after the hold.
        if let Some(deadline) = kind.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            let millis = left.as_millis().clamp(1, 99_999_999);
            headers.insert(
                "grpc-timeout",
                HeaderValue::from_str(&format!("{millis}m"))?,
            );
        }
        Ok(request)
    }

    fn unread(&self, kind: &Kind, unread: Unread) -> Response<Body> {
        match unread {
            Unread::Held(refusal) => self.refuse(kind, refusal),
            Unread::Busy => answer(
                kind,
                StatusCode::SERVICE_UNAVAILABLE,
                tonic::Code::Unavailable,
                crate::inflight::BUSY,
                Some(self.retry_after_seconds),
            ),
            Unread::Broken => answer(
                kind,
                StatusCode::BAD_REQUEST,
                tonic::Code::Cancelled,
                "the request's body did not arrive whole",
                None,
            ),
        }
    }

    fn refuse(&self, kind: &Kind, refusal: Refusal) -> Response<Body> {
        let limits = self.hold.limits();
        let (status, code, message, retry) = match refusal {
            Refusal::Full => {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    tonic::Code::Unavailable,
                    format!(
                        "the service is starting and holds as many calls as it may ({} calls, {} bytes): retry after {} s",
                        limits.max_calls, limits.max_bytes, self.retry_after_seconds
                    ),
                    Some(self.retry_after_seconds),
                )
            }
            Refusal::Failed(reason) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    tonic::Code::Unavailable,
                    format!("the service cannot start: {reason}"),
                    None,
                )
            }
            Refusal::TimedOut => {
                self.counts.timed_out.fetch_add(1, Ordering::Relaxed);
                let why = self
                    .scaler
                    .as_ref()
                    .and_then(|s| s.failure().map(|f| f.to_string()).or_else(|| s.trouble()))
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default();
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    tonic::Code::Unavailable,
                    format!(
                        "no replica of the service was ready within {} s{why}",
                        limits.timeout.as_secs()
                    ),
                    None,
                )
            }
            Refusal::Deadline => {
                self.counts.timed_out.fetch_add(1, Ordering::Relaxed);
                (
                    StatusCode::GATEWAY_TIMEOUT,
                    tonic::Code::DeadlineExceeded,
                    "Deadline Exceeded".to_string(),
                    None,
                )
            }
        };
        answer(kind, status, code, &message, retry)
    }
}

/// Why a call's body was not read whole.
enum Unread {
    /// Past the hold's cap on bytes.
    Held(Refusal),
    /// Past the process's budget of request bytes in flight (`limits.max_inflight_request_bytes`).
    Busy,
    /// The client's side broke off mid-body: nobody is left to answer, but something is sent.
    Broken,
}

/// The call's body: whole for a unary call (its bytes counted against the hold where `held`),
/// as it comes for a stream.
async fn read<B>(
    body: B,
    kind: &Kind,
    mut held: Option<&mut super::hold::Held>,
) -> Result<Payload<B>, Unread>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    if kind.stream {
        return Ok(Payload::Flowing(body));
    }
    let mut body = body;
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let e: BoxError = e.into();
            if crate::inflight::is_busy(e.as_ref()) {
                Unread::Busy
            } else {
                Unread::Broken
            }
        })?;
        if let Ok(data) = frame.into_data() {
            if let Some(held) = held.as_deref_mut() {
                held.take_bytes(data.len() as u64).map_err(Unread::Held)?;
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(Payload::Whole(whole.freeze()))
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers the Connection header names are the connection's too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(named.iter()) {
        headers.remove(name);
    }
    if headers
        .get(header::TE)
        .is_some_and(|te| te.as_bytes() != b"trailers")
    {
        headers.remove(header::TE);
    }
}

/// The activator's own answer: 503 (or the status given) with a JSON error for REST; for gRPC
/// the code, in a trailers-only answer. `retry` seconds go in `Retry-After` (and gRPC's
/// `grpc-retry-pushback-ms`, which gRPC's retrying clients read).
fn answer(
    kind: &Kind,
    status: StatusCode,
    code: tonic::Code,
    message: &str,
    retry: Option<u32>,
) -> Response<Body> {
    let mut response = if kind.grpc {
        tonic::Status::new(code, message).into_http::<Body>()
    } else {
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    };
    if let Some(seconds) = retry {
        let headers = response.headers_mut();
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        if kind.grpc {
            headers.insert(
                "grpc-retry-pushback-ms",
                HeaderValue::from(u64::from(seconds) * 1000),
            );
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::is_inference;

    #[test]
    fn only_inference_counts_as_traffic() {
        for path in [
            "/v2/models/simple/infer",
            "/v2/models/simple/versions/1/infer",
            "/v2/models/gen/generate",
            "/v2/models/gen/generate_stream",
            "/inference.GRPCInferenceService/ModelInfer",
            "/inference.GRPCInferenceService/ModelStreamInfer",
        ] {
            assert!(is_inference(path), "{path}");
        }
        for path in [
            "/v2/health/ready",
            "/v2/models/simple",
            "/v2/models/simple/ready",
            "/v2",
            "/inference.GRPCInferenceService/ServerReady",
            "/inference.GRPCInferenceService/ModelMetadata",
            "/infer",
        ] {
            assert!(!is_inference(path), "{path}");
        }
    }
}
