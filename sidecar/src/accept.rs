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
//! A TLS port undoes TLS in each connection's own task, before hyper sees it (`Io::accept`).
//! A port that offers TLS without requiring it (the admin port, `PortTls::Offered`) looks at a
//! connection's first byte: a TLS handshake record starts with 0x16, which no HTTP method does.
//!
//! While the pod drains (`Health::draining`, before SIGTERM), a port given the drain signal keeps
//! accepting and serving, but asks its connections to go: each gets a graceful shutdown (HTTP/2
//! GOAWAY; the calls already sent are answered, the client opens a new connection for the next
//! ones, which the Service no longer routes here). Connections accepted while draining get it
//! within `DRAIN_ROUND` too, since the Service may still send a client here for a moment.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;

use crate::inflight::Activity;
use crate::tls::{AdminTls, Tls};

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
    /// Asks a connection open this long (give or take a tenth) to go; none: never.
    pub max_age: Option<Duration>,
    /// Closes a connection asked to go for its age this long after; none: once its calls end.
    pub age_grace: Option<Duration>,
}

/// How a port serves its connections: the bounds, TLS if it speaks it, and how long a client
/// has to finish the TLS handshake.
#[derive(Clone)]
pub struct PortSetup {
    pub limits: PortLimits,
    pub tls: Option<PortTls>,
    pub handshake_timeout: Duration,
}

/// The TLS a port speaks.
#[derive(Clone)]
pub enum PortTls {
    /// On every connection: a client that does not speak TLS is dropped.
    Required(Arc<Tls>),
    /// On connections that open with a TLS handshake; the others are plain HTTP.
    Offered(Arc<AdminTls>),
}

impl PortTls {
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        match self {
            PortTls::Required(tls) => tls.acceptor(),
            PortTls::Offered(tls) => tls.acceptor(),
        }
    }
}

/// The first byte of a TLS record that carries a handshake (RFC 8446, 5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

impl PortSetup {
    /// A client port's (HTTP, gRPC): `limits.max_connections`, `limits.idle_timeout_seconds`,
    /// `limits.max_connection_age_seconds` with its grace, and the header deadline for the
    /// handshake.
    pub fn client(limits: &infergate_config::Limits, tls: Option<Arc<Tls>>) -> Self {
        PortSetup {
            limits: PortLimits {
                max_connections: limits.max_connections as usize,
                idle: Some(limits.idle_timeout()),
                max_age: limits.max_connection_age(),
                age_grace: limits.max_connection_age_grace(),
            },
            tls: tls.map(PortTls::Required),
            handshake_timeout: limits.http_header_timeout(),
        }
    }
}

/// Serves each connection accepted on `listener` with `serve` (a hyper connection on the
/// connection's bytes, TLS already undone, given the `Activity` its calls report to) until
/// `stop` completes, then waits for the open ones. `port` names the port in logs. With `drain`,
/// the connections are asked to go while it is true (module docs).
pub async fn serve_until<C, S>(
    listener: TcpListener,
    port: &'static str,
    setup: PortSetup,
    stop: impl Future<Output = ()>,
    mut drain: Option<watch::Receiver<bool>>,
    serve: S,
) where
    S: Fn(Io, Activity) -> C + Clone + Send + 'static,
    C: GracefulConnection + Send + 'static,
    C::Error: Send,
{
    let limits = setup.limits;
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
            // A TLS client could read an answer only after a handshake, which would cost the
            // port what the cap is there to save: closed unanswered where TLS is required.
            // Where it is only offered, plain clients (the kubelet's probes) still get one.
            if !matches!(setup.tls, Some(PortTls::Required(_))) {
                refuse_over_cap(tcp, port, limits.max_connections, &refusals);
            }
            continue;
        };
        // Without TCP_NODELAY, Nagle's algorithm delays the tail of each large response.
        let _ = tcp.set_nodelay(true);
        let (serve, tls, go) = (serve.clone(), setup.tls.clone(), go.subscribe());
        let handshake_timeout = setup.handshake_timeout;
        connections.spawn(async move {
            let Some(io) = Io::accept(tcp, tls.as_ref(), handshake_timeout, port).await else {
                return;
            };
            let activity = Activity::begin();
            run(serve(io, activity.clone()), go, activity, limits, slot).await;
        });
    }
    drop(listener);
    tracing::debug!(port, "port closed; waiting for open connections to finish");
    go.send_modify(|n| *n += 1);
    while connections.join_next().await.is_some() {}
}

