//! TLS on a port (rustls with the ring provider): the server's certificate and key, and for
//! mutual TLS the roots a client's certificate must chain to, read from PEM files.
//!
//! The files are read again when they change, as a mounted Secret changes when cert-manager
//! renews a certificate (`watch`): new connections get the new certificate, open ones keep
//! theirs, and a file that does not load (a half-written Secret, a key that does not match) is
//! logged and the last good configuration kept. Each connection's handshake runs in its own
//! task, under the header deadline (`crate::accept`), so a client that never finishes one holds
//! nothing but its connection slot.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::TlsAcceptor;

mod admin;
mod client;
mod client_auth;
mod collector;
mod x509;

pub use admin::AdminTls;
pub use client::{ClientTls, ClientTlsFiles};
use client_auth::ClientCertificates;
pub use collector::{CollectorTls, CollectorTlsFiles, trusting_nothing};

/// What a port's TLS is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The roots of clients' certificates: required for mutual TLS.
    pub root: Option<PathBuf>,
    /// Whether a client must present a certificate that chains to `root`.
    pub mutual: bool,
}

/// A port's TLS, kept up to date with its files.
pub struct Tls {
    files: TlsFiles,
    /// The protocols the port speaks, offered in ALPN (`h2`, `http/1.1`).
    alpn: Vec<Vec<u8>>,
    acceptor: RwLock<TlsAcceptor>,
    /// The files' modification times when last loaded (or tried).
    seen: Seen,
    /// The serving certificate's expiry, as read from it (seconds since the epoch).
    not_after: RwLock<Option<i64>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads the files; an error says which file and why.
    pub fn load(files: TlsFiles, alpn: &[&str]) -> Result<Arc<Tls>, String> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let (config, not_after) = build(&files, &alpn)?;
        let seen = Seen::new(&files.paths());
        Ok(Arc::new(Tls {
            files,
            alpn,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            seen,
            not_after: RwLock::new(not_after),
        }))
    }

    /// The acceptor for a new connection: the configuration loaded last.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.files.mutual
    }

    /// When the serving certificate expires (seconds since the epoch), where it could be read.
    pub fn not_after(&self) -> Option<i64> {
        *self.not_after.read()
    }

    /// Loads the files again if any changed since last time; keeps the current configuration
    /// when they do not load.
    pub fn reload_if_changed(&self) {
        if !self.seen.changed(&self.files.paths()) {
            return;
        }
        match build(&self.files, &self.alpn) {
            Ok((config, not_after)) => {
                *self.acceptor.write() = TlsAcceptor::from(Arc::new(config));
                *self.not_after.write() = not_after;
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate loaded again");
            }
            Err(e) => tracing::error!(
                error = %e,
                "TLS files changed but do not load; the certificate loaded before is kept"
            ),
        }
    }

    /// Looks at the files every `every`, until aborted.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        crate::reload::every(every, move || self.reload_if_changed()).await;
    }
}

impl TlsFiles {
    fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.cert.as_path(), self.key.as_path()];
        paths.extend(self.root.as_deref());
        paths
    }
}

/// The modification times of a set of files when they were last loaded (or tried): whether they
/// changed since is what decides a reload.
struct Seen(Mutex<Vec<Option<SystemTime>>>);

impl Seen {
    fn new(paths: &[&Path]) -> Seen {
        Seen(Mutex::new(modified(paths)))
    }

    /// Whether any of `paths` changed since last asked; remembers what it found.
    fn changed(&self, paths: &[&Path]) -> bool {
        let now = modified(paths);
        let mut seen = self.0.lock();
        if *seen == now {
            return false;
        }
        *seen = now;
        true
    }
}

fn modified(paths: &[&Path]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

fn build(files: &TlsFiles, alpn: &[Vec<u8>]) -> Result<(ServerConfig, Option<i64>), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&files.cert)?;
    let not_after = x509::not_after(&certs[0]);
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{}: {e}", files.key.display()))?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{}: {e}", files.key.display()))?;
    // rustls checks a key against its certificate by parsing the certificate as webpki does,
    // which refuses X.509 version 1 certificates; OpenSSL's `x509 -req` makes those (Triton's
    // TLS QA serves one), and clients accept them. So the check is made here on the
    // certificate's public key itself, whatever its version.
    let matches = key.public_key().zip(x509::public_key_info(&certs[0]));
    if matches.is_none_or(|(key, cert)| key.as_ref() != cert) {
        return Err(format!(
            "{} and {}: the key is not the certificate's",
            files.cert.display(),
            files.key.display()
        ));
    }
    let certified = CertifiedKey::new(certs, key);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if files.mutual {
        let root = files
            .root
            .as_ref()
            .ok_or("mutual TLS needs the root certificate of the clients' certificates")?;
        let root_certs = read_certs(root)?;
        let verifier = ClientCertificates::new(&root_certs, provider)
            .map_err(|e| format!("{}: {e}", root.display()))?;
        builder.with_client_cert_verifier(Arc::new(verifier))
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = alpn.to_vec();
    Ok((config, not_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test certificates made with openssl (`sidecar/tests/data/tls`), of version 1 as
    /// `openssl x509 -req` makes them: a server certificate for localhost and its key, a client
    /// certificate, both signed by `ca.crt`; a client certificate signed by another CA of the
    /// same name; another key.
    pub(super) fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tls")
            .join(name)
    }

    fn files(key: &str) -> TlsFiles {
        TlsFiles {
            cert: data("server-v1.crt"),
            key: data(key),
            root: Some(data("ca.crt")),
            mutual: false,
        }
    }

    #[test]
    fn a_version_1_certificate_is_served_and_its_expiry_read() {
        let tls = Tls::load(files("server.key"), &["h2"]).unwrap();
        // notAfter=Nov 28 22:24:11 2036 GMT
        assert_eq!(tls.not_after(), Some(2_111_523_851));
        assert!(!tls.is_mutual());
    }

    #[test]
    fn version_1_client_certificates_are_accepted_only_when_a_roots_key_signed_them() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = read_certs(&data("ca.crt")).unwrap();
        let verifier = ClientCertificates::new(&roots, provider).unwrap();
        use rustls::server::danger::ClientCertVerifier;
        let now = rustls::pki_types::UnixTime::now();
        let client = read_certs(&data("client-v1.crt")).unwrap();
        assert!(verifier.verify_client_cert(&client[0], &[], now).is_ok());
        // Same issuer name, another CA's signature.
        let stranger = read_certs(&data("stranger-v1.crt")).unwrap();
        let refused = verifier.verify_client_cert(&stranger[0], &[], now);
        assert_eq!(
            refused.err(),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::BadSignature
            ))
        );
        // Past its validity.
        let later = rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_secs(
            2_111_523_851 + 86_400,
        ));
        assert_eq!(
            verifier.verify_client_cert(&client[0], &[], later).err(),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired
            ))
        );
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let error = Tls::load(files("other.key"), &["h2"]).unwrap_err();
        assert!(
            error.ends_with("the key is not the certificate's"),
            "{error}"
        );
        let missing = Tls::load(files("absent.key"), &["h2"]).unwrap_err();
        assert!(missing.contains("absent.key"), "{missing}");
    }
}
