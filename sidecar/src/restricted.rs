//! Restricted categories of one port, as Triton's `--http-restricted-api` and
//! `--grpc-restricted-protocol` set them: a request to a restricted category is served only when
//! it carries the category's header (gRPC: metadata key) with exactly its value. Which category
//! a request belongs to is the port's business (`http/restricted.rs`, `grpc/restricted.rs`).

use http::{HeaderMap, HeaderName};
use infergate_config::{RestrictedCategory, Restrictions};

/// The restrictions of a port, with the refusal each one answers.
#[derive(Debug, Default)]
pub struct Guard {
    /// Indexed by category, in `RestrictedCategory::ALL`'s order.
    rules: [Option<Rule>; RestrictedCategory::ALL.len()],
}

#[derive(Debug)]
struct Rule {
    header: HeaderName,
    value: String,
    refusal: String,
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

    fn new(restrictions: &Restrictions, what: &str) -> Result<Self, String> {
        let mut guard = Guard::default();
        for category in RestrictedCategory::ALL {
            let Some(restriction) = restrictions.get(category) else {
                continue;
            };
            let header = HeaderName::from_bytes(restriction.header.as_bytes())
                .map_err(|_| format!("'{}' is not a header name", restriction.header))?;
            guard.rules[category as usize] = Some(Rule {
                header,
                value: restriction.value.clone(),
                refusal: format!("{what}, expecting header '{}'", restriction.header),
            });
        }
        Ok(guard)
    }

    /// The name of the header that carries `category`'s key, where one is required: what an
    /// audit line may say of the credential (never its value).
    pub fn key_name(&self, category: RestrictedCategory) -> Option<&str> {
        self.rules[category as usize]
            .as_ref()
            .map(|rule| rule.header.as_str())
    }

    /// Whether nothing is restricted (then no request needs a look).
    pub fn is_empty(&self) -> bool {
        self.rules.iter().all(Option::is_none)
    }

    /// Whether a request of `category` with these headers may be served; otherwise the refusal's
    /// message. The header's name is matched without regard to case, its value exactly (and in
    /// constant time, `same_secret`); with the header repeated, the first counts.
    pub fn check(&self, category: RestrictedCategory, headers: &HeaderMap) -> Result<(), &str> {
        match &self.rules[category as usize] {
            Some(rule)
                if headers
                    .get(&rule.header)
                    .is_none_or(|v| !same_secret(v.as_bytes(), rule.value.as_bytes())) =>
            {
                Err(&rule.refusal)
            }
            _ => Ok(()),
        }
    }
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
        assert_eq!(g.check(infer, &headers(&[])), Err(refusal));
        assert_eq!(g.check(infer, &headers(&[("test", "1")])), Err(refusal));
        assert_eq!(
            g.check(infer, &headers(&[("infer-key", "Infer-Value")])),
            Err(refusal)
        );
        assert_eq!(
            g.check(infer, &headers(&[("infer-key", "infer-value")])),
            Ok(())
        );
        assert_eq!(
            g.check(infer, &headers(&[("INFER-KEY", "infer-value")])),
            Ok(())
        );
        assert_eq!(
            g.check(
                infer,
                &headers(&[("infer-key", "x"), ("infer-key", "infer-value")])
            ),
            Err(refusal)
        );
        assert_eq!(
            g.check(RestrictedCategory::Statistics, &headers(&[])),
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
    fn grpc_refusals_name_the_prefixed_key() {
        let g = guard(&["health:infer-key=infer-value"], RestrictedOption::Grpc);
        assert_eq!(
            g.check(
                RestrictedCategory::Health,
                &headers(&[("infer-key", "infer-value")])
            ),
            Err("This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
        );
        assert_eq!(
            g.check(
                RestrictedCategory::Health,
                &headers(&[("triton-grpc-protocol-infer-key", "infer-value")])
            ),
            Ok(())
        );
    }
}
