//! Who may do what on the admin port. The port is not in the client Service, but any pod that
//! reaches the pod's address reaches it, so each of its endpoints has its own rule:
//!
//! | endpoint | who | why |
//! |---|---|---|
//! | `/livez`, `/readyz`, `/upstream/livez` | anyone, in plain HTTP | the kubelet's probes (of the sidecar, and of a model server on loopback) carry no credential; they say nothing but live or ready |
//! | `/drain` | loopback only | only the pod's own preStop hook (`infergate-drain`, an `exec` in the pod) may take it out of service |
//! | `/status` | loopback, a TLS client certificate of `server.status_client_ca`, or a bearer token whose SHA-256 is in `server.status_token_sha256` | the operator reads it from outside the pod; it names the upstream, its models and the GPU |
//!
//! The client certificate is what the chart's operator presents (the port offers TLS where
//! `server.status_client_ca` is set: `crate::tls::AdminTls`); the token serves installs without
//! a CA, and travels in clear unless the caller speaks TLS to the port.
//!
//! Every call to `/drain` and `/status` writes an audit line (target `audit`): the caller's
//! address, the credential it used (`loopback`, `client certificate`, `status token`, or none),
//! and the verdict. The token itself is never logged, and a refusal never says whether a
//! credential was wrong or missing.

use axum::http::{HeaderMap, StatusCode, header};
use ring::digest::{SHA256, digest};

use crate::caller::Caller;
use crate::restricted::same_secret;

/// The admin port's rules, from the configuration.
#[derive(Clone, Debug, Default)]
pub struct AdminRules {
    /// SHA-256 digests of the tokens that may read `/status` from outside the pod.
    status_tokens: Vec<[u8; 32]>,
    /// Whether the admin port takes client certificates for `/status` (a CA is configured).
    client_certificates: bool,
    /// The longest wait one `/drain` may ask for, each of its two.
    pub max_drain_seconds: u64,
}

/// Why the admin port refused a call.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Only a container of the pod may call this; the message says so.
    NotLocal(&'static str),
    /// Outside the pod, this needs a valid credential.
    Unauthenticated,
}

impl Refusal {
    /// The answer's status: 403 for a caller off loopback, 401 for a missing or wrong credential.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NotLocal(_) => StatusCode::FORBIDDEN,
            Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }

    /// The answer's message: the same for a missing credential as for a wrong one.
    pub fn message(&self) -> &'static str {
        match self {
            Refusal::NotLocal(why) => why,
            Refusal::Unauthenticated => "a valid client certificate or bearer token is required",
        }
    }

    /// The `WWW-Authenticate` challenge a 401 carries.
    pub fn challenge(&self) -> Option<&'static str> {
        matches!(self, Refusal::Unauthenticated).then_some("Bearer realm=\"infergate-admin\"")
    }
}

impl AdminRules {
    /// From `server.status_token_sha256` (validated: 64 hex digits each) and
    /// `server.max_drain_seconds`.
    pub fn new(status_token_sha256: &[String], max_drain_seconds: u64) -> Self {
        AdminRules {
            status_tokens: status_token_sha256
                .iter()
                .filter_map(|hex| decode_digest(hex))
                .collect(),
            client_certificates: false,
            max_drain_seconds,
        }
    }

    /// The same rules, where the admin port takes client certificates (`server.status_client_ca`).
    pub fn with_client_certificates(self, taken: bool) -> Self {
        AdminRules {
            client_certificates: taken,
            ..self
        }
    }

    /// `/drain`: loopback only.
    pub fn may_drain(&self, caller: Option<Caller>) -> Result<(), Refusal> {
        let verdict = if crate::caller::is_local(caller) {
            Ok(())
        } else {
            Err(Refusal::NotLocal(
                "/drain is accepted only from inside the pod (loopback)",
            ))
        };
        audit("drain", caller, "loopback", &verdict);
        verdict
    }

    /// `/status`: loopback, a client certificate the admin port verified (`certified`: the port
    /// verifies against `server.status_client_ca` only), or a bearer token the configuration
    /// lists by its digest.
    pub fn may_read_status(
        &self,
        caller: Option<Caller>,
        certified: bool,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let (credential, verdict) = if crate::caller::is_local(caller) {
            ("loopback", Ok(()))
        } else if certified {
            ("client certificate", Ok(()))
        } else if self.status_tokens.is_empty() && !self.client_certificates {
            (
                "none",
                Err(Refusal::NotLocal(
                    "/status is served only inside the pod (loopback): no status credential is configured",
                )),
            )
        } else {
            match bearer(headers) {
                Some(token) if self.knows(token) => ("status token", Ok(())),
                Some(_) => ("status token", Err(Refusal::Unauthenticated)),
                None => ("none", Err(Refusal::Unauthenticated)),
            }
        };
        audit("status", caller, credential, &verdict);
        verdict
    }

