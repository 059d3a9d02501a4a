//! The cheapest hop there can be in front of a model server, for the benchmark harness: a TCP
//! relay. Each connection a client opens is paired with one connection of its own to the
//! upstream, and bytes are copied between the two as they come, in both directions. Nothing is
//! parsed, held beyond one read or rewritten, so HTTP/1.1 and HTTP/2 (gRPC) pass alike.
//!
//! One thread waits on every socket at once (epoll, through a single-threaded tokio runtime) and
//! handles whatever is ready after each wait, as nginx's and the sidecar's event loops do: with
//! several calls in flight, one wake-up serves several of them. (A thread per direction blocked
//! in `read` was tried first: it costs as much CPU per call, but every message wakes a thread of
//! its own, and at concurrency 8 it passed fewer calls than nginx.)
//!
//! Any front that routes, checks or translates a call must at least receive it and send it on,
//! and receive the answer and send it back: the socket work each call costs here.
//!
//! Usage: `relay LISTEN_PORT=UPSTREAM_HOST:PORT ...` (one pair per port to serve, on
//! 127.0.0.1). It prints `ready` once every port listens, and runs until killed.

use std::io;
use std::process::ExitCode;

use tokio::io::copy_bidirectional_with_sizes;
use tokio::net::{TcpListener, TcpStream};

/// Buffer per direction: a 16-element call is a few hundred bytes, a 1M-element one is passed
/// on in pieces of this size as they arrive.
const CHUNK_BYTES: usize = 256 << 10;

fn main() -> ExitCode {
    let pairs: Vec<(u16, String)> = match std::env::args().skip(1).map(parse_pair).collect() {
        Ok(pairs) => pairs,
        Err(message) => {
            eprintln!("relay: {message}\nusage: relay LISTEN_PORT=UPSTREAM_HOST:PORT ...");
            return ExitCode::from(2);
        }
    };
    if pairs.is_empty() {
        eprintln!("usage: relay LISTEN_PORT=UPSTREAM_HOST:PORT ...");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("relay: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(pairs))
}

async fn serve(pairs: Vec<(u16, String)>) -> ExitCode {
    let mut listeners = Vec::new();
    for (port, upstream) in pairs {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listeners.push((listener, upstream)),
            Err(e) => {
                eprintln!("relay: cannot listen on 127.0.0.1:{port}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("ready");
    let acceptors: Vec<_> = listeners
        .into_iter()
        .map(|(listener, upstream)| tokio::spawn(accept_loop(listener, upstream)))
        .collect();
    for acceptor in acceptors {
        let _ = acceptor.await;
    }
    ExitCode::SUCCESS
}

fn parse_pair(arg: String) -> Result<(u16, String), String> {
    let (port, upstream) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not LISTEN_PORT=UPSTREAM_HOST:PORT"))?;
    let port = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port number"))?;
    Ok((port, upstream.to_string()))
}

async fn accept_loop(listener: TcpListener, upstream: String) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                eprintln!("relay: accept: {e}");
                continue;
            }
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            if let Err(e) = relay(client, &upstream).await {
                eprintln!("relay: to {upstream}: {e}");
            }
        });
    }
}

/// Pairs `client` with a new upstream connection and copies both ways until both ends are done;
/// a client whose upstream cannot be reached is closed.
async fn relay(mut client: TcpStream, upstream: &str) -> io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    // Each piece goes on at once: a relay that waited to fill packets would add latency that is
    // not the hop's.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    copy_bidirectional_with_sizes(&mut client, &mut server, CHUNK_BYTES, CHUNK_BYTES).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::thread;

    use super::*;

    /// A call goes through to the upstream and its answer comes back unchanged, in pieces
    /// larger than one read; the client's end reaches the upstream as an end.
    #[test]
    fn bytes_pass_both_ways_and_the_end_follows() -> io::Result<()> {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0")?;
        let upstream_addr = upstream.local_addr()?.to_string();
        // The upstream answers each byte with its successor, and reports how many it read.
        let server = thread::spawn(move || -> io::Result<usize> {
            let (mut conn, _) = upstream.accept()?;
            let mut buf = vec![0u8; 4096];
            let mut total = 0;
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    return Ok(total);
                }
                total += n;
                let answer: Vec<u8> = buf[..n].iter().map(|b| b.wrapping_add(1)).collect();
                conn.write_all(&answer)?;
            }
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let front = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let front_addr = front.local_addr()?;
        thread::spawn(move || runtime.block_on(accept_loop(front, upstream_addr)));

        let mut client = TcpStream::connect(front_addr)?;
        let call: Vec<u8> = (0..3 * CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
        let writer = {
            let mut client = client.try_clone()?;
            let call = call.clone();
            thread::spawn(move || -> io::Result<()> {
                client.write_all(&call)?;
                client.shutdown(Shutdown::Write)
            })
        };
        let mut answer = Vec::new();
        client.read_to_end(&mut answer)?;
        writer
            .join()
            .map_err(|_| io::Error::other("writer panicked"))??;
        let expected: Vec<u8> = call.iter().map(|b| b.wrapping_add(1)).collect();
        assert!(answer == expected, "the answer came back changed");
        let read = server
            .join()
            .map_err(|_| io::Error::other("server panicked"))??;
        assert_eq!(read, call.len());
        Ok(())
    }

    #[test]
    fn a_pair_names_a_port_and_an_upstream() {
        assert_eq!(
            parse_pair("8000=127.0.0.1:9000".to_string()),
            Ok((8000, "127.0.0.1:9000".to_string()))
        );
        assert!(parse_pair("8000".to_string()).is_err());
        assert!(parse_pair("x=127.0.0.1:9000".to_string()).is_err());
    }
}
