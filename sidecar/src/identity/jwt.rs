//! A ServiceAccount token as the API server signs it: a compact JWS, RS256 or ES256 (the
//! algorithm follows the cluster's signing key), whose claims name the issuer, the audiences,
//! the expiry and the subject (`system:serviceaccount:<namespace>:<name>`). Verified here
//! against the issuer's keys (a JWK set) with ring, the sidecar's crypto provider.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents, UnparsedPublicKey,
};
use serde::Deserialize;

/// Longest token looked at: a ServiceAccount token is about a kilobyte.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// How far the clocks of the API server and of this node may disagree.
const CLOCK_SKEW_SECONDS: i64 = 30;

/// Why a token is not taken. For the log only: a caller is told none of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a signed token")]
    Malformed,
    #[error("signed with {0}, which is not RS256 or ES256")]
    Algorithm(String),
    #[error("signed by a key the issuer does not list")]
    UnknownKey,
    #[error("the signature does not verify")]
    Signature,
    #[error("issued by '{0}', not the cluster's issuer")]
    Issuer(String),
    #[error("not bound to this service's audience")]
    Audience,
    #[error("expired")]
    Expired,
    #[error("not valid yet")]
    NotYetValid,
}

/// What a verified token says.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    #[serde(deserialize_with = "one_or_many")]
    pub aud: Vec<String>,
    pub exp: i64,
    #[serde(default)]
    pub nbf: Option<i64>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// The issuer's public keys (its `jwks_uri` document).
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

#[derive(Clone, Debug)]
struct Key {
    kid: Option<String>,
    public: Public,
}

#[derive(Clone, Debug)]
enum Public {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed point, `04 || x || y`.
    EcP256(Vec<u8>),
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

impl KeySet {
    /// A JWK set; keys of kinds it cannot use (other curves, symmetric keys) are left out.
    pub fn parse(json: &[u8]) -> Result<KeySet, String> {
        let jwks: Jwks = serde_json::from_slice(json).map_err(|e| format!("not a JWK set: {e}"))?;
        let decode = |field: &Option<String>| field.as_deref().and_then(|v| b64(v).ok());
        let keys = jwks
            .keys
            .into_iter()
            .filter_map(|jwk| {
                let public = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
                    ("RSA", _) => Public::Rsa {
                        n: decode(&jwk.n)?,
                        e: decode(&jwk.e)?,
                    },
                    ("EC", Some("P-256")) => {
                        let (x, y) = (decode(&jwk.x)?, decode(&jwk.y)?);
                        if x.len() != 32 || y.len() != 32 {
                            return None;
                        }
                        Public::EcP256([&[4u8][..], &x, &y].concat())
                    }
                    _ => return None,
                };
                Some(Key {
                    kid: jwk.kid,
                    public,
                })
            })
            .collect();
        Ok(KeySet { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn b64(text: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| TokenError::Malformed)
}

/// The claims of `token` if it is signed by one of `keys`, issued by `issuer`, bound to
/// `audience` and valid at `now` (seconds since the epoch).
pub fn verify(
    token: &str,
    keys: &KeySet,
    issuer: &str,
    audience: &str,
    now: i64,
) -> Result<Claims, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let head: Header = serde_json::from_slice(&b64(header)?).map_err(|_| TokenError::Malformed)?;
    let signature = b64(signature)?;
    let signed = &token.as_bytes()[..header.len() + 1 + payload.len()];
    let candidates = keys
        .keys
        .iter()
        .filter(|k| head.kid.is_none() || k.kid == head.kid);
    let mut known = false;
    let mut verified = false;
    for key in candidates {
        let ok = match (head.alg.as_str(), &key.public) {
            ("RS256", Public::Rsa { n, e }) => RsaPublicKeyComponents { n, e }
                .verify(&RSA_PKCS1_2048_8192_SHA256, signed, &signature)
                .is_ok(),
            ("ES256", Public::EcP256(point)) => {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed, &signature)
                    .is_ok()
            }
            ("RS256" | "ES256", _) => continue,
            (other, _) => return Err(TokenError::Algorithm(other.to_string())),
        };
        known = true;
        if ok {
            verified = true;
            break;
        }
    }
    if !verified {
        return Err(if known {
            TokenError::Signature
        } else if matches!(head.alg.as_str(), "RS256" | "ES256") {
            TokenError::UnknownKey
        } else {
            TokenError::Algorithm(head.alg)
        });
    }
    // Only a token whose signature verified is read further.
    let claims: Claims =
        serde_json::from_slice(&b64(payload)?).map_err(|_| TokenError::Malformed)?;
    if claims.iss != issuer {
        return Err(TokenError::Issuer(claims.iss));
    }
    if !claims.aud.iter().any(|a| a == audience) {
        return Err(TokenError::Audience);
    }
    if now > claims.exp.saturating_add(CLOCK_SKEW_SECONDS) {
        return Err(TokenError::Expired);
    }
    if claims
        .nbf
        .is_some_and(|nbf| now < nbf.saturating_sub(CLOCK_SKEW_SECONDS))
    {
        return Err(TokenError::NotYetValid);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests;
