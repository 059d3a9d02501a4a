use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use super::*;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const AUDIENCE: &str = "infergate.dev/models/fraud";
const NOW: i64 = 1_800_000_000;

struct Signer {
    pair: EcdsaKeyPair,
    kid: &'static str,
}

impl Signer {
    fn new(kid: &'static str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer { pair, kid }
    }

    fn jwk(&self) -> serde_json::Value {
        let point = self.pair.public_key().as_ref();
        serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    fn token(&self, alg: &str, claims: serde_json::Value) -> String {
        let header = serde_json::json!({"alg": alg, "kid": self.kid});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

fn claims() -> serde_json::Value {
    serde_json::json!({
        "iss": ISSUER, "sub": "system:serviceaccount:apps:checkout",
        "aud": [AUDIENCE], "exp": NOW + 600, "nbf": NOW - 10, "iat": NOW - 10,
    })
}

fn keys(signers: &[&Signer]) -> KeySet {
    let jwks = serde_json::json!({
        "keys": signers.iter().map(|s| s.jwk()).chain([
            // Kinds it cannot use are left out, not refused.
            serde_json::json!({"kty": "oct", "k": "c2VjcmV0"}),
            serde_json::json!({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}),
        ]).collect::<Vec<_>>()
    });
    KeySet::parse(jwks.to_string().as_bytes()).unwrap()
}

#[test]
fn a_token_signed_by_a_listed_key_for_this_audience_is_taken() {
    let signer = Signer::new("one");
    let other = Signer::new("two");
    let set = keys(&[&other, &signer]);
    assert_eq!(set.len(), 2);
    let got = verify(
        &signer.token("ES256", claims()),
        &set,
        ISSUER,
        AUDIENCE,
        NOW,
    )
    .unwrap();
    assert_eq!(got.sub, "system:serviceaccount:apps:checkout");
    // `aud` as a single string, as some issuers write it.
    let mut one = claims();
    one["aud"] = serde_json::json!(AUDIENCE);
    verify(&signer.token("ES256", one), &set, ISSUER, AUDIENCE, NOW).unwrap();
}

#[test]
fn each_reason_to_refuse_is_told_apart_for_the_log() {
    let signer = Signer::new("one");
    let set = keys(&[&signer]);
    let with = |field: &str, value: serde_json::Value| {
        let mut c = claims();
        c[field] = value;
        signer.token("ES256", c)
    };
    let check = |token: &str| verify(token, &set, ISSUER, AUDIENCE, NOW);
    assert_eq!(
        check(&with(
            "aud",
            serde_json::json!(["https://kubernetes.default.svc"])
        )),
        Err(TokenError::Audience)
    );
    assert_eq!(
        check(&with("iss", serde_json::json!("https://elsewhere"))),
        Err(TokenError::Issuer("https://elsewhere".into()))
    );
    assert_eq!(
        check(&with("exp", serde_json::json!(NOW - 31))),
        Err(TokenError::Expired)
    );
    assert!(check(&with("exp", serde_json::json!(NOW - 29))).is_ok());
    assert_eq!(
        check(&with("nbf", serde_json::json!(NOW + 31))),
        Err(TokenError::NotYetValid)
    );
    // Signed by a key the issuer does not list, under a listed key's id, and under another.
    let stranger = Signer::new("one");
    assert_eq!(
        check(&stranger.token("ES256", claims())),
        Err(TokenError::Signature)
    );
    let unlisted = Signer::new("three");
    assert_eq!(
        check(&unlisted.token("ES256", claims())),
        Err(TokenError::UnknownKey)
    );
    // The claims changed after signing.
    let token = signer.token("ES256", claims());
    let parts: Vec<&str> = token.split('.').collect();
    let mut forged = claims();
    forged["sub"] = serde_json::json!("system:serviceaccount:kube-system:admin");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(forged.to_string()),
        parts[2]
    );
    assert_eq!(check(&forged), Err(TokenError::Signature));
    // An unsigned token, and one for a symmetric algorithm.
    assert_eq!(
        check(&signer.token("none", claims())),
        Err(TokenError::Algorithm("none".into()))
    );
    assert_eq!(
        check(&signer.token("HS256", claims())),
        Err(TokenError::Algorithm("HS256".into()))
    );
    for garbage in [
        "",
        "a.b",
        "a.b.c.d",
        "!!.??.##",
        &"x".repeat(MAX_TOKEN_BYTES + 1),
    ] {
        assert_eq!(check(garbage), Err(TokenError::Malformed), "{garbage:.20}");
    }
}
