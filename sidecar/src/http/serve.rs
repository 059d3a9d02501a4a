//! The client HTTP port. `axum::serve` sets no timers, so a client that stops in the middle of
//! its request headers would hold its connection for ever; here hyper gets a timer and a
//! header-read deadline (the body has its own, in `read_body`). Connections are accepted, and
//! shut down gracefully (no new connections, in-flight ones finish), by `crate::accept`.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::Front;

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
    crate::accept::serve_until(listener, "HTTP", stop, |tcp| {
        let service = TowerToHyperService::new(app.clone());
        builder
            .serve_connection(TokioIo::new(tcp), service)
            .into_owned()
    })
    .await;
}
