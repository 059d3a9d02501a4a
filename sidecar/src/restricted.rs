//! Restricted categories of one port, as Triton's `--http-restricted-api` and
//! `--grpc-restricted-protocol` set them: a request to a restricted category is served only when
//! it carries the category's header (gRPC: metadata key) with exactly its value. Which category
//! a request belongs to is the port's business (`http/restricted.rs`, `grpc/restricted.rs`).
//!
//! A key may also be read from a file (`--http-restricted-api-file`), such as a mounted Secret:
//! [`Guard::reload`] reads such files again, and a changed key takes effect for the next request.

use std::path::PathBuf;

use http::{HeaderMap, HeaderName};
use infergate_config::{KeySource, RestrictedCategory, Restrictions};
use parking_lot::RwLock;

use crate::caller::Caller;

/// Largest key file read: a key is a line, and anything larger is a mistake (a wrong path).
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// The restrictions of a port, with the refusal each one answers.
#[derive(Debug, Default)]
pub struct Guard {
    /// Indexed by category, in `RestrictedCategory::ALL`'s order.
    rules: [Option<Rule>; RestrictedCategory::ALL.len()],
    /// Categories served only to callers in the pod (on loopback), with the refusal, by the
    /// same index (`server.pod_only_api`).
    pod_only: [Option<String>; RestrictedCategory::ALL.len()],
}

#[derive(Debug)]
struct Rule {
    header: HeaderName,
    key: Key,
    refusal: String,
}

/// A rule's key: fixed, or the content of a file as last read.
#[derive(Debug)]
enum Key {
    Fixed(String),
    File {
        path: PathBuf,
        value: RwLock<String>,
    },
}

impl Guard {
    /// The REST port's: refusals read `This API is restricted, expecting header '<key>'`.
    pub fn http(restrictions: &Restrictions) -> Result<Self, String> {
        Guard::new(restrictions, "This API is restricted")
    }

    /// The gRPC port's: refusals read `This protocol is restricted, expecting header '<key>'`,
    /// the key with its `triton-grpc-protocol-` prefix.
    pub fn grpc(restrictions: &Restrictions) -> Result<Self, String> {
        Guard::new(restrictions, "This protocol is restricted")
    }

    /// The same guard, serving `categories` only to callers in the pod (on loopback): others are
    /// refused with `This API is restricted to clients in the server's pod` (`protocol` on
    /// gRPC), Triton's words for a restriction, whatever key they carry.
    pub fn pod_only(mut self, categories: &[RestrictedCategory], grpc: bool) -> Self {
        let what = if grpc { "protocol" } else { "API" };
        for category in categories {
            self.pod_only[*category as usize] = Some(format!(
                "This {what} is restricted to clients in the server's pod (server.pod_only_api)"
            ));
        }
        self
    }

    fn new(restrictions: &Restrictions, what: &str) -> Result<Self, String> {
        let mut guard = Guard::default();
        for category in RestrictedCategory::ALL {
            let Some(restriction) = restrictions.get(category) else {
                continue;
            };
            let header = HeaderName::from_bytes(restriction.header.as_bytes())
                .map_err(|_| format!("'{}' is not a header name", restriction.header))?;
            let key = match &restriction.key {
                KeySource::Value(value) => Key::Fixed(value.clone()),
                KeySource::File(path) => {
                    let path = PathBuf::from(path);
                    let value = read_key(&path)?;
                    Key::File {
                        path,
                        value: RwLock::new(value),
                    }
                }
            };
            guard.rules[category as usize] = Some(Rule {
                header,
                key,
                refusal: format!("{what}, expecting header '{}'", restriction.header),
            });
        }
        Ok(guard)
    }