    /// Whether `token`'s digest is listed, comparing with every digest in constant time.
    fn knows(&self, token: &[u8]) -> bool {
        let given = digest(&SHA256, token);
        self.status_tokens
            .iter()
            .fold(false, |known, d| known | same_secret(given.as_ref(), d))
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

fn audit(action: &str, caller: Option<Caller>, credential: &str, verdict: &Result<(), Refusal>) {
    let caller = caller.map_or_else(|| "unknown".to_string(), |c| c.shown());
    match verdict {
        Ok(()) => {
            tracing::info!(target: "audit", api = "admin", action, %caller, credential, allowed = true, "admin call")
        }
        Err(_) => {
            tracing::warn!(target: "audit", api = "admin", action, %caller, credential, allowed = false, "admin call refused")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn caller(addr: &str) -> Option<Caller> {
        Some(Caller(addr.parse().unwrap()))
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn rules_for(tokens: &[&str]) -> AdminRules {
        let digests: Vec<String> = tokens
            .iter()
            .map(|t| hex(digest(&SHA256, t.as_bytes()).as_ref()))
            .collect();
        AdminRules::new(&digests, 300)
    }

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn drain_is_for_loopback_only() {
        let rules = AdminRules::default();
        assert_eq!(rules.may_drain(caller("127.0.0.1:4000")), Ok(()));
        assert_eq!(rules.may_drain(caller("[::1]:4000")), Ok(()));
        assert_eq!(rules.may_drain(caller("[::ffff:127.0.0.1]:4000")), Ok(()));
        assert!(rules.may_drain(caller("10.0.0.7:4000")).is_err());
        assert!(rules.may_drain(None).is_err());
    }

    #[test]
    fn status_without_tokens_is_for_loopback_only() {
        let rules = AdminRules::default();
        assert_eq!(
            rules.may_read_status(caller("127.0.0.1:1"), false, &HeaderMap::new()),
            Ok(())
        );
        let refused =
            rules.may_read_status(caller("10.0.0.7:1"), false, &with_auth("Bearer anything"));
        assert!(matches!(refused, Err(Refusal::NotLocal(_))));
    }

    #[test]
    fn status_takes_a_listed_token_from_outside() {
        let rules = rules_for(&["old-token", "new-token"]);
        let remote = caller("10.0.0.7:1");
        assert_eq!(
            rules.may_read_status(remote, false, &with_auth("Bearer new-token")),
            Ok(())
        );
        assert_eq!(
            rules.may_read_status(remote, false, &with_auth("bearer old-token")),
            Ok(())
        );
        for refused in ["Bearer new-toke", "Bearer ", "Basic new-token", "new-token"] {
            assert_eq!(
                rules.may_read_status(remote, false, &with_auth(refused)),
                Err(Refusal::Unauthenticated),
                "{refused}"
            );
        }
        assert_eq!(
            rules.may_read_status(remote, false, &HeaderMap::new()),
            Err(Refusal::Unauthenticated)
        );
    }

    #[test]
    fn status_takes_a_verified_client_certificate_from_outside() {
        let rules = AdminRules::default().with_client_certificates(true);
        let remote = caller("10.0.0.7:1");
        assert_eq!(
            rules.may_read_status(remote, true, &HeaderMap::new()),
            Ok(())
        );
        // No certificate: a credential is asked for (401), not "loopback only" (403).
        assert_eq!(
            rules.may_read_status(remote, false, &HeaderMap::new()),
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            rules.may_read_status(remote, false, &with_auth("Bearer not-configured")),
            Err(Refusal::Unauthenticated)
        );
    }

    #[test]
    fn digests_are_read_as_hex() {
        let d = hex(digest(&SHA256, b"t").as_ref());
        assert_eq!(decode_digest(&d).map(|b| hex(&b)), Some(d.clone()));
        assert_eq!(decode_digest(&d.to_uppercase()).map(|b| hex(&b)), Some(d));
        assert_eq!(decode_digest("zz"), None);
    }
}
