//! The cheapest hop there can be in front of a model server, for the benchmark harness: a TCP
//! relay. Each connection a client opens is paired with one connection of its own to the
//! upstream, and bytes are copied between the two as they come, in both directions, by a
//! thread per direction blocked in `read`. Nothing is parsed, buffered beyond one read or
//! rewritten, so HTTP/1.1 and HTTP/2 (gRPC) pass alike.
//!
//! Any front that routes, checks or translates a call must at least receive it and send it on,
//! and receive the answer and send it back: the four socket operations each call costs here.
//! Where this relay misses a "through a front versus directly" ratio on a machine, every front
//! misses it there; what it reaches is the ceiling for a separate process on that machine.
//!
//! Usage: `relay LISTEN_PORT=UPSTREAM_HOST:PORT ...` (one pair per port to serve, on
//! 127.0.0.1). It prints `ready` once every port listens, and runs until killed.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::thread;

/// One read's worth: a 16-element call is a few hundred bytes, a 1M-element one is sent on in
/// pieces of this size as they arrive.
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
    let mut listeners = Vec::new();
    for (port, upstream) in pairs {
        match TcpListener::bind(("127.0.0.1", port)) {
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
        .map(|(listener, upstream)| thread::spawn(move || accept_loop(&listener, &upstream)))
        .collect();
    for acceptor in acceptors {
        let _ = acceptor.join();
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

fn accept_loop(listener: &TcpListener, upstream: &str) {
    for client in listener.incoming() {
        let client = match client {
            Ok(client) => client,
            Err(e) => {
                eprintln!("relay: accept: {e}");
                continue;
            }
        };
        if let Err(e) = pair(client, upstream) {
            eprintln!("relay: to {upstream}: {e}");
        }
    }
}

/// Connects `client` to a new upstream connection and starts copying both ways. A client whose
/// upstream cannot be reached is closed.
fn pair(client: TcpStream, upstream: &str) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    // Each piece goes on at once: a relay that waited to fill packets would add latency that
    // is not the hop's.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_in, server_out) = (client.try_clone()?, server.try_clone()?);
    thread::spawn(move || copy(client_in, server_out));
    thread::spawn(move || copy(server, client));
    Ok(())
}

/// Copies `from` to `to` until `from` ends or either fails, then ends `to`'s writing side so
/// that the peer sees the end as well.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call goes through to the upstream and its answer comes back unchanged, in pieces
    /// larger than one read; the client's end reaches the upstream as an end.
    #[test]
    fn bytes_pass_both_ways_and_the_end_follows() -> io::Result<()> {
        let upstream = TcpListener::bind("127.0.0.1:0")?;
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
        let front = TcpListener::bind("127.0.0.1:0")?;
        let front_addr = front.local_addr()?;
        thread::spawn(move || accept_loop(&front, &upstream_addr));

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
