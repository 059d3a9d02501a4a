//! Whether the model server accepts connections: the admin port's `/upstream/livez`, the model
//! container's probe when it listens on loopback only (`model.listen: Loopback`). The kubelet
//! probes from the node, so it cannot reach a server bound to 127.0.0.1; the sidecar, in the same
//! network namespace, can, and answers for it.
//!
//! It asks what the kubelet's TCP probe asked before: a connection is accepted. Whether the
//! server is *ready* is the sidecar's own readiness (`/readyz`), kept by discovery; a model server
//! that loads its models for minutes must not be restarted for it, only one that stopped
//! listening.

use std::time::Duration;

use tokio::net::TcpStream;

/// The `host:port` of an upstream URL (`grpc://127.0.0.1:9001`, `http://[::1]:9000/`).
pub fn authority(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    Some(uri.authority()?.to_string())
}

/// True when a TCP connection to the upstream's address is accepted within `within`.
pub async fn accepts_connections(url: &str, within: Duration) -> bool {
    let Some(address) = authority(url) else {
        return false;
    };
    matches!(
        tokio::time::timeout(within, TcpStream::connect(address)).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_between_the_scheme_and_the_path() {
        assert_eq!(
            authority("grpc://127.0.0.1:9001").unwrap(),
            "127.0.0.1:9001"
        );
        assert_eq!(authority("http://[::1]:9000/").unwrap(), "[::1]:9000");
        assert_eq!(authority("localhost:9001").unwrap(), "localhost:9001");
    }

    #[tokio::test]
    async fn a_listening_port_is_live_and_a_closed_one_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = format!("grpc://{}", listener.local_addr().unwrap());
        assert!(accepts_connections(&open, Duration::from_secs(1)).await);
        drop(listener);
        assert!(!accepts_connections(&open, Duration::from_secs(1)).await);
    }
}
