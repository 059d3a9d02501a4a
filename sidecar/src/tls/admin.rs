//! The admin port's TLS: offered, never required. The kubelet's probes and the preStop hook
//! speak plain HTTP to the port; the operator speaks TLS to it and presents a client
//! certificate from its own CA (`server.status_client_ca`), which is what lets it read
//! `/status` from outside the pod. A connection is told apart by its first byte (`crate::accept`).
//!
//! The certificate served is one the sidecar makes for itself at start (ECDSA P-256, never
//! written anywhere). Nobody verifies it: the operator cannot know it, and needs not, since
//! what it protects is the operator's credential, and a TLS client certificate proves its
//! holder to one handshake only, so a peer in the middle has nothing to replay (unlike a bearer
//! token). The CA file is read again when it changes, as a mounted ConfigMap changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::TlsAcceptor;

use super::client_auth::ClientCertificates;
use super::{Seen, read_certs};

/// The name in the admin port's own certificate.
const OWN_NAME: &str = "infergate-admin";

/// The admin port's TLS, kept up to date with the CA file.
pub struct AdminTls {
    client_ca: PathBuf,
    own: Arc<CertifiedKey>,
    acceptor: RwLock<TlsAcceptor>,
    seen: Seen,
}

impl std::fmt::Debug for AdminTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminTls")
            .field("client_ca", &self.client_ca)
            .finish()
    }
}

impl AdminTls {
    /// Makes the port's certificate and loads the CA of the clients that may read `/status`.
    pub fn load(client_ca: PathBuf) -> Result<Arc<AdminTls>, String> {
        let own = Arc::new(own_certificate()?);
        let config = build(&client_ca, &own)?;
        let seen = Seen::new(&[client_ca.as_path()]);
        Ok(Arc::new(AdminTls {
            client_ca,
            own,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            seen,
        }))
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Loads the CA again if its file changed; keeps the current one when it does not load.
    pub fn reload_if_changed(&self) {
        if !self.seen.changed(&[self.client_ca.as_path()]) {
            return;
        }
        match build(&self.client_ca, &self.own) {
            Ok(config) => {
                *self.acceptor.write() = TlsAcceptor::from(Arc::new(config));
                tracing::info!(ca = %self.client_ca.display(), "status clients' CA loaded again");
            }
            Err(e) => tracing::error!(
                error = %e,
                "the status clients' CA changed but does not load; the one loaded before is kept"
            ),
        }
    }

    /// Looks at the CA file every `every`, until aborted.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        crate::reload::every(every, move || self.reload_if_changed()).await;
    }
}

fn build(client_ca: &Path, own: &Arc<CertifiedKey>) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = read_certs(client_ca)?;
    let verifier = ClientCertificates::new(&roots, provider.clone())
        .map_err(|e| format!("{}: {e}", client_ca.display()))?
        .optional();
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(own.as_ref().clone())));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A self-signed certificate for this process, and its key.
fn own_certificate() -> Result<CertifiedKey, String> {
    let fail = |e: rcgen::Error| format!("cannot make the admin port's certificate: {e}");
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = rcgen::CertificateParams::new(vec![OWN_NAME.to_string()])
        .map_err(fail)?
        .self_signed(&key)
        .map_err(fail)?;
    let provider = rustls::crypto::ring::default_provider();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("cannot load the admin port's own key: {e}"))?;
    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
    Ok(CertifiedKey::new(chain, signing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::tests::data;

    #[test]
    fn the_port_makes_its_own_certificate_and_loads_the_clients_ca() {
        let tls = AdminTls::load(data("ca.crt")).unwrap();
        assert_eq!(tls.own.cert.len(), 1);
        // A certificate of its own each time: nothing is shared between sidecars.
        let other = AdminTls::load(data("ca.crt")).unwrap();
        assert_ne!(tls.own.cert[0], other.own.cert[0]);
    }

    #[test]
    fn a_ca_that_does_not_load_is_refused_at_start() {
        let missing = AdminTls::load(data("absent.crt")).unwrap_err();
        assert!(missing.contains("absent.crt"), "{missing}");
        let not_a_certificate = AdminTls::load(data("server.key")).unwrap_err();
        assert!(
            not_a_certificate.contains("no certificate"),
            "{not_a_certificate}"
        );
    }
}
