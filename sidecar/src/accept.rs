//! The accept loop the HTTP and gRPC ports share: every connection served by hyper until the stop
//! signal, then a graceful shutdown (no new connections, open ones finish).

use std::future::Future;
use std::time::Duration;

use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use tokio::net::{TcpListener, TcpStream};

/// Serves each connection accepted on `listener` with `serve` (a hyper connection) until `stop`
/// completes, then waits for the open ones. `port` names the port in logs.
pub async fn serve_until<C>(
    listener: TcpListener,
    port: &'static str,
    stop: impl Future<Output = ()>,
    mut serve: impl FnMut(TcpStream) -> C,
) where
    C: GracefulConnection + Send + 'static,
    C::Error: Send,
{
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(port, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Without TCP_NODELAY, Nagle's algorithm delays the tail of each large response.
        let _ = tcp.set_nodelay(true);
        let connection = graceful.watch(serve(tcp));
        tokio::spawn(async move {
            // A peer that resets, times out or breaks the protocol ends its own connection;
            // nothing to report.
            let _ = connection.await;
        });
    }
    drop(listener);
    tracing::debug!(port, "port closed; waiting for open connections to finish");
    graceful.shutdown().await;
}
