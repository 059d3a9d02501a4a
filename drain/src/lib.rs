//! The pod's preStop hook, as a binary of its own: `infergate-drain --seconds N --sequences M`
//! asks the sidecar's admin port, on loopback, to drain (`GET /drain`), waits for its answer and
//! exits 0 once it came.
//!
//! Why a separate, dependency-free binary: the sidecar accepts `/drain` only from loopback (a
//! container of its own pod), so the kubelet's `httpGet` hooks, which come from the node, cannot
//! call it; an `exec` hook can. The hook must run in the model server's container, which the
//! kubelet stops first, and that image has no sidecar binary and no known C library. This one is
//! built statically and the sidecar copies it into a volume both containers mount
//! (`server.drain_hook_dir`), so the model container can run it; the sidecar's own image carries
//! it too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// What the hook asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drain {
    /// The sidecar's admin port.
    pub port: u16,
    /// How long the sidecar drains before it answers.
    pub seconds: u64,
    /// How long it then waits, at most, for the sequences it holds to end.
    pub sequences: u64,
}

/// How long to wait for the answer beyond the drain itself: the sidecar answers as soon as its
/// waits are over, so this only bounds a sidecar that stopped answering.
const ANSWER_SLACK: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Drain {
    /// The admin request's path and query.
    pub fn path(&self) -> String {
        match self.sequences {
            0 => format!("/drain?seconds={}", self.seconds),
            n => format!("/drain?seconds={}&sequences={n}", self.seconds),
        }
    }

    /// Asks the sidecar on loopback (IPv4, then IPv6) and returns its answer's body.
    pub fn run(&self) -> Result<String, String> {
        let addrs = [
            SocketAddr::from(([127, 0, 0, 1], self.port)),
            SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], self.port)),
        ];
        let mut refused = Vec::new();
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(stream) => return self.ask(stream),
                Err(e) => refused.push(format!("{addr}: {e}")),
            }
        }
        Err(format!(
            "cannot reach the sidecar's admin port on loopback ({})",
            refused.join("; ")
        ))
    }

    fn ask(&self, mut stream: TcpStream) -> Result<String, String> {
        let wait = Duration::from_secs(self.seconds.saturating_add(self.sequences)) + ANSWER_SLACK;
        stream
            .set_read_timeout(Some(wait))
            .map_err(|e| e.to_string())?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            self.path()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("cannot send the drain request: {e}"))?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|e| format!("no answer from the sidecar: {e}"))?;
        parse_answer(&answer)
    }
}

/// The body of an HTTP/1.1 answer with status 200; any other status is an error with its body.
pub fn parse_answer(answer: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .ok_or_else(|| format!("not an HTTP answer: {:?}", head.lines().next()))?;
    let body = body.trim().to_string();
    match status {
        "200" => Ok(body),
        other => Err(format!("the sidecar answered {other}: {body}")),
    }
}

/// Copies this executable to `dir/infergate-drain` (mode 0755), through a temporary file renamed
/// into place, so a hook that runs meanwhile never sees half a file.
pub fn install(
    from: &std::path::Path,
    dir: &std::path::Path,
) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let target = dir.join(BINARY);
    let partial = dir.join(format!(".{BINARY}.partial"));
    std::fs::copy(from, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, &target)?;
    Ok(target)
}

/// The binary's file name, in the image and in the shared volume.
pub const BINARY: &str = "infergate-drain";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_names_sequences_only_when_asked() {
        let d = Drain {
            port: 8003,
            seconds: 5,
            sequences: 0,
        };
        assert_eq!(d.path(), "/drain?seconds=5");
        let d = Drain { sequences: 40, ..d };
        assert_eq!(d.path(), "/drain?seconds=5&sequences=40");
    }

    #[test]
    fn only_a_200_is_success() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"draining\":true}";
        assert_eq!(parse_answer(ok).as_deref(), Ok("{\"draining\":true}"));
        let refused = b"HTTP/1.1 403 Forbidden\r\n\r\n{\"error\":\"no\"}";
        assert_eq!(
            parse_answer(refused),
            Err("the sidecar answered 403: {\"error\":\"no\"}".to_string())
        );
        assert!(parse_answer(b"").is_err());
    }

    #[test]
    fn a_sidecar_that_is_not_there_is_an_error() {
        // A port nobody listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let d = Drain {
            port,
            seconds: 0,
            sequences: 0,
        };
        let err = d.run().unwrap_err();
        assert!(err.contains("cannot reach"), "{err}");
    }

    #[test]
    fn install_copies_the_file_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("infergate-drain-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("source");
        std::fs::write(&source, b"#!/bin/true\n").unwrap();
        let installed = install(&source, &dir).unwrap();
        assert_eq!(std::fs::read(&installed).unwrap(), b"#!/bin/true\n");
        let mode = std::fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
