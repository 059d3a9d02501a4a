//! The gRPC port's accept loop: HTTP/2 (prior knowledge) with hyper, serving tonic's routes.
//!
//! tonic's own `Server` wraps every call in its `grpc-timeout` handling, which ends an expired
//! call with `CANCELLED` (see `deadline.rs`); serving the routes here lets `DeadlineLayer` answer
//! as gRPC servers do. The HTTP/2 settings are the ones tonic's server applied, plus the sidecar's
//! wider flow-control windows and frames. Shutdown is graceful: no new connections, in-flight
//! calls finish.

use std::future::Future;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tower::ServiceBuilder;
use tower::util::MapResponseLayer;

use super::{DeadlineLayer, IgnoreIdleResets, as_resource_exhausted};

/// Serves `routes` on `listener` until `stop` completes, then waits for open connections.
pub async fn serve(listener: TcpListener, routes: Routes, stop: impl Future<Output = ()>) {
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
        .service(routes.prepare());
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Without TCP_NODELAY, Nagle's algorithm delays the tail of each large response.
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(IgnoreIdleResets::new(tcp));
        let connection = builder.serve_connection(io, TowerToHyperService::new(service.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A peer that resets or breaks the protocol ends its own connection.
            let _ = connection.await;
        });
    }
    drop(listener);
    tracing::debug!("gRPC port closed; waiting for open connections to finish");
    graceful.shutdown().await;
}
