//! The gRPC port: HTTP/2 (prior knowledge) with hyper, serving the generated tonic services.
//!
//! tonic's own `Server` wraps every call in its `grpc-timeout` handling, which ends an expired
//! call with `CANCELLED` (see `deadline.rs`); serving the services here lets `DeadlineLayer` answer
//! as gRPC servers do. The HTTP/2 settings are the ones tonic's server applied, plus the sidecar's
//! wider flow-control windows and frames. Connections are accepted, and shut down gracefully, by
//! `crate::accept`.

use std::convert::Infallible;
use std::future::Future;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::body::Body;
use tower::util::MapResponseLayer;
use tower::{Service, ServiceBuilder};

use super::{DeadlineLayer, IgnoreIdleResets, as_resource_exhausted};

/// Serves `services` (see `dispatch.rs`) on `listener` until `stop` completes, then waits for
/// open connections. While `drain` is true, connections get GOAWAY (see `crate::accept`).
pub async fn serve<S>(
    listener: TcpListener,
    services: S,
    stop: impl Future<Output = ()>,
    drain: watch::Receiver<bool>,
) where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        // HTTP/2's default 64 KiB flow-control windows cost a round trip per 64 KiB of a large
        // tensor; open them wide enough for multi-megabyte messages.
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1 << 20)
        // As tonic's server: no limit on streams per connection or on the streams this side
        // resets for errors (hyper's own defaults would be 200 and 1024).
        .max_concurrent_streams(None)
        .max_local_error_reset_streams(None);
    let service = ServiceBuilder::new()
        .layer(MapResponseLayer::new(as_resource_exhausted))
        .layer(DeadlineLayer)
        .service(services);
    crate::accept::serve_until(listener, "gRPC", stop, Some(drain), |tcp| {
        let io = TokioIo::new(IgnoreIdleResets::new(tcp));
        builder.serve_connection(io, TowerToHyperService::new(service.clone()))
    })
    .await;
}
