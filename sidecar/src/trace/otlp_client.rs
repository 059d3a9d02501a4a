//! The HTTP client spans are exported with: reqwest's blocking client, as opentelemetry-otlp's
//! default (the batch processor sends from a thread of its own), but over TLS with the
//! sidecar's own rustls configuration when the collector's URL is `https://`
//! ([`crate::tls::CollectorTls`]). Renewed TLS files are picked up before the next export.
//!
//! The files come from `--trace-config opentelemetry,certificate=…` (and `client_certificate`,
//! `client_key`), each falling back on the OpenTelemetry variable of the same meaning
//! (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`, then `OTEL_EXPORTER_OTLP_CERTIFICATE`, …), so a pod
//! configured for other OpenTelemetry exporters configures this one too.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use infergate_config::{OtlpTlsSettings, TraceConfig};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use parking_lot::RwLock;

use crate::tls::{CollectorTls, CollectorTlsFiles};

/// The exporter's HTTP client.
#[derive(Debug)]
pub(super) struct OtlpHttpClient {
    /// The TLS files' watch; none towards an `http://` collector.
    tls: Option<CollectorTls>,
    timeout: Duration,
    client: RwLock<reqwest::blocking::Client>,
    /// Whether the last export failed: a failure is logged when exports start failing, and
    /// again when they work again, not at every export (one each 5 s by default).
    failing: AtomicBool,
}

impl OtlpHttpClient {
    pub(super) fn new(config: &TraceConfig, timeout: Duration) -> Result<OtlpHttpClient, String> {
        if !config.is_https() {
            // The configuration refuses TLS files for a plain collector.
            return Ok(OtlpHttpClient {
                tls: None,
                timeout,
                client: RwLock::new(build_client(crate::tls::trusting_nothing()?, timeout)?),
                failing: AtomicBool::new(false),
            });
        }
        let files = collector_files(&config.tls, |name| std::env::var_os(name))?;
        let (tls, rustls_config) = CollectorTls::load(files)
            .map_err(|e| format!("TLS towards the trace collector: {e}"))?;
        Ok(OtlpHttpClient {
            tls: Some(tls),
            timeout,
            client: RwLock::new(build_client(rustls_config, timeout)?),
            failing: AtomicBool::new(false),
        })
    }

    /// The client for the next export: built again first if the TLS files changed and load.
    fn current(&self) -> reqwest::blocking::Client {
        if let Some(reloaded) = self.tls.as_ref().and_then(CollectorTls::reloaded) {
            match reloaded.and_then(|config| build_client(config, self.timeout)) {
                Ok(client) => {
                    *self.client.write() = client;
                    tracing::info!("TLS towards the trace collector loaded again");
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "TLS files towards the trace collector changed but do not load; \
                     the ones loaded before are kept"
                ),
            }
        }
        self.client.read().clone()
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let sent = self.current().send_bytes(request).await;
        let failure = match &sent {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("the collector answered {}", response.status())),
            // The chain of causes: a refused certificate is two or three levels down.
            Err(e) => Some(error_chain(e.as_ref())),
        };
        match failure {
            Some(error) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!(%error, "trace spans could not be sent to the collector; they are dropped until it can be reached");
            }
            None if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!("trace spans reach the collector again");
            }
            _ => {}
        }
        sent
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The TLS files: each setting given, or else its OpenTelemetry variable (the traces one
/// first). A client certificate needs its key, and the other way round.
fn collector_files(
    settings: &OtlpTlsSettings,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<CollectorTlsFiles, String> {
    let file = |given: &Option<String>, suffix: &str| -> Option<PathBuf> {
        given.as_ref().map(PathBuf::from).or_else(|| {
            env(&format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"))
                .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{suffix}")))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    };
    let root = file(&settings.certificate, "CERTIFICATE");
    let cert = file(&settings.client_certificate, "CLIENT_CERTIFICATE");
    let key = file(&settings.client_key, "CLIENT_KEY");
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(
                "a client certificate towards the trace collector needs its key, and \
                        a key its certificate (opentelemetry,client_certificate= and \
                        opentelemetry,client_key=)"
                    .to_string(),
            );
        }
    };
    Ok(CollectorTlsFiles { root, identity })
}

/// reqwest's blocking client runs a runtime of its own, which must not be started (nor
/// dropped) from inside the server's; it is built on a thread of its own, as
/// opentelemetry-otlp builds its default one.
fn build_client(
    tls: rustls::ClientConfig,
    timeout: Duration,
) -> Result<reqwest::blocking::Client, String> {
    std::thread::Builder::new()
        .name("otlp-client".to_string())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .tls_backend_preconfigured(tls)
                .build()
        })
        .map_err(|e| format!("cannot start the trace exporter's client: {e}"))?
        .join()
        .map_err(|_| "the trace exporter's client could not be built".to_string())?
        .map_err(|e| format!("cannot build the trace exporter's client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(
        certificate: Option<&str>,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> OtlpTlsSettings {
        OtlpTlsSettings {
            certificate: certificate.map(str::to_string),
            client_certificate: cert.map(str::to_string),
            client_key: key.map(str::to_string),
        }
    }

    #[test]
    fn settings_win_over_the_variables_and_the_traces_variable_over_the_general_one() {
        let env = |name: &str| {
            let value = match name {
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE" => "/env/traces-ca.crt",
                "OTEL_EXPORTER_OTLP_CERTIFICATE" => "/env/ca.crt",
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE" => "/env/tls.crt",
                "OTEL_EXPORTER_OTLP_CLIENT_KEY" => "/env/tls.key",
                _ => return None,
            };
            Some(value.into())
        };
        let files = collector_files(&settings(None, None, None), env).unwrap();
        assert_eq!(files.root, Some(PathBuf::from("/env/traces-ca.crt")));
        assert_eq!(
            files.identity,
            Some(("/env/tls.crt".into(), "/env/tls.key".into()))
        );
        let files = collector_files(&settings(Some("/given/ca.crt"), None, None), env).unwrap();
        assert_eq!(files.root, Some(PathBuf::from("/given/ca.crt")));
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let none = |_: &str| None;
        let error = collector_files(&settings(None, Some("/tls.crt"), None), none).unwrap_err();
        assert!(error.contains("needs its key"), "{error}");
        let files = collector_files(&settings(None, None, None), none).unwrap();
        assert_eq!(files, CollectorTlsFiles::default());
    }
}
