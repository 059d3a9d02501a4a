//! The client HTTP port. `axum::serve` sets no timers, so a client that stops in the middle of
//! its request headers would hold its connection for ever; here hyper gets a timer and a
//! header-read deadline (the body has its own, in `read_body`). Connections are accepted, and
//! shut down gracefully (no new connections, in-flight ones finish), by `crate::accept`.
//!
//! While the pod drains, HTTP/1.1 answers carry `Connection: close`: the client's next call
//! opens a new connection, which the Service routes to another pod. Idle keep-alive connections
//! are not closed first (a client could be sending on one at that moment: its call would fail).

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, FutureExt, Map};
use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response, Version};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use infergate_config::Limits;
use tokio::net::TcpListener;
use tower::Service;

use super::Front;
use crate::accept::{Io, PortLimits, PortSetup, PortTls};
use crate::caller::{Caller, CertifiedClient, WithCaller};
use crate::inflight::Tracked;
use crate::state::SharedState;
use crate::tls::Tls;

/// Serves `app` (see `front.rs`) on `listener` until `stop` completes, then waits for open
/// connections, over TLS where `tls` is given (ALPN `h2` and `http/1.1`). A client gets
/// `limits.http_header_timeout_seconds` to finish its TLS handshake and to send its request
/// headers, which also closes an HTTP/1.1 connection left idle between requests; HTTP/2 (h2c)
/// connections get the gRPC port's stream limit and keepalive, and go when idle
/// (`crate::accept`).
pub async fn serve(
    listener: TcpListener,
    app: Front,
    limits: &Limits,
    tls: Option<Arc<Tls>>,
    stop: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout())
        // A client that ends its side after sending (shutdown(SHUT_WR)) still gets its answer,
        // however long the model takes.
        .half_close(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(limits.keepalive())
        .keep_alive_timeout(limits.keepalive_timeout());
    let state = app.state();
    let budget = state.request_bytes.clone();
    let app = CloseWhileDraining { state, inner: app };
    let setup = PortSetup::client(limits, tls);
    let serve = move |io: Io, activity| {
        let caller = io.peer_addr().ok().map(Caller);
        let app = CloseWhileDraining {
            state: app.state.clone(),
            inner: app.inner.for_caller(caller),
        };
        let service = Tracked::new(app, activity, budget.clone());
        builder
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
            .into_owned()
    };
    crate::accept::serve_until(listener, "HTTP", setup, stop, None, serve).await;
}

/// Serves a port of GET endpoints (metrics, admin) over HTTP/1.1, under the same header deadline
/// as the client port and `limits.max_admin_connections`, over TLS where `tls` is given (ALPN
/// `http/1.1`; the handshake under the same deadline), until `stop` completes. A request on a
/// connection whose client certificate the port verified carries [`CertifiedClient`].
pub async fn serve_http1(
    listener: TcpListener,
    port: &'static str,
    router: Router,
    limits: &Limits,
    tls: Option<PortTls>,
    stop: impl Future<Output = ()>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout());
    let setup = PortSetup {
        limits: PortLimits {
            max_connections: limits.max_admin_connections as usize,
            idle: None,
            max_age: None,
            age_grace: None,
        },
        tls,
        handshake_timeout: limits.http_header_timeout(),
    };
    let serve = move |io: Io, _| {
        let caller = io.peer_addr().ok().map(Caller);
        let router = if io.has_client_certificate() {
            router.clone().layer(axum::Extension(CertifiedClient))
        } else {
            router.clone()
        };
        let service = TowerToHyperService::new(WithCaller::new(router, caller));
        builder.serve_connection(TokioIo::new(io), service)
    };
    crate::accept::serve_until(listener, port, setup, stop, None, serve).await;
}

/// `Connection: close` on HTTP/1.x answers while the pod drains.
#[derive(Clone)]
struct CloseWhileDraining<S> {
    state: SharedState,
    inner: S,
}

type Closing<F, E> =
    Map<F, fn(Result<Response<axum::body::Body>, E>) -> Result<Response<axum::body::Body>, E>>;

impl<S, B> Service<Request<B>> for CloseWhileDraining<S>
where
    S: Service<Request<B>, Response = Response<axum::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Closing<S::Future, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let http1 = request.version() < Version::HTTP_2;
        let answer = self.inner.call(request);
        if http1 && self.state.health.is_draining() {
            Either::Right(answer.map(close_connection::<S::Error>))
        } else {
            Either::Left(answer)
        }
    }
}

fn close_connection<E>(
    answer: Result<Response<axum::body::Body>, E>,
) -> Result<Response<axum::body::Body>, E> {
    answer.map(|mut response| {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        response
    })
}
