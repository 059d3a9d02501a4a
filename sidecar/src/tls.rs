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
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::TlsAcceptor;

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
    seen: Mutex<Vec<Option<SystemTime>>>,
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
        let seen = modified(&files);
        Ok(Arc::new(Tls {
            files,
            alpn,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            seen: Mutex::new(seen),
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
        let now = modified(&self.files);
        {
            let mut seen = self.seen.lock();
            if *seen == now {
                return;
            }
            *seen = now;
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
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let tls = self.clone();
            // Reading files blocks: off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || tls.reload_if_changed()).await;
        }
    }
}

fn modified(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    let paths = [Some(&files.cert), Some(&files.key), files.root.as_ref()];
    paths
        .into_iter()
        .flatten()
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
    let not_after = expiry(&certs[0]);
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
    let matches = key.public_key().zip(public_key_info(&certs[0]));
    if !matches.is_some_and(|(key, cert)| key.as_ref() == cert) {
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
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(root)? {
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", root.display()))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("{}: {e}", root.display()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = alpn.to_vec();
    Ok((config, not_after))
}

/// The fields of a certificate read here: its validity's contents and its whole
/// SubjectPublicKeyInfo. A DER walk of the TBS certificate's first fields (RFC 5280 §4.1:
/// version, serial, signature algorithm, issuer, validity, subject, key); none where the
/// certificate is not that shape.
fn tbs_fields(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    let (certificate, _) = der(cert, 0x30)?;
    let (tbs, _) = der(certificate, 0x30)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = der(rest, 0xa0)?.1; // version (absent in version 1)
    }
    rest = der(rest, 0x02)?.1; // serial number
    rest = der(rest, 0x30)?.1; // signature algorithm
    rest = der(rest, 0x30)?.1; // issuer
    let (validity, rest) = der(rest, 0x30)?;
    let rest = der(rest, 0x30)?.1; // subject
    let (key, after) = der(rest, 0x30)?;
    let whole = &rest[..rest.len() - after.len()];
    debug_assert!(whole.ends_with(key));
    Some((validity, whole))
}

/// The certificate's SubjectPublicKeyInfo, DER, whole.
fn public_key_info<'a>(cert: &'a CertificateDer<'_>) -> Option<&'a [u8]> {
    tbs_fields(cert.as_ref()).map(|(_, key)| key)
}

/// The certificate's `notAfter`, in seconds since the epoch (what `/status` reports).
fn expiry(cert: &CertificateDer<'_>) -> Option<i64> {
    let (validity, _) = tbs_fields(cert.as_ref())?;
    let not_before_tag = *validity.first()?;
    let (_, after_not_before) = der(validity, not_before_tag)?;
    let tag = *after_not_before.first()?;
    let (time, _) = der(after_not_before, tag)?;
    let text = std::str::from_utf8(time).ok()?;
    let digits = text.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = digits.get(..2)?.parse().ok()?;
            (
                if yy >= 50 { 1900 + yy } else { 2000 + yy },
                digits.get(2..)?,
            )
        }
        0x18 => (digits.get(..4)?.parse().ok()?, digits.get(4..)?),
        _ => return None,
    };
    let field = |at: usize| -> Option<i64> { rest.get(at..at + 2)?.parse().ok() };
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    Some(days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second)
}

/// One DER element with tag `tag` at the start of `input`: its contents, and what follows it.
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = if len < 0x80 {
        (usize::from(len), rest)
    } else {
        let count = usize::from(len & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146097 + day_of_era - 719468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test certificates made with openssl (`sidecar/tests/data/tls`): a version-1 server
    /// certificate for localhost, as `openssl x509 -req` makes it, its key, and another key.
    fn data(name: &str) -> PathBuf {
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
        // notAfter=Nov 28 22:14:32 2036 GMT
        assert_eq!(tls.not_after(), Some(2_111_523_272));
        assert!(!tls.is_mutual());
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

    #[test]
    fn dates_count_from_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11017);
        assert_eq!(days_from_civil(2026, 12, 1), 20788);
    }

    #[test]
    fn der_elements_of_short_and_long_lengths() {
        assert_eq!(der(&[0x02, 1, 7, 9], 0x02), Some((&[7u8][..], &[9u8][..])));
        let mut long = vec![0x30, 0x81, 200];
        long.extend(std::iter::repeat_n(1u8, 200));
        assert_eq!(
            der(&long, 0x30).map(|(c, r)| (c.len(), r.len())),
            Some((200, 0))
        );
        assert_eq!(der(&[0x30, 5, 1], 0x30), None);
        assert_eq!(der(&[0x31, 0], 0x30), None);
    }
}
