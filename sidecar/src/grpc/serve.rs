//! The gRPC port: HTTP/2 (prior knowledge) with hyper, serving the generated tonic services.
//!
//! tonic's own `Server` wraps every call in its `grpc-timeout` handling, which ends an expired
//! call with `CANCELLED` (see `deadline.rs`); serving the services here lets `DeadlineLayer` answer
//! as gRPC servers do. The HTTP/2 settings are the ones tonic's server applied, plus the sidecar's
//! wider flow-control windows and frames. Connections are accepted, and shut down gracefully, by
//! `crate::accept`.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use infergate_config::Limits;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::body::Body;
use tower::util::MapResponseLayer;
use tower::{Service, ServiceBuilder};

use super::{DeadlineLayer, IgnoreIdleResets, as_resource_exhausted};
use crate::accept::{Io, PortSetup};
use crate::caller::{Caller, WithCaller};
use crate::inflight::{Budgeted, ByteBudget, Tracked};
use crate::tls::Tls;

/// Serves `services` (see `dispatch.rs`) on `listener` until `stop` completes, then waits for
/// open connections. While `drain` is true, connections get GOAWAY (see `crate::accept`).
pub async fn serve<S>(
    listener: TcpListener,
    services: S,
    limits: &Limits,
    budget: Arc<ByteBudget>,
    tls: Option<Arc<Tls>>,
    stop: impl Future<Output = ()>,
    drain: watch::Receiver<bool>,
) where
    S: Service<Request<Budgeted<Incoming>>, Response = Response<Body>, Error = Infallible>
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
        // A finite number of calls per connection, announced to the client; h2's limit on the
        // streams this side resets for a client's errors stays on (1024, hyper's default): a
        // client that makes the server reset stream after stream ("MadeYouReset",
        // CVE-2025-8671) gets GOAWAY instead of unbounded work.
        .max_concurrent_streams(limits.max_concurrent_streams)
        // Pings find peers that are gone without a word; `crate::accept` closes idle ones.
        .keep_alive_interval(limits.keepalive())
        .keep_alive_timeout(limits.keepalive_timeout());
    let service = ServiceBuilder::new()
        .layer(MapResponseLayer::new(as_resource_exhausted))
        .layer(DeadlineLayer)
        .service(services);
    let setup = PortSetup::client(limits, tls);
    let serve = move |io: Io, activity| {
        let caller = io.peer_addr().ok().map(Caller);
        let io = TokioIo::new(IgnoreIdleResets::new(io));
        let service = WithCaller::new(service.clone(), caller);
        let service = Tracked::new(service, activity, budget.clone());
        builder.serve_connection(io, TowerToHyperService::new(service))
    };
    crate::accept::serve_until(listener, "gRPC", setup, stop, Some(drain), serve).await;
}