    /// What `category` asks of a caller, where it asks anything: what an audit line may say of
    /// the credential (the key's header name, never its value; or the pod).
    pub fn credential(&self, category: RestrictedCategory) -> Option<String> {
        let key = self.rules[category as usize]
            .as_ref()
            .map(|rule| format!("key {}", rule.header));
        let pod = self.pod_only[category as usize]
            .as_ref()
            .map(|_| "the pod (loopback)".to_string());
        match (pod, key) {
            (Some(pod), Some(key)) => Some(format!("{pod} and {key}")),
            (pod, key) => pod.or(key),
        }
    }

    /// Whether nothing is restricted (then no request needs a look).
    pub fn is_empty(&self) -> bool {
        self.rules.iter().all(Option::is_none) && self.pod_only.iter().all(Option::is_none)
    }

    /// Whether a key comes from a file (then [`Guard::reload`] has something to do).
    pub fn has_key_files(&self) -> bool {
        self.rules
            .iter()
            .flatten()
            .any(|rule| matches!(rule.key, Key::File { .. }))
    }

    /// Reads the key files again. A changed key replaces the old one; a file that does not read,
    /// or reads empty, leaves the last key in force (a Secret being rewritten, a mistake) and
    /// says so in the log. Blocking: call it off the runtime's workers.
    pub fn reload(&self) {
        for rule in self.rules.iter().flatten() {
            let Key::File { path, value } = &rule.key else {
                continue;
            };
            match read_key(path) {
                Ok(new) if *value.read() != new => {
                    *value.write() = new;
                    tracing::info!(header = %rule.header, path = %path.display(), "restricted-API key read again from its file");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    header = %rule.header,
                    error = %e,
                    "restricted-API key file does not read; the key read before stays in force"
                ),
            }
        }
    }

    /// Whether a request of `category` with these headers, from `caller`, may be served;
    /// otherwise the refusal's message. A pod-only category is refused to a caller off loopback
    /// first. The header's name is matched without regard to case, its value exactly (and in
    /// constant time, `same_secret`); with the header repeated, the first counts.
    pub fn check(
        &self,
        category: RestrictedCategory,
        headers: &HeaderMap,
        caller: Option<Caller>,
    ) -> Result<(), &str> {
        if let Some(refusal) = &self.pod_only[category as usize]
            && !crate::caller::is_local(caller)
        {
            return Err(refusal);
        }
        match &self.rules[category as usize] {
            Some(rule)
                if headers
                    .get(&rule.header)
                    .is_none_or(|v| !rule.key.matches(v.as_bytes())) =>
            {
                Err(&rule.refusal)
            }
            _ => Ok(()),
        }
    }
}

impl Key {
    fn matches(&self, given: &[u8]) -> bool {
        match self {
            Key::Fixed(value) => same_secret(given, value.as_bytes()),
            Key::File { value, .. } => same_secret(given, value.read().as_bytes()),
        }
    }
}

/// A key file's content without its trailing line end (`echo key > file` and many editors add
/// one), refused when empty or larger than [`MAX_KEY_FILE_BYTES`]. Errors name the file, never
/// its content.
fn read_key(path: &std::path::Path) -> Result<String, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("key file {shown}: {e}"))?
        .len();
    if size > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "key file {shown} holds {size} bytes, more than a key ({MAX_KEY_FILE_BYTES} at most)"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("key file {shown}: {e}"))?;
    let key = text.trim_end_matches(['\n', '\r']);
    if key.is_empty() {
        return Err(format!("key file {shown} is empty"));
    }
    if key
        .bytes()
        .any(|b| !(b == b'\t' || (b' '..=b'~').contains(&b)))
    {
        return Err(format!(
            "key file {shown} holds characters no header value can carry (one line of printable ASCII is a key)"
        ));
    }
    Ok(key.to_string())
}

