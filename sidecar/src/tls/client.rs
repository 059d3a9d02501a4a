//! TLS towards sequence peers: the other replicas' sidecars, whose gRPC ports serve TLS (and
//! mutual TLS) with the InferenceService's certificate. A peer is trusted only when it proves a
//! certificate that chains to the configured roots *for the peers Service's name*, whatever
//! address it was dialled at: anyone can put an address into an EndpointSlice, only the service
//! holds its key. Where the peers ask for a client certificate, this sidecar presents its own
//! serving certificate (it carries `clientAuth` as well).
//!
//! The files are read again when they change, as the port's own are ([`super::Tls`]): new
//! connections use the new roots and certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;

use super::{Seen, read_certs};

/// What the TLS towards peers is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The roots the peers' certificates must chain to.
    pub root: PathBuf,
    /// The certificate (and key) to present where peers ask for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The TLS towards peers, kept up to date with its files.
pub struct ClientTls {
    files: ClientTlsFiles,
    /// The name every peer's certificate must carry.
    server_name: ServerName<'static>,
    connector: RwLock<TlsConnector>,
    seen: Seen,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.files)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl ClientTls {
    /// Loads the files; `server_name` is the DNS name peers' certificates must carry.
    pub fn load(files: ClientTlsFiles, server_name: &str) -> Result<Arc<ClientTls>, String> {
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|e| format!("'{server_name}' is not a server name: {e}"))?;
        let connector = TlsConnector::from(Arc::new(build(&files)?));
        let seen = Seen::new(&files.paths());
        Ok(Arc::new(ClientTls {
            files,
            server_name,
            connector: RwLock::new(connector),
            seen,
        }))
    }

    /// The connector for a new connection, and the name the peer must prove.
    pub fn connector(&self) -> (TlsConnector, ServerName<'static>) {
        (self.connector.read().clone(), self.server_name.clone())
    }

    /// Loads the files again if any changed since last time; keeps the current configuration
    /// when they do not load.
    pub fn reload_if_changed(&self) {
        if !self.seen.changed(&self.files.paths()) {
            return;
        }
        match build(&self.files) {
            Ok(config) => {
                *self.connector.write() = TlsConnector::from(Arc::new(config));
                tracing::info!(root = %self.files.root.display(), "TLS towards sequence peers loaded again");
            }
            Err(e) => tracing::error!(
                error = %e,
                "TLS files for sequence peers changed but do not load; the ones loaded before are kept"
            ),
        }
    }

    /// Looks at the files every `every`, until aborted.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        crate::reload::every(every, move || self.reload_if_changed()).await;
    }
}

fn build(files: &ClientTlsFiles) -> Result<ClientConfig, String> {
    client_config(roots_from(&files.root)?, files.identity.as_ref(), b"h2")
}

/// The roots in a PEM file.
pub(super) fn roots_from(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// A client configuration (the ring provider, safe default versions) that trusts `roots`,
/// presents `identity` (certificate and key files) where a server asks for one, and offers
/// `alpn`.
pub(super) fn client_config(
    roots: rustls::RootCertStore,
    identity: Option<&(PathBuf, PathBuf)>,
    alpn: &[u8],
) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let certs = read_certs(cert)?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

impl ClientTlsFiles {
    fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.root.as_path()];
        if let Some((cert, key)) = &self.identity {
            paths.extend([cert.as_path(), key.as_path()]);
        }
        paths
    }
}
