//! The HTTP/2 connection the gRPC client speaks to the upstream over: one connection, opened on
//! the first call and again after it drops, under tonic's generated client (which still frames
//! messages, reads `grpc-status` and enforces the message size limits).
//!
//! Why not tonic's own channel: it hands every call to a buffer task and hyper's client, which
//! sends a request's HEADERS frame as soon as the stream opens and its message from a second task
//! once the stream has send capacity — two writes, and on the model server's side two wake-ups,
//! for every call. Here the caller's task queues both frames before the connection task runs,
//! so a call leaves in one write (the h2 connection flushes everything queued at once), and
//! nothing between the caller and the connection needs a task of its own.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the connection is opened.
#[derive(Clone, Debug)]
pub struct Settings {
    pub connect_timeout: Duration,
    /// Receive windows, per stream and for the connection: large tensors arrive without waiting
    /// for window updates.
    pub stream_window: u32,
    pub connection_window: u32,
}

/// A cheap-to-clone handle on the connection (a `tower::Service` for tonic's client).
#[derive(Clone)]
pub struct H2Channel {
    shared: Arc<Shared>,
}

struct Shared {
    authority: Authority,
    settings: Settings,
    /// TLS over the TCP connection, where the peer serves it.
    tls: Option<Arc<crate::tls::ClientTls>>,
    /// The live connection, if any; held while connecting so concurrent calls share one attempt.
    connection: Mutex<Option<Connection>>,
}

#[derive(Clone)]
struct Connection {
    sender: h2::client::SendRequest<Bytes>,
    /// Cleared by the task driving the connection when it ends.
    open: Arc<AtomicBool>,
}

impl H2Channel {
    /// A channel to `http://host:port` that connects on its first call.
    pub fn lazy(url: &str, settings: Settings) -> Result<Self, String> {
        Self::lazy_with_tls(url, settings, None)
    }

    /// The same, speaking TLS over the connection where `tls` is given (the URL's scheme stays
    /// `http`: it names the address, the TLS is the caller's choice).
    pub fn lazy_with_tls(
        url: &str,
        settings: Settings,
        tls: Option<Arc<crate::tls::ClientTls>>,
    ) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("{e}"))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err("the scheme must be grpc:// (plaintext HTTP/2)".into());
        }
        let authority = uri.authority().cloned().ok_or("no host:port")?;
        if authority.port_u16().is_none() {
            return Err("no port".into());
        }
        Ok(H2Channel {
            shared: Arc::new(Shared {
                authority,
                settings,
                tls,
                connection: Mutex::new(None),
            }),
        })
    }
}

impl Shared {
    /// A sender on the live connection, connecting first where there is none.
    async fn sender(&self) -> Result<h2::client::SendRequest<Bytes>, BoxError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection
            .as_ref()
            .filter(|c| c.open.load(Ordering::Acquire))
        {
            return Ok(live.sender.clone());
        }
        let fresh = self.connect().await?;
        let sender = fresh.sender.clone();
        *connection = Some(fresh);
        Ok(sender)
    }

    async fn connect(&self) -> Result<Connection, BoxError> {
        let address = self.authority.as_str();
        let tcp = tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(address))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {address} timed out"),
                )
            })??;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => self.start(tcp).await,
            Some(tls) => {
                let (connector, name) = tls.connector();
                let handshake = connector.connect(name, tcp);
                let stream = tokio::time::timeout(self.settings.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the TLS handshake with {address} timed out"),
                        )
                    })??;
                self.start(stream).await
            }
        }
    }

    /// HTTP/2 over an open connection, driven by a task of its own.
    async fn start<T>(&self, io: T) -> Result<Connection, BoxError>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = h2::client::Builder::new()
            .enable_push(false)
            .initial_window_size(self.settings.stream_window)
            .initial_connection_window_size(self.settings.connection_window)
            .handshake(io)
            .await?;
        let open = Arc::new(AtomicBool::new(true));
        let driver_open = open.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
            }
            driver_open.store(false, Ordering::Release);
        });
        Ok(Connection { sender, open })
    }

    async fn call(
        self: Arc<Self>,
        request: Request<tonic::body::Body>,
    ) -> Result<Response<ResponseBody>, BoxError> {
        let (mut head, body) = request.into_parts();
        // Every call is unary: the whole message is encoded before the call starts.
        let message = body.collect().await?.to_bytes();
        let path = head
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        head.uri = Uri::builder()
            .scheme(if self.tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            })
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()?;
        let sender = self.sender().await?.ready().await?;
        let mut sender = sender;
        let (response, mut stream) =
            sender.send_request(Request::from_parts(head, ()), message.is_empty())?;
        if !message.is_empty() {
            // Buffered by h2 beyond the stream's send window if need be, and written with the
            // HEADERS frame when the connection task next runs.
            stream.send_data(message, true)?;
        }
        let response = response.await?;
        Ok(response.map(|received| ResponseBody {
            received,
            state: BodyState::Data,
        }))
    }
}

impl tower::Service<Request<tonic::body::Body>> for H2Channel {
    type Response = Response<ResponseBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness (the connection, its stream limit) is awaited inside the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.shared.clone().call(request))
    }
}

/// A response's body: its DATA frames (their window released as they are read), then its
/// trailers, where gRPC's status travels.
pub struct ResponseBody {
    received: h2::RecvStream,
    state: BodyState,
}

enum BodyState {
    Data,
    Trailers,
    Done,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if let BodyState::Data = this.state {
            match ready!(this.received.poll_data(cx)) {
                Some(Ok(data)) => {
                    // An error here means the stream is already gone; the next poll says so.
                    let _ = this.received.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.state = BodyState::Done;
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.state = BodyState::Trailers,
            }
        }
        if let BodyState::Trailers = this.state {
            let trailers = ready!(this.received.poll_trailers(cx));
            this.state = BodyState::Done;
            return Poll::Ready(match trailers {
                Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            });
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }
}

#[cfg(test)]
mod tests;
