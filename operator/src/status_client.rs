//! The operator's client certificate for the sidecars' `/status`: what it presents, over TLS,
//! to each sidecar's admin port from outside the pod. The chart makes a CA and signs the
//! certificate with it, in Secrets of the operator's own namespace; the sidecars are given only
//! the CA's certificate, in their configuration (`server.status_client_ca`), so no pod holds a
//! credential and the operator needs no access to Secrets in users' namespaces.
//!
//! The files are a `kubernetes.io/tls` Secret mounted whole: `tls.crt`, `tls.key` and
//! `ca.crt`. Each is read again when it changes (a renewed Secret reaches the pod without a
//! restart): the certificate and key at the next handshake, the CA at the next rendering, which
//! puts it into the sidecars' ConfigMaps.
//!
//! The sidecars' admin certificates are their own, made at start, so nobody can verify them:
//! the client accepts any, and still checks the handshake's signatures. That protects what
//! matters here: the credential, which proves its holder to one handshake only, so a peer in
//! the middle gets nothing it could replay (a bearer token it could).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// The certificate's file in the directory.
const CERT_FILE: &str = "tls.crt";
/// Its key's.
const KEY_FILE: &str = "tls.key";
/// The CA's certificate, which the sidecars trust.
const CA_FILE: &str = "ca.crt";

/// The operator's client certificate, from a directory.
#[derive(Clone)]
pub struct StatusClientCertificate {
    dir: PathBuf,
    /// The CA's certificate, PEM, as last read.
    ca: Arc<Reloaded<String>>,
    identity: Arc<ReloadingIdentity>,
}

impl std::fmt::Debug for StatusClientCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusClientCertificate")
            .field("dir", &self.dir)
            .finish()
    }
}

impl StatusClientCertificate {
    /// Reads `tls.crt`, `tls.key` and `ca.crt` from `dir`; an error names the file and why.
    pub fn read(dir: &Path) -> Result<StatusClientCertificate, String> {
        let ca = Reloaded::load("status client CA", vec![dir.join(CA_FILE)], |paths| {
            read_ca(&paths[0])
        })?;
        let identity = Reloaded::load(
            "status client certificate",
            vec![dir.join(CERT_FILE), dir.join(KEY_FILE)],
            |paths| certified_key(&paths[0], &paths[1]).map(Arc::new),
        )?;
        Ok(StatusClientCertificate {
            dir: dir.to_path_buf(),
            ca: Arc::new(ca),
            identity: Arc::new(ReloadingIdentity(identity)),
        })
    }

    /// The CA's certificate, PEM: what each sidecar's configuration trusts. Read again when the
    /// file changed.
    pub fn ca_pem(&self) -> String {
        self.ca.current()
    }

    /// A TLS client configuration that presents the certificate (the one on disk at each
    /// handshake) and takes any server certificate (module docs).
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = AnyServerCertificate(provider.signature_verification_algorithms);
        // No ALPN here: the HTTPS connector offers the protocols it speaks.
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_cert_resolver(self.identity.clone()))
    }
}

/// A value read from files, read again when any of them changes; files that do not load (a
/// Secret half written) are logged and the last good value kept.
struct Reloaded<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    load: fn(&[PathBuf]) -> Result<T, String>,
    /// The files' modification times when last read, and the value then.
    loaded: Mutex<(Vec<Option<SystemTime>>, T)>,
}

impl<T: Clone> Reloaded<T> {
    fn load(
        what: &'static str,
        paths: Vec<PathBuf>,
        load: fn(&[PathBuf]) -> Result<T, String>,
    ) -> Result<Reloaded<T>, String> {
        let seen = modified(&paths);
        let value = load(&paths)?;
        Ok(Reloaded {
            what,
            paths,
            load,
            loaded: Mutex::new((seen, value)),
        })
    }

    fn current(&self) -> T {
        let now = modified(&self.paths);
        let mut loaded = self.loaded.lock();
        if loaded.0 != now {
            loaded.0 = now;
            match (self.load)(&self.paths) {
                Ok(value) => {
                    loaded.1 = value;
                    tracing::info!(what = self.what, "loaded again");
                }
                Err(e) => tracing::error!(
                    what = self.what,
                    error = %e,
                    "changed but does not load; the one loaded before is kept"
                ),
            }
        }
        loaded.1.clone()
    }
}

/// The certificate and key the client presents, as on disk at each handshake.
struct ReloadingIdentity(Reloaded<Arc<CertifiedKey>>);

impl std::fmt::Debug for ReloadingIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingIdentity")
            .field("files", &self.0.paths)
            .finish()
    }
}

impl ResolvesClientCert for ReloadingIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A CA file's text, where it holds at least one certificate.
fn read_ca(path: &Path) -> Result<String, String> {
    let pem = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cas = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if cas.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(pem)
}

fn modified(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider: CryptoProvider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let identity = CertifiedKey::new(chain, signing);
    identity.keys_match().map_err(|_| {
        format!(
            "{} and {}: the key is not the certificate's",
            cert.display(),
            key.display()
        )
    })?;
    Ok(identity)
}

/// Takes any server certificate, and checks that the server holds its key (module docs).
#[derive(Debug)]
struct AnyServerCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