/// Whether `given` is `expected`, in a time that depends on `expected`'s length alone: how long
/// the answer takes tells a caller nothing of how much of a guess was right. A guess of another
/// length is compared with `expected` itself, and the answer is then no.
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let same_length = given.len() == expected.len();
    let compared = if same_length { given } else { expected };
    bool::from(compared.ct_eq(expected)) & same_length
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_config::RestrictedOption;

    fn guard(settings: &[&str], option: RestrictedOption) -> Guard {
        let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
        let restrictions = Restrictions::parse(&settings, option).unwrap();
        match option {
            RestrictedOption::Http => Guard::http(&restrictions).unwrap(),
            RestrictedOption::Grpc => Guard::grpc(&restrictions).unwrap(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_restricted_category_wants_its_header_and_value() {
        let g = guard(
            &["inference,metadata:Infer-Key=infer-value"],
            RestrictedOption::Http,
        );
        let refusal = "This API is restricted, expecting header 'Infer-Key'";
        let infer = RestrictedCategory::Inference;
        assert_eq!(g.check(infer, &headers(&[]), None), Err(refusal));
        assert_eq!(
            g.check(infer, &headers(&[("test", "1")]), None),
            Err(refusal)
        );
        assert_eq!(
            g.check(infer, &headers(&[("infer-key", "Infer-Value")]), None),
            Err(refusal)
        );
        assert_eq!(
            g.check(infer, &headers(&[("infer-key", "infer-value")]), None),
            Ok(())
        );
        assert_eq!(
            g.check(infer, &headers(&[("INFER-KEY", "infer-value")]), None),
            Ok(())
        );
        assert_eq!(
            g.check(
                infer,
                &headers(&[("infer-key", "x"), ("infer-key", "infer-value")]),
                None
            ),
            Err(refusal)
        );
        assert_eq!(
            g.check(RestrictedCategory::Statistics, &headers(&[]), None),
            Ok(())
        );
        assert!(!g.is_empty());
        assert!(Guard::default().is_empty());
    }

    #[test]
    fn secrets_match_only_whole() {
        assert!(same_secret(b"key-value", b"key-value"));
        assert!(!same_secret(b"key-valuE", b"key-value"));
        assert!(!same_secret(b"key-valu", b"key-value"));
        assert!(!same_secret(b"key-value2", b"key-value"));
        assert!(!same_secret(b"", b"key-value"));
        assert!(same_secret(b"", b""));
    }

    #[test]
    fn a_pod_only_api_is_served_on_loopback_alone_whatever_the_key() {
        let local = Some(Caller("127.0.0.1:5000".parse().unwrap()));
        let mapped = Some(Caller("[::ffff:127.0.0.1]:5000".parse().unwrap()));
        let remote = Some(Caller("10.1.2.3:5000".parse().unwrap()));
        let g = guard(&["logging:admin-key=v"], RestrictedOption::Grpc).pod_only(
            &[RestrictedCategory::Logging, RestrictedCategory::Trace],
            true,
        );
        let refusal =
            "This protocol is restricted to clients in the server's pod (server.pod_only_api)";
        let trace = RestrictedCategory::Trace;
        assert_eq!(g.check(trace, &headers(&[]), local), Ok(()));
        assert_eq!(g.check(trace, &headers(&[]), mapped), Ok(()));
        assert_eq!(g.check(trace, &headers(&[]), remote), Err(refusal));
        assert_eq!(g.check(trace, &headers(&[]), None), Err(refusal));
        // Where a key guards the API too, both hold: the pod first, then the key.
        let logging = RestrictedCategory::Logging;
        let key = headers(&[("triton-grpc-protocol-admin-key", "v")]);
        assert_eq!(g.check(logging, &key, remote), Err(refusal));
        assert_eq!(g.check(logging, &key, local), Ok(()));
        assert!(g.check(logging, &headers(&[]), local).is_err());
        assert_eq!(
            g.credential(logging).as_deref(),
            Some("the pod (loopback) and key triton-grpc-protocol-admin-key")
        );
        assert_eq!(g.credential(trace).as_deref(), Some("the pod (loopback)"));
        assert_eq!(g.credential(RestrictedCategory::Inference), None);
        assert_eq!(
            g.check(RestrictedCategory::Inference, &headers(&[]), remote),
            Ok(())
        );
        assert!(!Guard::default().pod_only(&[trace], false).is_empty());
    }

    #[test]
    fn a_key_file_is_read_at_start_and_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-key");
        std::fs::write(&path, "first-key\n").unwrap();
        let files = vec![format!("logging,trace:admin-key={}", path.display())];
        let restrictions =
            Restrictions::parse_with_files(&[], &files, RestrictedOption::Http).unwrap();
        let g = Guard::http(&restrictions).unwrap();
        assert!(g.has_key_files());
        let logging = RestrictedCategory::Logging;
        // The line end is not part of the key.
        assert_eq!(
            g.check(logging, &headers(&[("admin-key", "first-key")]), None),
            Ok(())
        );
        assert!(
            g.check(logging, &headers(&[("admin-key", "first-key ")]), None)
                .is_err()
        );

        // A Secret's update, as the kubelet makes it: the file replaced.
        std::fs::write(&path, "second-key").unwrap();
        assert_eq!(
            g.check(logging, &headers(&[("admin-key", "first-key")]), None),
            Ok(())
        );
        g.reload();
        assert!(
            g.check(logging, &headers(&[("admin-key", "first-key")]), None)
                .is_err()
        );
        assert_eq!(
            g.check(
                RestrictedCategory::Trace,
                &headers(&[("admin-key", "second-key")]),
                None
            ),
            Ok(())
        );

        // Gone or emptied: the last key stays in force, nobody gets in without one.
        std::fs::write(&path, "").unwrap();
        g.reload();
        std::fs::remove_file(&path).unwrap();
        g.reload();
        assert_eq!(
            g.check(logging, &headers(&[("admin-key", "second-key")]), None),
            Ok(())
        );
        assert!(g.check(logging, &headers(&[]), None).is_err());
    }

    #[test]
    fn a_key_file_that_cannot_be_a_key_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let guard_of = |content: Option<&[u8]>| {
            let path = dir.path().join("key");
            let _ = std::fs::remove_file(&path);
            if let Some(content) = content {
                std::fs::write(&path, content).unwrap();
            }
            let files = vec![format!("logging:k={}", path.display())];
            let restrictions =
                Restrictions::parse_with_files(&[], &files, RestrictedOption::Grpc).unwrap();
            Guard::grpc(&restrictions).map(|_| ())
        };
        assert!(guard_of(None).unwrap_err().contains("key file"));
        assert!(guard_of(Some(b"\n")).unwrap_err().contains("is empty"));
        assert!(
            guard_of(Some(&[b'k'; 5000]))
                .unwrap_err()
                .contains("more than a key")
        );
        assert!(
            guard_of(Some(b"two\nlines"))
                .unwrap_err()
                .contains("no header value")
        );
        assert_eq!(guard_of(Some(b"secret\r\n")), Ok(()));
        // An error names the file, never what it holds.
        let refused = guard_of(Some(b"s3cr3t\nx")).unwrap_err();
        assert!(!refused.contains("s3cr3t"), "{refused}");
    }

    #[test]
    fn a_category_keyed_in_a_setting_and_in_a_file_is_refused() {
        let settings = vec!["logging:k=v".to_string()];
        let files = vec!["logging:k=/dev/null".to_string()];
        let refused =
            Restrictions::parse_with_files(&settings, &files, RestrictedOption::Http).unwrap_err();
        assert!(refused.contains("multiple config groups"), "{refused}");
    }

    #[test]
    fn grpc_refusals_name_the_prefixed_key() {
        let g = guard(&["health:infer-key=infer-value"], RestrictedOption::Grpc);
        assert_eq!(
            g.check(
                RestrictedCategory::Health,
                &headers(&[("infer-key", "infer-value")]),
                None
            ),
            Err("This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
        );
        assert_eq!(
            g.check(
                RestrictedCategory::Health,
                &headers(&[("triton-grpc-protocol-infer-key", "infer-value")]),
                None
            ),
            Ok(())
        );
    }
}
