//! The operator's status token: what it presents (`Authorization: Bearer …`) to read each
//! sidecar's `/status` from outside the pod. The sidecars are given only its SHA-256 digest, in
//! their configuration (`server.status_token_sha256`), so no pod, ConfigMap or pod spec holds the
//! credential, and the operator needs no access to Secrets in users' namespaces. The chart makes
//! the token, keeps it in a Secret of the operator's own namespace and mounts it as a file.

use std::path::Path;

use ring::digest::{SHA256, digest};

/// Fewest characters a token file may hold: 128 bits of randomness as hex or base64 is more.
const MIN_TOKEN_CHARS: usize = 24;

/// A status token, read from a file.
#[derive(Clone)]
pub struct StatusToken {
    token: String,
}

// Never print the token, not even in debug output.
impl std::fmt::Debug for StatusToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusToken")
            .field("sha256", &self.sha256_hex())
            .finish()
    }
}

impl StatusToken {
    /// Reads the token from `path`: its contents, without surrounding whitespace.
    pub fn read(path: &Path) -> Result<StatusToken, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("status token file {}: {e}", path.display()))?;
        StatusToken::new(text.trim())
            .map_err(|e| format!("status token file {}: {e}", path.display()))
    }

    pub fn new(token: &str) -> Result<StatusToken, String> {
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "a token needs at least {MIN_TOKEN_CHARS} characters"
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token is printable ASCII without spaces".to_string());
        }
        Ok(StatusToken {
            token: token.to_string(),
        })
    }

    /// The digest the sidecars are configured with, in hex.
    pub fn sha256_hex(&self) -> String {
        digest(&SHA256, self.token.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The `Authorization` header's value.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_in_hex() {
        let token = StatusToken::new("abcdefghijklmnopqrstuvwxyz").unwrap();
        // sha256("abcdefghijklmnopqrstuvwxyz")
        assert_eq!(
            token.sha256_hex(),
            "71c480df93d6ae2f1efad1447c66c9525e316218cf51fc8d9ed832f2daf18b73"
        );
        assert_eq!(token.authorization(), "Bearer abcdefghijklmnopqrstuvwxyz");
        assert!(!format!("{token:?}").contains("abcdefghij"));
    }

    #[test]
    fn short_or_spaced_tokens_are_refused() {
        assert!(StatusToken::new("short").is_err());
        assert!(StatusToken::new("a token with spaces in it ok").is_err());
    }
}
