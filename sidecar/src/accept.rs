//! The accept loop the HTTP and gRPC ports share: every connection served by hyper until the stop
//! signal, then a graceful shutdown (no new connections, open ones finish).
//!
//! While the pod drains (`Health::draining`, before SIGTERM), a port given the drain signal keeps
//! accepting and serving, but asks its connections to go: each gets a graceful shutdown (HTTP/2
//! GOAWAY; the calls already sent are answered, the client opens a new connection for the next
//! ones, which the Service no longer routes here). Connections accepted while draining get it
//! within `DRAIN_ROUND` too, since the Service may still send a client here for a moment.

use std::future::Future;
use std::time::Duration;

use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How often connections accepted while draining are asked to go.
const DRAIN_ROUND: Duration = Duration::from_millis(500);

/// Serves each connection accepted on `listener` with `serve` (a hyper connection) until `stop`
/// completes, then waits for the open ones. `port` names the port in logs. With `drain`, the
/// connections are asked to go while it is true (module docs).
pub async fn serve_until<C>(
    listener: TcpListener,
    port: &'static str,
    stop: impl Future<Output = ()>,
    mut drain: Option<watch::Receiver<bool>>,
    mut serve: impl FnMut(TcpStream) -> C,
) where
    C: GracefulConnection + Send + 'static,
    C::Error: Send,
{
    let mut graceful = GracefulShutdown::new();
    // Groups of connections already asked to go, finishing their calls.
    let mut going = JoinSet::new();
    let mut draining = drain.as_ref().is_some_and(|d| *d.borrow());
    let mut round = tokio::time::interval(DRAIN_ROUND);
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
            changed = changed(&mut drain) => {
                draining = changed;
                if draining {
                    tracing::info!(port, "draining: asking clients to reconnect elsewhere");
                    ask_to_go(&mut graceful, &mut going);
                }
                continue;
            }
            _ = round.tick(), if draining => {
                ask_to_go(&mut graceful, &mut going);
                continue;
            }
            Some(_) = going.join_next(), if !going.is_empty() => continue,
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
    while going.join_next().await.is_some() {}
}

/// The drain signal's next value (never, without one or once its sender is gone).
async fn changed(drain: &mut Option<watch::Receiver<bool>>) -> bool {
    match drain {
        Some(rx) => match rx.changed().await {
            Ok(()) => *rx.borrow_and_update(),
            Err(_) => {
                *drain = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Gracefully shuts down every connection watched so far; new ones join a fresh group.
fn ask_to_go(graceful: &mut GracefulShutdown, going: &mut JoinSet<()>) {
    if graceful.count() == 0 {
        return;
    }
    let group = std::mem::replace(graceful, GracefulShutdown::new());
    going.spawn(group.shutdown());
}
