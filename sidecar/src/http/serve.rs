//! The client HTTP port. `axum::serve` sets no timers, so a client that stops in the middle of
//! its request headers would hold its connection for ever; here hyper gets a timer and a
//! header-read deadline (the body has its own, in `read_body`). Connections are accepted, and
//! shut down gracefully (no new connections, in-flight ones finish), by `crate::accept`.
//!
//! While the pod drains, HTTP/1.1 answers carry `Connection: close`: the client's next call
//! opens a new connection, which the Service routes to another pod. Idle keep-alive connections
//! are not closed first (a client could be sending on one at that moment: its call would fail).

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, FutureExt, Map};
use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response, Version};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::Service;

use super::Front;
use crate::state::SharedState;

/// Serves `app` (see `front.rs`) on `listener` until `stop` completes, then waits for open
/// connections. A client gets `header_timeout` to send its request headers
/// (`limits.http_header_timeout_seconds`).
pub async fn serve(
    listener: TcpListener,
    app: Front,
    header_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // A client that ends its side after sending (shutdown(SHUT_WR)) still gets its answer,
        // however long the model takes.
        .half_close(true);
    builder.http2().timer(TokioTimer::new());
    let app = CloseWhileDraining {
        state: app.state(),
        inner: app,
    };
    crate::accept::serve_until(listener, "HTTP", stop, None, |tcp| {
        let service = TowerToHyperService::new(app.clone());
        builder
            .serve_connection(TokioIo::new(tcp), service)
            .into_owned()
    })
    .await;
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
