//! Kubernetes identities (`server.identity`): the APIs it names are served only to callers that
//! send an audience-bound ServiceAccount token (`Authorization: Bearer <token>`, on gRPC the
//! `authorization` metadata), and, where it asks, that may use a verb on the InferenceService.
//!
//! A token is checked by the sidecar itself against the cluster's issuer keys ([`keys`],
//! [`jwt`]), or by the API server (a TokenReview); the permission by a LocalSubjectAccessReview
//! ([`review`]). Both answers are remembered for `cache_seconds` (a token never past its own
//! expiry), so a caller's calls after its first cost a hash and a map lookup.
//!
//! A refusal tells the caller nothing of why: 401 / `UNAUTHENTICATED` for a missing, malformed,
//! expired, foreign or wrongly bound token alike, 403 / `PERMISSION_DENIED` for a caller
//! without the verb. The reason goes to the log, never the token.

mod cache;
pub mod jwt;
mod keys;
pub mod review;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use infergate_config::{
    IdentityAuthorization, IdentitySettings, RestrictedCategory, TokenVerification,
};

use cache::Cache;
use keys::IssuerKeys;
pub use review::User;

/// How a caller is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one that does not prove an identity for this service.
    Unauthenticated,
    /// An identity without the permission asked for.
    Forbidden,
    /// Identities cannot be checked now (the API server cannot be reached, and nothing is
    /// remembered for this token).
    Unavailable,
}

impl Refusal {
    /// The words a caller is given.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Unauthenticated => {
                "This API requires a Kubernetes identity: a ServiceAccount token for this \
                 service's audience (Authorization: Bearer <token>)"
            }
            Refusal::Forbidden => "This API is not permitted to the caller's identity",
            Refusal::Unavailable => "The caller's identity cannot be checked now",
        }
    }
}

/// A caller refused, and who it proved to be, if anyone (for the audit line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub refusal: Refusal,
    pub user: Option<User>,
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Denied {
        Denied {
            refusal,
            user: None,
        }
    }
}

/// Checks callers' identities for the APIs it guards.
pub struct Authenticator {
    guarded: [bool; RestrictedCategory::ALL.len()],
    audience: String,
    verify: TokenVerification,
    /// The API server's client and the issuer's keys, made at first use ([`Authenticator::api`]).
    api: tokio::sync::OnceCell<Api>,
    authorize: Option<IdentityAuthorization>,
    cache_for: Duration,
    /// Verified tokens (by their SHA-256) to their user, until the token expires or
    /// `cache_for` passes, whichever is sooner.
    tokens: Cache<[u8; 32], User>,
    /// Users and verbs to whether the permission is theirs.
    permissions: Cache<(String, String), bool>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("guarded", &self.guarded)
            .field("audience", &self.audience)
            .field("authorize", &self.authorize)
            .finish()
    }
}

/// The API server's client, and the issuer's keys where the sidecar checks tokens itself.
struct Api {
    client: kube::Client,
    issuer: Option<IssuerKeys>,
}

impl Authenticator {
    /// The checks `settings` ask for. The API server is reached with the pod's ServiceAccount
    /// (elsewhere `KUBECONFIG`'s), from the first check on ([`Authenticator::warm_up`]).
    pub fn new(settings: &IdentitySettings) -> Result<Authenticator, String> {
        let mut guarded = [false; RestrictedCategory::ALL.len()];
        for category in settings.categories()? {
            guarded[category as usize] = true;
        }
        Ok(Authenticator {
            guarded,
            audience: settings.audience.clone(),
            verify: settings.verify,
            api: tokio::sync::OnceCell::new(),
            authorize: settings.authorize.clone(),
            cache_for: Duration::from_secs(settings.cache_seconds),
            tokens: Cache::default(),
            permissions: Cache::default(),
        })
    }

