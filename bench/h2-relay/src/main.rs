//! The floor of a gRPC front built on the sidecar's own HTTP/2 stack, for the benchmark harness.
//! Each client connection is served by hyper's HTTP/2 server with the sidecar's settings; each
//! call's request message is read to its end and sent on, on one HTTP/2 connection of its own to
//! the upstream (h2, HEADERS and message written together, as the sidecar's upstream channel
//! does); the answer's message and trailers are read to their end and returned. No message is
//! parsed, checked or translated: what is left is the cost of terminating HTTP/2 on both sides,
//! the least any gRPC-aware front on this stack can do. (bench/relay, which copies bytes and
//! parses nothing, is the floor of any hop; this is the floor of a hop that reads calls.)
//!
//! With `--server h2` the client side is served by the h2 crate directly, without hyper: each
//! connection's calls are handled inside its own task (no task spawned per call, no body
//! adapters), the least HTTP/2 termination this stack allows.
//!
//! Usage: `h2-relay [--server hyper|h2] LISTEN_PORT=UPSTREAM_HOST:PORT` (gRPC only, on
//! 127.0.0.1). It prints `ready` once it listens, and runs until killed. One thread, as the
//! sidecar runs by default.

use std::convert::Infallible;
use std::process::ExitCode;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;
type Body = StreamBody<Frames>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let raw_h2 = match args.iter().position(|a| a == "--server") {
        Some(at) if at + 1 < args.len() => {
            let server = args.remove(at + 1);
            args.remove(at);
            match server.as_str() {
                "hyper" => false,
                "h2" => true,
                other => {
                    eprintln!("h2-relay: --server is hyper or h2, not {other}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => false,
    };
    let Some((port, upstream)) = args
        .first()
        .and_then(|pair| pair.split_once('='))
        .and_then(|(port, upstream)| Some((port.parse::<u16>().ok()?, upstream.to_string())))
    else {
        eprintln!("usage: h2-relay [--server hyper|h2] LISTEN_PORT=UPSTREAM_HOST:PORT");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("h2-relay: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(port, upstream, raw_h2))
}

async fn serve(port: u16, upstream: String, raw_h2: bool) -> ExitCode {
    let authority: Authority = match upstream.parse() {
        Ok(authority) => authority,
        Err(e) => {
            eprintln!("h2-relay: bad upstream address {upstream}: {e}");
            return ExitCode::from(2);
        }
    };
    let sender = match connect(&upstream).await {
        Ok(sender) => sender,
        Err(e) => {
            eprintln!("h2-relay: cannot connect to {upstream}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("h2-relay: cannot listen on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("ready");
    // The sidecar's gRPC server settings (sidecar/src/grpc/serve.rs).
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1 << 20)
        .max_concurrent_streams(None);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                eprintln!("h2-relay: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        if raw_h2 {
            tokio::spawn(serve_raw(tcp, sender.clone(), authority.clone()));
            continue;
        }
        let sender = sender.clone();
        let authority = authority.clone();
        let connection = builder.serve_connection(
            TokioIo::new(tcp),
            service_fn(move |request| relay(request, sender.clone(), authority.clone())),
        );
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

/// One client connection served by h2 alone, with the same settings as hyper's server above; its
/// calls run concurrently inside this task.
async fn serve_raw(tcp: TcpStream, sender: SendRequest<Bytes>, authority: Authority) {
    let handshake = h2::server::Builder::new()
        .initial_window_size(16 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1 << 20)
        .handshake::<_, Bytes>(tcp);
    let mut connection = match handshake.await {
        Ok(connection) => connection,
        Err(e) => {
            eprintln!("h2-relay: handshake: {e}");
            return;
        }
    };
    let mut calls = futures::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    calls.push(relay_raw(request, respond, sender.clone(), authority.clone()));
                }
                Some(Err(e)) => {
                    eprintln!("h2-relay: connection: {e}");
                    return;
                }
                None => return,
            },
            Some(()) = futures::StreamExt::next(&mut calls), if !calls.is_empty() => {}
        }
    }
}

async fn relay_raw(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    sender: SendRequest<Bytes>,
    authority: Authority,
) {
    let (head, mut body) = request.into_parts();
    let mut message = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let answered = pass(
        Request::from_parts(head, message.freeze()),
        sender,
        authority,
    )
    .await;
    let (head, data, trailers) = match answered {
        Ok(parts) => parts,
        Err(e) => {
            eprintln!("h2-relay: {e}");
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            let _ = respond.send_response(response, true);
            return;
        }
    };
    let Ok(mut stream) = respond.send_response(Response::from_parts(head, ()), false) else {
        return;
    };
    // h2 queues what the client's window does not take yet; these messages are small.
    match trailers {
        Some(trailers) => {
            if data.is_empty() || stream.send_data(data, false).is_ok() {
                let _ = stream.send_trailers(trailers);
            }
        }
        None => {
            let _ = stream.send_data(data, true);
        }
    }
}

/// One HTTP/2 connection to the upstream, with the sidecar's upstream windows, made once: a
/// benchmark tool, it does not reconnect, and answers 502 (no gRPC status) once it is gone.
async fn connect(address: &str) -> Result<SendRequest<Bytes>, BoxError> {
    let tcp = TcpStream::connect(address).await?;
    tcp.set_nodelay(true)?;
    let (sender, connection) = h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(2 << 20)
        .handshake(tcp)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("h2-relay: upstream connection ended: {e}");
        }
    });
    Ok(sender)
}

async fn relay(
    request: Request<Incoming>,
    sender: SendRequest<Bytes>,
    authority: Authority,
) -> Result<Response<Body>, Infallible> {
    let answered = async {
        let (head, body) = request.into_parts();
        let message = body.collect().await?.to_bytes();
        pass(Request::from_parts(head, message), sender, authority).await
    };
    Ok(match answered.await {
        Ok((head, data, trailers)) => Response::from_parts(head, frames(data, trailers)),
        Err(e) => {
            let mut response = Response::new(frames(Bytes::new(), None));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            eprintln!("h2-relay: {e}");
            response
        }
    })
}

/// One call's message sent on to the upstream; its answer's head, message and trailers.
async fn pass(
    request: Request<Bytes>,
    sender: SendRequest<Bytes>,
    authority: Authority,
) -> Result<(http::response::Parts, Bytes, Option<HeaderMap>), BoxError> {
    let (mut head, message) = request.into_parts();
    let path = head
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    head.uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(authority)
        .path_and_query(path)
        .build()?;
    let mut sender = sender.ready().await?;
    let (answer, mut stream) =
        sender.send_request(Request::from_parts(head, ()), message.is_empty())?;
    if !message.is_empty() {
        stream.send_data(message, true)?;
    }
    let (head, mut received) = answer.await?.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = received.data().await {
        let chunk = chunk?;
        let _ = received.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = received.trailers().await?;
    Ok((head, data.freeze(), trailers))
}

fn frames(data: Bytes, trailers: Option<HeaderMap>) -> Body {
    let mut frames = Vec::with_capacity(2);
    if !data.is_empty() {
        frames.push(Ok(Frame::data(data)));
    }
    if let Some(trailers) = trailers {
        frames.push(Ok(Frame::trailers(trailers)));
    }
    StreamBody::new(futures::stream::iter(frames))
}
