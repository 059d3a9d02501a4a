//! The cluster's service-account issuer and its signing keys, read from the API server's OIDC
//! discovery (`/.well-known/openid-configuration`, `/openid/v1/jwks`). Kubernetes lets every
//! ServiceAccount read them (the `system:service-account-issuer-discovery` role), so the
//! sidecar needs no cluster-wide permission to check tokens.
//!
//! The keys are read when first needed, again every [`REFRESH`], and again when a token names a
//! key they lack (a rotated signing key), at most once every [`UNKNOWN_KEY_RETRY`], so that
//! made-up key ids cannot make the sidecar call the API server for each request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::Deserialize;

use super::jwt::KeySet;

/// How long keys read are used before they are read again.
const REFRESH: Duration = Duration::from_secs(600);
/// The least time between two reads asked for by a key the set lacks.
const UNKNOWN_KEY_RETRY: Duration = Duration::from_secs(30);

/// The issuer's name and keys, as read at `read_at`.
#[derive(Debug)]
pub struct Issuer {
    pub name: String,
    pub keys: KeySet,
    read_at: Instant,
}

/// The issuer, read from the API server and kept.
pub struct IssuerKeys {
    client: kube::Client,
    current: RwLock<Option<Arc<Issuer>>>,
    /// One read at a time; the others wait for it and take what it read.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
}

impl IssuerKeys {
    pub fn new(client: kube::Client) -> IssuerKeys {
        IssuerKeys {
            client,
            current: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The issuer, read first if never read or read too long ago.
    pub async fn get(&self) -> Result<Arc<Issuer>, String> {
        if let Some(issuer) = self.fresh(REFRESH) {
            return Ok(issuer);
        }
        self.read(REFRESH).await
    }

    /// The issuer read again because a token names a key it lacks, unless it was read less
    /// than [`UNKNOWN_KEY_RETRY`] ago.
    pub async fn reread_for_unknown_key(&self) -> Result<Arc<Issuer>, String> {
        self.read(UNKNOWN_KEY_RETRY).await
    }

    fn fresh(&self, within: Duration) -> Option<Arc<Issuer>> {
        self.current
            .read()
            .as_ref()
            .filter(|issuer| issuer.read_at.elapsed() < within)
            .cloned()
    }

    async fn read(&self, unless_within: Duration) -> Result<Arc<Issuer>, String> {
        let _one_at_a_time = self.reading.lock().await;
        if let Some(issuer) = self.fresh(unless_within) {
            return Ok(issuer); // another caller read it meanwhile
        }
        match self.fetch().await {
            Ok(issuer) => {
                tracing::info!(issuer = %issuer.name, keys = issuer.keys.len(), "service-account issuer keys read");
                let issuer = Arc::new(issuer);
                *self.current.write() = Some(issuer.clone());
                Ok(issuer)
            }
            // Keys read before stay in use while the API server cannot be reached.
            Err(e) => match self.current.read().clone() {
                Some(issuer) => {
                    tracing::warn!(error = %e, "service-account issuer keys could not be read again; the keys read before stay in use");
                    Ok(issuer)
                }
                None => Err(e),
            },
        }
    }

    async fn fetch(&self) -> Result<Issuer, String> {
        let discovery = self.get_bytes("/.well-known/openid-configuration").await?;
        let discovery: Discovery = serde_json::from_slice(&discovery)
            .map_err(|e| format!("the API server's OIDC discovery does not read: {e}"))?;
        let keys = KeySet::parse(&self.get_bytes("/openid/v1/jwks").await?)?;
        if keys.is_empty() {
            return Err("the service-account issuer lists no RS256 or ES256 key".to_string());
        }
        Ok(Issuer {
            name: discovery.issuer,
            keys,
            read_at: Instant::now(),
        })
    }

    async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, String> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| format!("{path}: {e}"))?;
        self.client
            .request_text(request)
            .await
            .map(String::into_bytes)
            .map_err(|e| format!("GET {path} from the API server: {e}"))
    }
}
