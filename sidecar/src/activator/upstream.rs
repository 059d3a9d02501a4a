//! The service's sidecars, as the activator passes calls on to them: which are ready (the
//! sequence peers' membership and probes, `crate::peers`), and one HTTP/2 connection to each of
//! their two client ports, gRPC and HTTP, opened on first use and again after it drops.
//!
//! REST calls go to the HTTP port over HTTP/2 too (the port serves both), whatever the client
//! spoke: one connection carries every call, and a stream's request and answer flow at once.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::peers::membership::{Members, PeerState};
use crate::tls::ClientTls;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection to a sidecar may take, TLS included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which of a sidecar's client ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Port {
    Grpc,
    Http,
}

pub struct Upstreams {
    members: Arc<Members>,
    http_port: u16,
    tls: Option<Arc<ClientTls>>,
    connections: Mutex<HashMap<(String, Port), SendRequest<Body>>>,
    next: AtomicUsize,
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl Upstreams {
    pub fn new(members: Arc<Members>, http_port: u16) -> Upstreams {
        let tls = members.tls().cloned();
        Upstreams {
            members,
            http_port,
            tls,
            connections: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        }
    }

    pub fn members(&self) -> &Arc<Members> {
        &self.members
    }

    /// The gRPC addresses of the sidecars ready now, the next one first (round robin).
    pub fn ready(&self) -> Vec<String> {
        let list = self.members.current();
        let mut ready: Vec<String> = list
            .peers
            .iter()
            .filter(|p| p.state() == PeerState::Ready)
            .map(|p| p.address.clone())
            .collect();
        if !ready.is_empty() {
            let start = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
            ready.rotate_left(start);
        }
        ready
    }

    /// Whether any sidecar is ready.
    pub fn any_ready(&self) -> bool {
        let list = self.members.current();
        list.peers.iter().any(|p| p.state() == PeerState::Ready)
    }

    /// A sender on the connection to `address`'s `port`, connecting where there is none.
    pub async fn sender(&self, address: &str, port: Port) -> Result<SendRequest<Body>, BoxError> {
        let key = (address.to_string(), port);
        if let Some(sender) = self.connections.lock().get(&key).filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        let authority = self.authority(address, port)?;
        let sender = self.connect(&authority).await?;
        self.connections.lock().insert(key, sender.clone());
        Ok(sender)
    }

    /// The URI a request to `address`'s `port` is sent with: the same path and query.
    pub fn uri(&self, address: &str, port: Port, original: &Uri) -> Result<Uri, BoxError> {
        let path = original
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let scheme = if self.tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        Ok(Uri::builder()
            .scheme(scheme)
            .authority(self.authority(address, port)?)
            .path_and_query(path)
            .build()?)
    }

    fn authority(&self, address: &str, port: Port) -> Result<Authority, BoxError> {
        let authority: Authority = address.parse()?;
        Ok(match port {
            Port::Grpc => authority,
            Port::Http => format!("{}:{}", host_of(&authority), self.http_port).parse()?,
        })
    }

    async fn connect(&self, authority: &Authority) -> Result<SendRequest<Body>, BoxError> {
        let address = authority.as_str();
        let opening = async {
            let tcp = TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let stream: Box<dyn Stream> = match &self.tls {
                None => Box::new(tcp),
                Some(tls) => {
                    let (connector, name) = tls.connector();
                    Box::new(connector.connect(name, tcp).await?)
                }
            };
            Ok::<_, io::Error>(stream)
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, opening)
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {address} timed out"),
                )
            })??;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(16 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size(1 << 20)
            .keep_alive_interval(Duration::from_secs(30))
            .handshake(TokioIo::new(stream))
            .await?;
        let address = address.to_string();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%address, error = %e, "connection to a sidecar ended");
            }
        });
        Ok(sender)
    }

    /// Sends `request` on `sender`; its answer, as the sidecar gives it.
    pub async fn send(
        mut sender: SendRequest<Body>,
        request: Request<Body>,
    ) -> Result<Response<Incoming>, BoxError> {
        sender.ready().await?;
        Ok(sender.send_request(request).await?)
    }
}

/// The host of `host:port`, brackets kept for IPv6.
fn host_of(authority: &Authority) -> &str {
    let text = authority.as_str();
    match authority.port() {
        Some(_) => text.rsplit_once(':').map_or(text, |(host, _)| host),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_port_replaces_the_grpc_port_and_keeps_the_host() {
        let members = Arc::new(Members::others(
            crate::peers::membership::Dial::plain(1 << 20),
            "service",
        ));
        let upstreams = Upstreams::new(members, 8000);
        let original: Uri = "/v2/models/m/infer?x=1".parse().unwrap();
        let uri = upstreams
            .uri("10.0.0.7:8001", Port::Http, &original)
            .unwrap();
        assert_eq!(
            uri.to_string(),
            "http://10.0.0.7:8000/v2/models/m/infer?x=1"
        );
        let uri = upstreams
            .uri("[fd00::7]:8001", Port::Http, &original)
            .unwrap();
        assert_eq!(
            uri.to_string(),
            "http://[fd00::7]:8000/v2/models/m/infer?x=1"
        );
        let uri = upstreams
            .uri("[fd00::7]:8001", Port::Grpc, &original)
            .unwrap();
        assert_eq!(uri.authority().unwrap().as_str(), "[fd00::7]:8001");
    }
}
