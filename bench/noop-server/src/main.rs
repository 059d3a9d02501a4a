//! The round-trip ceiling for the benchmark harness: a V2 server, over REST (HTTP/1.1) and gRPC,
//! that does no work at all. It reads each request to its end (the client must still send it),
//! then answers with a response recorded beforehand from the sidecar, chosen by route and, for
//! inference, by whether the request carried a large tensor. Nothing is parsed, computed or
//! copied; the answers are shared buffers. No server answers the same client faster on the same
//! machine, so the harness's `noop` rows bound what any server can reach there.
//!
//! Usage: `noop-server <http port> <grpc port> <answers dir>`. The directory holds:
//! - `grpc/<Method>`: a serialized response message per gRPC method (`ModelMetadata`,
//!   `ModelConfig`, `ModelStatistics`, `ServerReady`, ..., `ModelInfer`) and `grpc/ModelInfer.large`;
//! - `http/<name>`: REST bodies: `server`, `metadata`, `config`, `stats`, `infer` (JSON), and
//!   `infer.large` (binary tensor data) with `infer.large.header-length`, the length of its JSON
//!   header (the `Inference-Header-Content-Length` value).
//!
//! Requests of `LARGE_REQUEST_BYTES` or more get the `.large` answer. Unknown gRPC methods answer
//! `UNIMPLEMENTED`, unknown routes 404.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const LARGE_REQUEST_BYTES: usize = 1 << 20;
const GRPC_SERVICE: &str = "/inference.GRPCInferenceService/";
const MODEL: &str = "/v2/models/identity_fp32";

type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;
type Body = StreamBody<Frames>;

/// Recorded answers by name (file name), read once at start.
struct Answers {
    grpc: HashMap<String, Bytes>,
    http: HashMap<String, Bytes>,
    large_header_length: String,
}

fn read_dir(dir: &Path) -> std::io::Result<HashMap<String, Bytes>> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            out.insert(name.to_string(), Bytes::from(std::fs::read(&path)?));
        }
    }
    Ok(out)
}

fn load(dir: &Path) -> std::io::Result<Answers> {
    // gRPC messages are kept framed: the 5-byte prefix (not compressed, length) and the message.
    let grpc = read_dir(&dir.join("grpc"))?
        .into_iter()
        .map(|(name, message)| {
            let mut framed = BytesMut::with_capacity(5 + message.len());
            framed.put_u8(0);
            framed.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
            framed.put_slice(&message);
            (name, framed.freeze())
        })
        .collect();
    let http = read_dir(&dir.join("http"))?;
    let large_header_length = http
        .get("infer.large.header-length")
        .map(|b| String::from_utf8_lossy(b).trim().to_string())
        .unwrap_or_default();
    Ok(Answers {
        grpc,
        http,
        large_header_length,
    })
}

/// Reads a request body to its end and returns its length.
async fn drain(body: &mut Incoming) -> usize {
    let mut received = 0;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(data) = frame.data_ref() {
            received += data.len();
        }
    }
    received
}

fn body(frames: Vec<Frame<Bytes>>) -> Body {
    StreamBody::new(futures::stream::iter(
        frames.into_iter().map(Ok).collect::<Vec<_>>(),
    ))
}

async fn grpc(
    answers: Arc<Answers>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = request
        .uri()
        .path()
        .strip_prefix(GRPC_SERVICE)
        .unwrap_or_default()
        .to_string();
    let received = drain(&mut request.into_body()).await;
    let name = if method == "ModelInfer" && received >= LARGE_REQUEST_BYTES {
        "ModelInfer.large".to_string()
    } else {
        method
    };
    let mut trailers = HeaderMap::new();
    let mut frames = Vec::with_capacity(2);
    match answers.grpc.get(&name) {
        Some(message) => {
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            frames.push(Frame::data(message.clone()));
        }
        None => {
            trailers.insert("grpc-status", HeaderValue::from_static("12"));
            trailers.insert("grpc-message", HeaderValue::from_static("not recorded"));
        }
    }
    frames.push(Frame::trailers(trailers));
    let mut response = Response::new(body(frames));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

/// REST answers carry a Content-Length, as the sidecar's do (a stream body would be chunked).
async fn rest(
    answers: Arc<Answers>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let received = drain(&mut request.into_body()).await;
    let route = path
        .strip_prefix(MODEL)
        .map(|rest| rest.strip_prefix("/versions/1").unwrap_or(rest));
    let name = match (&method, path.as_str(), route) {
        (&Method::GET, "/v2", _) => Some("server"),
        (&Method::GET, "/v2/health/ready" | "/v2/health/live", _) => Some("empty"),
        (&Method::GET, _, Some("")) => Some("metadata"),
        (&Method::GET, _, Some("/ready")) => Some("empty"),
        (&Method::GET, _, Some("/config")) => Some("config"),
        (&Method::GET, _, Some("/stats")) => Some("stats"),
        (&Method::POST, _, Some("/infer")) if received >= LARGE_REQUEST_BYTES => {
            Some("infer.large")
        }
        (&Method::POST, _, Some("/infer")) => Some("infer"),
        _ => None,
    };
    let answer = match name {
        Some("empty") => Some(Bytes::new()),
        Some(name) => answers.http.get(name).cloned(),
        None => None,
    };
    let mut response = match answer {
        Some(bytes) => Response::new(Full::new(bytes)),
        None => {
            let mut response = Response::new(Full::new(Bytes::from_static(
                br#"{"error":"not recorded"}"#,
            )));
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    };
    let headers = response.headers_mut();
    if name == Some("infer.large") {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        if let Ok(length) = HeaderValue::from_str(&answers.large_header_length) {
            headers.insert("inference-header-content-length", length);
        }
    } else {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(response)
}

async fn listen(port: &str) -> Result<TcpListener, Box<dyn std::error::Error>> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port.parse()?));
    Ok(TcpListener::bind(addr).await?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [http_port, grpc_port, dir] = args.as_slice() else {
        return Err("usage: noop-server <http port> <grpc port> <answers dir>".into());
    };
    let answers = Arc::new(load(Path::new(dir))?);
    let http_listener = listen(http_port).await?;
    let grpc_listener = listen(grpc_port).await?;

    let rest_answers = answers.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = http_listener.accept().await {
            let _ = socket.set_nodelay(true);
            let answers = rest_answers.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| rest(answers.clone(), request));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });

    loop {
        let (socket, _) = grpc_listener.accept().await?;
        socket.set_nodelay(true)?;
        let answers = answers.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| grpc(answers.clone(), request));
            // The sidecar's own HTTP/2 windows, so the two differ only in the work they do.
            let _ = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(16 << 20)
                .initial_connection_window_size(32 << 20)
                .max_frame_size(1 << 20)
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}
