//! The gRPC round-trip ceiling for the benchmark harness: a V2 gRPC server that does no work at
//! all. It reads each request to its end (the client must still send it), then answers with a
//! message recorded beforehand from a real server, chosen by method and, for `ModelInfer`, by
//! whether the request carried a large tensor. No server can answer perf_analyzer faster over
//! gRPC on the same machine; the harness compares the sidecar with it.
//!
//! Usage: `fixed-grpc <port> <answers dir>`. The directory holds one file per method, the
//! serialized response message (`ModelMetadata`, `ModelConfig`, `ModelStatistics`, `ServerLive`,
//! `ServerReady`, `ServerMetadata`, `ModelReady`, `ModelInfer`), and `ModelInfer.large`, the answer
//! to requests of `LARGE_REQUEST_BYTES` or more. Other methods answer `UNIMPLEMENTED`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const LARGE_REQUEST_BYTES: usize = 1 << 20;
const SERVICE: &str = "/inference.GRPCInferenceService/";

type Body = StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// Recorded answers, already framed (the 5-byte gRPC message prefix included).
struct Answers {
    by_method: HashMap<String, Bytes>,
    large_infer: Option<Bytes>,
}

fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

fn load(dir: &Path) -> std::io::Result<Answers> {
    let mut by_method = HashMap::new();
    let mut large_infer = None;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let message = frame(&std::fs::read(&path)?);
        if name == "ModelInfer.large" {
            large_infer = Some(message);
        } else {
            by_method.insert(name.to_string(), message);
        }
    }
    Ok(Answers {
        by_method,
        large_infer,
    })
}

async fn answer(
    answers: Arc<Answers>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = request
        .uri()
        .path()
        .strip_prefix(SERVICE)
        .unwrap_or_default()
        .to_string();
    // Read the whole request, as any server must, counting its bytes.
    let mut body = request.into_body();
    let mut received = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(data) = frame.data_ref() {
            received += data.len();
        }
    }
    let message = match (method.as_str(), &answers.large_infer) {
        ("ModelInfer", Some(large)) if received >= LARGE_REQUEST_BYTES => Some(large.clone()),
        _ => answers.by_method.get(&method).cloned(),
    };
    let mut trailers = HeaderMap::new();
    let mut frames = Vec::with_capacity(2);
    match message {
        Some(message) => {
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            frames.push(Ok(Frame::data(message)));
        }
        None => {
            trailers.insert("grpc-status", HeaderValue::from_static("12"));
            trailers.insert("grpc-message", HeaderValue::from_static("not recorded"));
        }
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let mut response = Response::new(StreamBody::new(futures::stream::iter(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(port), Some(dir)) = (args.next(), args.next()) else {
        return Err("usage: fixed-grpc <port> <answers dir>".into());
    };
    let answers = Arc::new(load(Path::new(&dir))?);
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port.parse()?))).await?;
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        let answers = answers.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(answers.clone(), request));
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
