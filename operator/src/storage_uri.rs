//! `spec.model.storageUri`: where a model is fetched from, parsed once for the checks and the
//! render (KServe's field and schemes: `s3://`, `gs://`, `https://`, `http://`, `pvc://`).

/// A parsed storage URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageUri {
    /// `s3://BUCKET[/PREFIX]`, `gs://BUCKET[/PREFIX]`, or an `http(s)://` URL: fetched by the
    /// storage-initializer init container into an emptyDir.
    Fetched,
    /// `pvc://CLAIM[/PATH]`: the claim is mounted read-only, no copy.
    Claim {
        /// The PersistentVolumeClaim.
        claim: String,
        /// The path inside the volume (`subPath`), empty for its root.
        path: String,
    },
}

/// Parses `uri`, or says what is wrong with it.
pub fn parse(uri: &str) -> Result<StorageUri, String> {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Err(format!(
            "{uri:?} has no scheme: use s3://, gs://, https://, http:// or pvc://"
        ));
    };
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{uri:?} contains white space or control characters"
        ));
    }
    if let Some(why) = carried_credential(scheme, rest) {
        return Err(format!(
            "{} carries a credential ({why}): a URI is shown in the pod spec, the init container's arguments and logs; give credentials in model.storage.secretName, or the whole URI (a presigned URL) in model.storage.uriFrom",
            redact_url(uri)
        ));
    }
    let (first, path) = rest.split_once('/').unwrap_or((rest, ""));
    match scheme {
        "s3" | "gs" => {
            if first.is_empty() {
                return Err(format!("{uri:?} names no bucket"));
            }
            Ok(StorageUri::Fetched)
        }
        "http" | "https" => {
            if first.is_empty() {
                return Err(format!("{uri:?} names no host"));
            }
            Ok(StorageUri::Fetched)
        }
        "pvc" => {
            if !is_dns1123_subdomain(first) {
                return Err(format!(
                    "{uri:?}: {first:?} is not a PersistentVolumeClaim name (lowercase letters, digits, '-' and '.')"
                ));
            }
            let path = path.trim_matches('/');
            if path.split('/').any(|part| part == "..") {
                return Err(format!("{uri:?}: the path may not contain '..'"));
            }
            Ok(StorageUri::Claim {
                claim: first.to_string(),
                path: path.to_string(),
            })
        }
        other => Err(format!(
            "{uri:?}: scheme {other:?} is not supported; use s3://, gs://, https://, http:// or pvc://"
        )),
    }
}

/// Query parameters that carry a credential: S3's and GCS's presigned URLs (V4 and V2), Azure's
/// shared access signatures, and the usual token names. Compared without regard to case.
pub const CREDENTIAL_PARAMETERS: &[&str] = &[
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
    "signature",
    "awsaccesskeyid",
    "sig",
    "token",
    "access_token",
];

/// Why the part of a URI after `scheme://` carries a credential, if it does: a user name or
/// password before the host, or one of [`CREDENTIAL_PARAMETERS`] in the query.
fn carried_credential(scheme: &str, rest: &str) -> Option<String> {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Some("a user name or password before the host (user:pass@)".to_string());
    }
    let (_, query) = rest.split_once('?')?;
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .map(|pair| pair.split('=').next().unwrap_or(""))
        .find(|name| {
            CREDENTIAL_PARAMETERS
                .iter()
                .any(|c| name.eq_ignore_ascii_case(c))
        })
        .map(|name| format!("the query parameter {name} of a signed {scheme}:// URL"))
}

/// `uri` with what could be a credential taken out: the user name and password before the host,
/// and the whole query (`https://<redacted>@host/path?<redacted>`). Everything else is kept, so
/// a reader still sees where a fetch went.
pub fn redact_url(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<redacted>@{host}"),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?<redacted>"),
        None => tail.to_string(),
    };
    format!("{scheme}://{host}{tail}")
}

/// `text` with every URL in it redacted as [`redact_url`] does: for messages that may quote a
/// storage URI (an init container's termination message, a fetch error).
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters, digits, '+', '-' and '.' right before "://".
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..scheme_start]);
        if scheme_start == at {
            // "://" with no scheme before it: not a URL.
            out.push_str(&rest[at..end]);
        } else {
            out.push_str(&redact_url(&rest[scheme_start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `s` is a DNS-1123 subdomain (object names such as claims): at most 253 characters,
/// lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.
fn is_dns1123_subdomain(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b[0].is_ascii_alphanumeric()
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        for ok in [
            "s3://models/triton",
            "s3://models",
            "gs://b/p/q",
            "https://example.com/m.tar.gz",
            "http://10.0.0.1:9000/m",
        ] {
            assert_eq!(parse(ok), Ok(StorageUri::Fetched), "{ok}");
        }
        assert_eq!(
            parse("pvc://repo/triton/"),
            Ok(StorageUri::Claim {
                claim: "repo".into(),
                path: "triton".into()
            })
        );
        assert_eq!(
            parse("pvc://repo"),
            Ok(StorageUri::Claim {
                claim: "repo".into(),
                path: String::new()
            })
        );
        for bad in [
            "models/x",
            "ftp://h/x",
            "s3://",
            "s3:///x",
            "https://",
            "pvc://Repo/x",
            "pvc://repo/../etc",
            "s3://b/a b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_in_a_uri_are_refused_without_being_repeated() {
        for (bad, why) in [
            ("https://user:hunter2@host/m.tar.gz", "user:pass@"),
            ("s3://key:s3cr3t@bucket/p", "user:pass@"),
            ("http://token@10.0.0.1/m", "user:pass@"),
            (
                "https://b.s3.amazonaws.com/m.tgz?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA&X-Amz-Signature=abc",
                "X-Amz-Credential",
            ),
            (
                "https://storage.googleapis.com/b/m?X-Goog-Signature=ff",
                "X-Goog-Signature",
            ),
            (
                "https://acct.blob.core.windows.net/c/m?sv=2022&sig=c2lnbmF0dXJl",
                "sig",
            ),
            (
                "https://host/m?AWSAccessKeyId=A&Signature=s&Expires=1",
                "AWSAccessKeyId",
            ),
            ("https://host/m?TOKEN=abc", "TOKEN"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            for secret in ["hunter2", "s3cr3t", "abc", "c2lnbmF0dXJl", "AKIA"] {
                assert!(
                    !err.contains(secret),
                    "{bad}: the error repeats {secret}: {err}"
                );
            }
        }
        // Parameters that are not credentials, and '@' past the host, are fine.
        for ok in [
            "https://host/m.tar.gz?version=3",
            "https://host/models/a@b/m.tgz",
            "s3://bucket/p?x=1",
        ] {
            assert_eq!(parse(ok), Ok(StorageUri::Fetched), "{ok}");
        }
    }

    #[test]
    fn urls_in_messages_are_redacted() {
        assert_eq!(
            redact_url("https://u:p@host:9000/m.tgz?X-Amz-Signature=abc#f"),
            "https://<redacted>@host:9000/m.tgz?<redacted>"
        );
        assert_eq!(redact_url("s3://bucket/prefix"), "s3://bucket/prefix");
        assert_eq!(
            redact_urls(
                "fetching https://u:p@h/m?sig=s failed: 403 (s3://b/p ok) \"http://x@y/z\""
            ),
            "fetching https://<redacted>@h/m?<redacted> failed: 403 (s3://b/p ok) \"http://<redacted>@y/z\""
        );
        assert_eq!(redact_urls("no url :// here"), "no url :// here");
    }
}
