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
}
