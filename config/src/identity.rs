//! `server.identity`: APIs served only to callers that prove a Kubernetes identity, with an
//! audience-bound ServiceAccount token (`Authorization: Bearer <token>`), and, where asked, the
//! permission to call them, as a LocalSubjectAccessReview on the InferenceService says.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::RestrictedCategory;

/// Who may call which APIs with a Kubernetes identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySettings {
    /// The APIs (restricted-API category names; entries may be comma-separated lists) served only
    /// to callers with a valid token. An API cannot also have a restricted-API key.
    pub apis: Vec<String>,
    /// The audience a token must be bound to (`kubectl create token SA --audience=...`, a
    /// projected token's `audience`): a token made for the API server, or for another service,
    /// is refused.
    pub audience: String,
    /// How a token is checked.
    #[serde(default)]
    pub verify: TokenVerification,
    /// Where set, an authenticated caller must also be allowed `verb` on the InferenceService,
    /// as a LocalSubjectAccessReview in its namespace answers: a Role grants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorize: Option<IdentityAuthorization>,
    /// How long a verified token, and an authorization's answer, are remembered, in seconds (a
    /// token never past its own expiry).
    #[serde(default = "default_cache_seconds")]
    pub cache_seconds: u64,
}

fn default_cache_seconds() -> u64 {
    60
}

/// How a token is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenVerification {
    /// By the sidecar itself: the signature against the cluster's service-account issuer keys
    /// (the API server's OIDC discovery, which every ServiceAccount may read), the issuer, the
    /// audience and the expiry. Needs no cluster-wide permission.
    #[default]
    Jwks,
    /// By the API server (a TokenReview), which also refuses tokens of deleted pods and
    /// ServiceAccounts; needs `create` on `tokenreviews` (a ClusterRole).
    TokenReview,
}

/// The permission an authenticated caller must have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityAuthorization {
    /// The InferenceService's namespace (where the review is made) and name.
    pub namespace: String,
    pub name: String,
    /// The verb asked, a custom one such as `infer`.
    pub verb: String,
    /// Another verb for some of the APIs, by category name (e.g. `model-repository: control`),
    /// so that one Role may grant inference and another the control APIs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verbs: BTreeMap<String, String>,
    #[serde(default = "default_group")]
    pub group: String,
    #[serde(default = "default_resource")]
    pub resource: String,
}

fn default_group() -> String {
    "infergate.dev".to_string()
}

fn default_resource() -> String {
    "inferenceservices".to_string()
}

impl IdentityAuthorization {
    /// The verb asked for calls of `category`.
    pub fn verb_for(&self, category: RestrictedCategory) -> &str {
        self.verbs
            .get(category.as_str())
            .map_or(self.verb.as_str(), String::as_str)
    }
}

impl IdentitySettings {
    /// The parsed `apis`.
    pub fn categories(&self) -> Result<Vec<RestrictedCategory>, String> {
        crate::restricted::categories(&self.apis)
    }

    /// What is wrong with the settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        let categories = self.categories()?;
        if categories.is_empty() {
            return Err("names no API".to_string());
        }
        if self.audience.trim().is_empty() {
            return Err("the audience must not be empty".to_string());
        }
        if self.cache_seconds > 3600 {
            return Err(format!(
                "cache_seconds {} is more than an hour: a revoked permission would hold that long",
                self.cache_seconds
            ));
        }
        if let Some(a) = &self.authorize
            && [&a.namespace, &a.name, &a.verb, &a.resource]
                .iter()
                .any(|v| v.trim().is_empty())
        {
            return Err("authorize needs a namespace, a name, a verb and a resource".to_string());
        }
        if let Some(a) = &self.authorize {
            for (api, verb) in &a.verbs {
                let category = crate::restricted::categories(std::slice::from_ref(api))?;
                if category.len() != 1 || !categories.contains(&category[0]) {
                    return Err(format!(
                        "authorize.verbs names {api}, which is not one of the APIs it guards"
                    ));
                }
                if verb.trim().is_empty() {
                    return Err(format!("authorize.verbs gives {api} an empty verb"));
                }
            }
        }
        Ok(())
    }
}
