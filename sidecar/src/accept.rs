//! The accept loop every port shares: each connection served by hyper until the stop signal,
//! then a graceful shutdown (no new connections, open ones finish).
//!
//! Bounds, per port (`PortLimits`, from `limits.*`; see docs/hardening.md):
//! - at most `max_connections` open at once. One more is refused at once, in words its client
//!   understands, and closed (`refuse`): a client cannot take the descriptors the other ports
//!   need;
//! - a connection with no call in flight for `idle` is asked to go (HTTP/2 GOAWAY; HTTP/1.1
//!   connections are closed between requests by hyper's header deadline before that).
//!
//! While the pod drains (`Health::draining`, before SIGTERM), a port given the drain signal keeps
//! accepting and serving, but asks its connections to go: each gets a graceful shutdown (HTTP/2
//! GOAWAY; the calls already sent are answered, the client opens a new connection for the next
//! ones, which the Service no longer routes here). Connections accepted while draining get it
//! within `DRAIN_ROUND` too, since the Service may still send a client here for a moment.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::inflight::Activity;

/// How often connections accepted while draining are asked to go.
const DRAIN_ROUND: Duration = Duration::from_millis(500);

/// Most refusals written at once; past that, connections over the cap are closed unanswered.
const MAX_REFUSALS: usize = 64;

/// How long a refused client gets to show which protocol it speaks, and to take the answer.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// The bounds of one port.
#[derive(Clone, Copy, Debug)]
pub struct PortLimits {
    pub max_connections: usize,
    /// Asks a connection without a call in flight for this long to go; none: never.
    pub idle: Option<Duration>,
}

/// Serves each connection accepted on `listener` with `serve` (a hyper connection, given the
/// `Activity` its calls report to) until `stop` completes, then waits for the open ones. `port`
/// names the port in logs. With `drain`, the connections are asked to go while it is true
/// (module docs).
pub async fn serve_until<C>(
    listener: TcpListener,
    port: &'static str,
    limits: PortLimits,
    stop: impl Future<Output = ()>,
    mut drain: Option<watch::Receiver<bool>>,
    mut serve: impl FnMut(TcpStream, Activity) -> C,
) where
    C: GracefulConnection + Send + 'static,
    C::Error: Send,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    // Each new value asks the connections open at that moment to go.
    let (go, _) = watch::channel(0u64);
    let mut connections = JoinSet::new();
    let mut draining = drain.as_ref().is_some_and(|d| *d.borrow());
    let mut round = tokio::time::interval(DRAIN_ROUND);
    let mut stop = pin!(stop);
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
                    go.send_modify(|n| *n += 1);
                }
                continue;
            }
            _ = round.tick(), if draining => {
                go.send_modify(|n| *n += 1);
                continue;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse_over_cap(tcp, port, limits.max_connections, &refusals);
            continue;
        };
        // Without TCP_NODELAY, Nagle's algorithm delays the tail of each large response.
        let _ = tcp.set_nodelay(true);
        let activity = Activity::begin();
        let connection = serve(tcp, activity.clone());
        connections.spawn(run(connection, go.subscribe(), activity, limits.idle, slot));
    }
    drop(listener);
    tracing::debug!(port, "port closed; waiting for open connections to finish");
    go.send_modify(|n| *n += 1);
    while connections.join_next().await.is_some() {}
}

/// Serves one connection to its end, asking it to go when `go` changes or when it has been idle
/// for `idle`. The slot is given back when it ends.
async fn run<C>(
    connection: C,
    mut go: watch::Receiver<u64>,
    activity: Activity,
    idle: Option<Duration>,
    _slot: OwnedSemaphorePermit,
) where
    C: GracefulConnection,
{
    let mut connection = pin!(connection);
    // Looked at a few times per idle period: a connection goes at most a quarter late.
    let mut look = idle.map(|idle| tokio::time::interval(idle / 4));
    let mut asked = false;
    loop {
        tokio::select! {
            // A peer that resets, times out or breaks the protocol ends its own connection;
            // nothing to report.
            _ = connection.as_mut() => return,
            changed = go.changed(), if !asked => {
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                    asked = true;
                }
            }
            _ = tick(&mut look), if !asked => {
                if let Some(idle) = idle
                    && activity.idle_for().is_some_and(|quiet| quiet >= idle)
                {
                    tracing::debug!(idle_seconds = idle.as_secs(), "closing an idle connection");
                    connection.as_mut().graceful_shutdown();
                    asked = true;
                }
            }
        }
    }
}

async fn tick(look: &mut Option<tokio::time::Interval>) {
    match look {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// A connection over the port's cap: answered in the protocol its client speaks, then closed,
/// so the client says why instead of hanging or reporting a reset. HTTP/2 clients (gRPC) get
/// GOAWAY with `ENHANCE_YOUR_CALM` and a reason, which gRPC reports as `UNAVAILABLE`; HTTP/1.1
/// clients get 503 with `Retry-After`.
fn refuse_over_cap(tcp: TcpStream, port: &'static str, cap: usize, refusals: &Arc<Semaphore>) {
    tracing::warn!(
        port,
        max_connections = cap,
        "connection refused: too many connections"
    );
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(REFUSAL_TIME, refuse(tcp)).await;
    });
}

/// HTTP/2's connection preface, which a client speaking it sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const TOO_MANY: &str = "too many connections";

async fn refuse(mut tcp: TcpStream) -> std::io::Result<()> {
    let mut start = [0u8; H2_PREFACE.len()];
    let mut read = 0;
    while read < start.len() {
        let n = tcp.read(&mut start[read..]).await?;
        if n == 0 || start[..read + n] != H2_PREFACE[..read + n] {
            read += n;
            break;
        }
        read += n;
    }
    if start[..read] == *H2_PREFACE {
        tcp.write_all(&h2_goaway(TOO_MANY)).await?;
    } else {
        let body = format!("{{\"error\":\"{TOO_MANY}\"}}");
        let head = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(body.as_bytes()).await?;
    }
    tcp.shutdown().await
}

/// An HTTP/2 server's first frames for a connection it will not serve: empty SETTINGS (the
/// preface every server sends), then GOAWAY for stream 0 with `ENHANCE_YOUR_CALM` (RFC 9113
/// §5.4.1, §6.8) and `reason` as its debug data.
fn h2_goaway(reason: &str) -> Vec<u8> {
    const SETTINGS: u8 = 0x4;
    const GOAWAY: u8 = 0x7;
    const ENHANCE_YOUR_CALM: u32 = 0xb;
    let frame = |kind: u8, payload: &[u8]| {
        let len = payload.len() as u32;
        let mut frame = len.to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[kind, 0]);
        frame.extend_from_slice(&0u32.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    };
    let mut goaway = 0u32.to_be_bytes().to_vec();
    goaway.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    goaway.extend_from_slice(reason.as_bytes());
    let mut frames = frame(SETTINGS, &[]);
    frames.extend(frame(GOAWAY, &goaway));
    frames
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_of_an_http2_client_is_settings_then_goaway_with_the_reason() {
        let frames = h2_goaway("busy");
        // SETTINGS: length 0, type 4, no flags, stream 0.
        assert_eq!(&frames[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let goaway = &frames[9..];
        assert_eq!(&goaway[..9], &[0, 0, 12, 7, 0, 0, 0, 0, 0]);
        // Last stream 0, ENHANCE_YOUR_CALM, then the debug data.
        assert_eq!(&goaway[9..17], &[0, 0, 0, 0, 0, 0, 0, 0xb]);
        assert_eq!(&goaway[17..], b"busy");
    }
}
