//! TLS towards the OTLP collector that spans are exported to. The collector's certificate must
//! chain to the given roots (the system's when none are given) and carry the URL's host name,
//! as any HTTPS client checks. A client certificate is presented where the collector asks for
//! one (mutual TLS).
//!
//! The files are read again when they change, as a mounted Secret changes when cert-manager
//! renews it: [`CollectorTls::reloaded`] hands out the new configuration. A file that does not
//! load leaves the last good configuration in use.

use std::path::{Path, PathBuf};

use rustls::ClientConfig;

use super::Seen;
use super::client::{client_config, roots_from};

/// What the TLS towards the collector is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectorTlsFiles {
    /// The roots the collector's certificate must chain to; none: the system's.
    pub root: Option<PathBuf>,
    /// The certificate and key to present where the collector asks for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl CollectorTlsFiles {
    fn paths(&self) -> Vec<&Path> {
        let mut paths: Vec<&Path> = self.root.iter().map(PathBuf::as_path).collect();
        if let Some((cert, key)) = &self.identity {
            paths.extend([cert.as_path(), key.as_path()]);
        }
        paths
    }
}

/// The TLS towards the collector, watched for changes to its files.
pub struct CollectorTls {
    files: CollectorTlsFiles,
    seen: Seen,
}

impl std::fmt::Debug for CollectorTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorTls")
            .field("files", &self.files)
            .finish()
    }
}

impl CollectorTls {
    /// Loads the files: the configuration to start with, and the watch on them.
    pub fn load(files: CollectorTlsFiles) -> Result<(CollectorTls, ClientConfig), String> {
        let config = build(&files)?;
        let seen = Seen::new(&files.paths());
        Ok((CollectorTls { files, seen }, config))
    }

    /// A new configuration if any file changed since last asked (an error if they no longer
    /// load); none if nothing changed.
    pub fn reloaded(&self) -> Option<Result<ClientConfig, String>> {
        self.seen
            .changed(&self.files.paths())
            .then(|| build(&self.files))
    }
}

/// A configuration trusting nothing, for a client towards an `http://` collector: reqwest builds
/// its TLS even where it never speaks it, and the sidecar installs no process-wide provider.
pub fn trusting_nothing() -> Result<ClientConfig, String> {
    client_config(rustls::RootCertStore::empty(), None, b"http/1.1")
}

fn build(files: &CollectorTlsFiles) -> Result<ClientConfig, String> {
    let roots = match &files.root {
        Some(root) => roots_from(root)?,
        None => {
            // Unreadable entries among the system's are skipped, as every client skips them;
            // none at all is an error that says what to give instead.
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                return Err(
                    "no system root certificates were found: give the collector's \
                            (--trace-config opentelemetry,certificate=<file>)"
                        .to_string(),
                );
            }
            roots
        }
    };
    client_config(roots, files.identity.as_ref(), b"http/1.1")
}