    /// Reaches the API server (and reads the issuer's keys) before the first call needs them,
    /// saying in the log whether it could.
    pub async fn warm_up(&self) {
        let ready = match self.api().await {
            Ok(Api {
                issuer: Some(issuer),
                ..
            }) => issuer.get().await.map(|_| ()),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = ready {
            tracing::error!(error = %e, "identity: the API server cannot be used yet; calls that need an identity are refused as unavailable until it can");
        }
    }

    async fn api(&self) -> Result<&Api, String> {
        self.api
            .get_or_try_init(|| async {
                let client = kube::Client::try_default()
                    .await
                    .map_err(|e| format!("no client of the API server: {e}"))?;
                let issuer = match self.verify {
                    TokenVerification::Jwks => Some(IssuerKeys::new(client.clone())),
                    TokenVerification::TokenReview => None,
                };
                Ok(Api { client, issuer })
            })
            .await
    }

    /// Whether calls of `category` need an identity.
    pub fn guards(&self, category: RestrictedCategory) -> bool {
        self.guarded[category as usize]
    }

    /// The caller, if the request's token proves an identity that may make a call of
    /// `category`; else the refusal.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        category: RestrictedCategory,
    ) -> Result<User, Denied> {
        let Some(token) = bearer(headers) else {
            return Err(Refusal::Unauthenticated.into());
        };
        let user = self.authenticate(token).await?;
        if let Some(rule) = &self.authorize {
            let verb = rule.verb_for(category);
            let key = (user.name.clone(), verb.to_string());
            let allowed = match self.permissions.get(&key) {
                Some(allowed) => allowed,
                None => {
                    let client = &self.api().await.map_err(unavailable)?.client;
                    let allowed = review::may(client, rule, verb, &user).await.map_err(|e| {
                        tracing::warn!(error = %e, user = %user.name, "identity: the permission could not be asked");
                        Refusal::Unavailable
                    })?;
                    self.permissions.put(key, allowed, self.cache_for);
                    allowed
                }
            };
            if !allowed {
                tracing::debug!(user = %user.name, verb = %verb, "identity: permission refused");
                return Err(Denied {
                    refusal: Refusal::Forbidden,
                    user: Some(user),
                });
            }
        }
        Ok(user)
    }

    async fn authenticate(&self, token: &str) -> Result<User, Refusal> {
        if token.len() > jwt::MAX_TOKEN_BYTES {
            return Err(Refusal::Unauthenticated);
        }
        let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .map_err(|_| Refusal::Unauthenticated)?;
        if let Some(user) = self.tokens.get(&digest) {
            return Ok(user);
        }
        let api = self.api().await.map_err(unavailable)?;
        let (user, expires) = match &api.issuer {
            Some(issuer) => self.verify_here(issuer, token).await?,
            None => {
                let user = review::token_review(&api.client, token, &self.audience)
                    .await
                    .map_err(|e| {
                        tracing::warn!(error = %e, "identity: the token could not be reviewed");
                        Refusal::Unavailable
                    })?
                    .ok_or_else(|| {
                        tracing::debug!("identity: token refused by the TokenReview");
                        Refusal::Unauthenticated
                    })?;
                (user, None)
            }
        };
        let keep = match expires {
            Some(exp) => self.cache_for.min(Duration::from_secs(
                u64::try_from(exp.saturating_sub(now())).unwrap_or(0),
            )),
            None => self.cache_for,
        };
        self.tokens.put(digest, user.clone(), keep);
        Ok(user)
    }

    /// The user and the token's expiry, checked against the issuer's keys (read again once if
    /// the token names a key they lack).
    async fn verify_here(
        &self,
        keys: &IssuerKeys,
        token: &str,
    ) -> Result<(User, Option<i64>), Refusal> {
        let unavailable = |e: String| {
            tracing::warn!(error = %e, "identity: the issuer's keys could not be read");
            Refusal::Unavailable
        };
        let issuer = keys.get().await.map_err(unavailable)?;
        let mut verified = jwt::verify(token, &issuer.keys, &issuer.name, &self.audience, now());
        if verified == Err(jwt::TokenError::UnknownKey) {
            let issuer = keys.reread_for_unknown_key().await.map_err(unavailable)?;
            verified = jwt::verify(token, &issuer.keys, &issuer.name, &self.audience, now());
        }
        match verified {
            Ok(claims) => Ok((User::of_service_account(&claims.sub), Some(claims.exp))),
            Err(e) => {
                tracing::debug!(reason = %e, "identity: token refused");
                Err(Refusal::Unauthenticated)
            }
        }
    }
}

fn unavailable(e: String) -> Refusal {
    tracing::warn!(error = %e, "identity: the API server cannot be used");
    Refusal::Unavailable
}

/// The bearer token of `Authorization` (the scheme's name in any case), if there is one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Shared by the two ports.
pub type SharedAuthenticator = Arc<Authenticator>;

#[cfg(test)]
mod tests {
    use super::bearer;
    use http::HeaderMap;

    #[test]
    fn the_token_is_read_from_a_bearer_authorization_only() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", value.parse().unwrap());
            headers
        };
        assert_eq!(bearer(&with("Bearer abc.def.ghi")), Some("abc.def.ghi"));
        assert_eq!(bearer(&with("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
