use super::*;

fn parse(settings: &[&str], option: RestrictedOption) -> Result<Restrictions, String> {
    let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
    Restrictions::parse(&settings, option)
}

fn restriction(header: &str, value: &str) -> Option<Restriction> {
    Some(Restriction {
        header: header.into(),
        key: KeySource::Value(value.into()),
    })
}

#[test]
fn categories_of_a_setting_share_its_header() {
    let r = parse(
        &[
            "model-repository:admin-key=admin-value",
            "inference,metadata:infer-key=infer-value",
        ],
        RestrictedOption::Http,
    )
    .unwrap();
    let get = |c| r.get(c).cloned();
    assert_eq!(
        get(RestrictedCategory::ModelRepository),
        restriction("admin-key", "admin-value")
    );
    assert_eq!(
        get(RestrictedCategory::Inference),
        restriction("infer-key", "infer-value")
    );
    assert_eq!(
        get(RestrictedCategory::Metadata),
        restriction("infer-key", "infer-value")
    );
    for c in [
        RestrictedCategory::Health,
        RestrictedCategory::SharedMemory,
        RestrictedCategory::ModelConfig,
        RestrictedCategory::Statistics,
        RestrictedCategory::Trace,
        RestrictedCategory::Logging,
    ] {
        assert_eq!(r.get(c), None, "{c:?}");
    }
    assert!(!r.is_empty());
    assert!(parse(&[], RestrictedOption::Http).unwrap().is_empty());
}

#[test]
fn every_category_has_triton_s_name() {
    for c in RestrictedCategory::ALL {
        let r = parse(&[&format!("{}:k=v", c.as_str())], RestrictedOption::Http).unwrap();
        assert_eq!(r.get(c).cloned(), restriction("k", "v"));
    }
}

#[test]
fn grpc_keys_get_triton_s_prefix() {
    let r = parse(&["health:infer-key=a=b"], RestrictedOption::Grpc).unwrap();
    assert_eq!(
        r.get(RestrictedCategory::Health).cloned(),
        restriction("triton-grpc-protocol-infer-key", "a=b")
    );
}

#[test]
fn errors_have_triton_s_words() {
    let err = |settings: &[&str], option| parse(settings, option).unwrap_err();
    assert_eq!(
        err(
            &["model-repository,health:k1=v1", "metadata,health:k2=v2"],
            RestrictedOption::Http
        ),
        "restricted api 'health' can not be specified in multiple config groups"
    );
    assert_eq!(
        err(&["model-reposit,health:k1=v1"], RestrictedOption::Http),
        "unknown restricted api 'model-reposit'"
    );
    assert_eq!(
        err(&["inference,,health:k=v"], RestrictedOption::Grpc),
        "unknown restricted protocol ''"
    );
    for bad in [
        "inference",
        "inference:k",
        ":k=v",
        "inference:=v",
        "inference:k=",
    ] {
        assert_eq!(
            err(&[bad], RestrictedOption::Grpc),
            format!(
                "--grpc-restricted-protocol option format is \
                 '<config name>:<setting>=<value>'. Got {bad}"
            )
        );
    }
    assert!(err(&["inference:a key=v"], RestrictedOption::Http).contains("not a header name"));
}