/// A connection's bytes: plain TCP, or TLS over it.
pub enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Io {
    /// The connection, TLS undone where the port speaks it. A client that does not finish its
    /// handshake within `timeout`, or that is not speaking TLS to a TLS port, is dropped
    /// (debug-logged: scanners and plaintext clients are common and say nothing to act on).
    async fn accept(
        tcp: TcpStream,
        tls: Option<&PortTls>,
        timeout: Duration,
        port: &'static str,
    ) -> Option<Io> {
        let Some(tls) = tls else {
            return Some(Io::Plain(tcp));
        };
        let peer = tcp.peer_addr().ok();
        if let PortTls::Offered(_) = tls {
            let mut first = [0u8; 1];
            match tokio::time::timeout(timeout, tcp.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
                Ok(Ok(1)) => return Some(Io::Plain(tcp)),
                // Closed, failed or silent before its first byte: nothing to serve.
                _ => return None,
            }
        }
        match tokio::time::timeout(timeout, tls.acceptor().accept(tcp)).await {
            Ok(Ok(stream)) => Some(Io::Tls(Box::new(stream))),
            Ok(Err(e)) => {
                tracing::debug!(port, ?peer, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!(port, ?peer, "TLS handshake not finished in time");
                None
            }
        }
    }

    /// Whether the client presented a certificate, which the port's verifier then verified (a
    /// handshake with a bad one does not complete).
    pub fn has_client_certificate(&self) -> bool {
        match self {
            Io::Plain(_) => false,
            Io::Tls(tls) => tls.get_ref().1.peer_certificates().is_some(),
        }
    }

    /// The client's address.
    pub fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        match self {
            Io::Plain(tcp) => tcp.peer_addr(),
            Io::Tls(tls) => tls.get_ref().0.peer_addr(),
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(tcp) => tcp.is_write_vectored(),
            Io::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Serves one connection to its end, asking it to go when `go` changes, when it has been idle
/// for `limits.idle`, or when it reaches its age (`limits.max_age`, then closing it after
/// `limits.age_grace`). The slot is given back when it ends.
async fn run<C>(
    connection: C,
    mut go: watch::Receiver<u64>,
    activity: Activity,
    limits: PortLimits,
    _slot: OwnedSemaphorePermit,
) where
    C: GracefulConnection,
{
    let mut connection = pin!(connection);
    let idle = limits.idle;
    // Looked at a few times per idle period: a connection goes at most a quarter late.
    let mut look = idle.map(|idle| tokio::time::interval(idle / 4));
    let mut asked = false;
    let mut aged = pin!(sleep_for(limits.max_age.map(jittered)));
    // Set once the connection is asked to go for its age, where the grace is bounded.
    let mut grace_ends = pin!(sleep_for(None));
    loop {
        tokio::select! {
            // A peer that resets, times out or breaks the protocol ends its own connection;
            // nothing to report.
            _ = connection.as_mut() => return,
            () = &mut aged, if !asked => {
                // GOAWAY: new calls go to a new connection, which may reach another pod; the
                // calls open here, streams included, finish here.
                tracing::debug!("asking a connection to go: it reached its maximum age");
                connection.as_mut().graceful_shutdown();
                asked = true;
                grace_ends.set(sleep_for(limits.age_grace));
            }
            () = &mut grace_ends => {
                tracing::debug!("closing a connection whose calls outlived its age's grace");
                return;
            }
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

/// Sleeps `duration`; never ends without one.
async fn sleep_for(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// `age` give or take up to a tenth, different for each connection, so that connections opened
/// together (a client's pool, clients started together) do not all go together.
fn jittered(age: Duration) -> Duration {
    use std::hash::{BuildHasher, RandomState};
    // A fresh random state is randomly keyed: its hash of nothing is a random number.
    let random = RandomState::new().hash_one(());
    let tenth = age / 10;
    let span = tenth.as_nanos().saturating_mul(2).max(1);
    let offset = Duration::from_nanos(u64::try_from(u128::from(random) % span).unwrap_or(0));
    age.saturating_sub(tenth).saturating_add(offset)
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

    #[test]
    fn connection_ages_spread_over_a_tenth_either_side() {
        let age = Duration::from_secs(100);
        let ages: Vec<Duration> = (0..200).map(|_| jittered(age)).collect();
        for got in &ages {
            assert!(
                (Duration::from_secs(90)..=Duration::from_secs(110)).contains(got),
                "{got:?}"
            );
        }
        // Spread, not one value: some in each half.
        assert!(ages.iter().any(|a| *a < age) && ages.iter().any(|a| *a > age));
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
