use super::*;

#[test]
fn default_is_valid() {
    assert_eq!(SidecarConfig::default().validate(&["simple"]), Ok(()));
}

#[test]
fn all_errors_are_reported() {
    let mut cfg = SidecarConfig::default();
    cfg.server.log_level = "loud".into();
    cfg.server.worker_threads = 1025;
    cfg.server.http_restricted_api = vec!["health:k=v".into(), "health:k=v".into()];
    cfg.server.grpc_restricted_protocol = vec!["inference".into()];
    cfg.server.trace_config = vec!["level=LOUD".into()];
    cfg.server.grpc_port = cfg.server.http_port;
    cfg.limits.max_json_depth = 0;
    cfg.limits.http_header_timeout_seconds = 0;
    cfg.limits.http_body_timeout_seconds = 3601;
    cfg.backend = BackendConfig::Builtin {
        models: vec!["nope".into()],
    };
    let errors = cfg.validate(&["simple"]).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "server.log_level",
            "server.worker_threads",
            "server.http_restricted_api",
            "server.grpc_restricted_protocol",
            "server.trace_config",
            "server.grpc_port",
            "limits.max_json_depth",
            "limits.http_header_timeout_seconds",
            "limits.http_body_timeout_seconds",
            "backend.models[0]"
        ]
    );
}

#[test]
fn hosts_are_ip_addresses_of_either_family_bracketed_or_not() {
    let host_is_valid = |host: &str| {
        let mut cfg = SidecarConfig::default();
        cfg.server.host = host.into();
        cfg.validate(&["simple"]).is_ok()
    };
    for host in ["0.0.0.0", "::", "[::]", "::1", "[fd00::5]", "localhost"] {
        assert!(host_is_valid(host), "{host}");
    }
    for host in ["", "[::", "::]", "[0.0.0.0]x", "example.com", "[localhost]"] {
        assert!(!host_is_valid(host), "{host}");
    }
    let mut cfg = SidecarConfig::default();
    cfg.server.host = "[::]".into();
    assert_eq!(cfg.server.bind_host(), "::");
}

/// The paths of the errors in a configuration with this upstream, `None` when it is valid.
fn upstream_errors(up: crate::UpstreamConfig) -> Option<Vec<String>> {
    let cfg = SidecarConfig {
        backend: BackendConfig::Upstream(up),
        ..Default::default()
    };
    cfg.validate(&[])
        .err()
        .map(|errors| errors.iter().map(|e| e.path.clone()).collect())
}

#[test]
fn a_rest_address_goes_beside_a_grpc_upstream_only() {
    let with = |url: &str, rest_url: &str| {
        let mut up = crate::UpstreamConfig::new(url);
        up.rest_url = Some(rest_url.into());
        upstream_errors(up)
    };
    assert_eq!(with("grpc://127.0.0.1:8001", "http://127.0.0.1:8000"), None);
    assert_eq!(
        with("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        Some(vec!["backend.rest_url".to_string()])
    );
    assert_eq!(
        with("grpc://127.0.0.1:8001", "grpc://127.0.0.1:8000"),
        Some(vec!["backend.rest_url".to_string()])
    );
}

#[test]
fn an_idle_limit_for_rest_connections_is_at_most_an_hour() {
    let with = |ms: u64| {
        let mut up = crate::UpstreamConfig::new("http://127.0.0.1:8000");
        up.rest_idle_ms = ms;
        upstream_errors(up)
    };
    assert_eq!(with(0), None);
    assert_eq!(with(3_600_000), None);
    assert_eq!(
        with(3_600_001),
        Some(vec!["backend.rest_idle_ms".to_string()])
    );
}

#[test]
fn identities_read_from_yaml_and_an_api_takes_a_key_or_an_identity() {
    let cfg = crate::yaml::from_str(
        "server:\n  identity:\n    apis: [inference, 'logging,trace']\n    audience: infergate.dev/apps/fraud\n    authorize: {namespace: apps, name: fraud, verb: infer}\n",
    )
    .unwrap();
    let identity = cfg.server.identity.clone().unwrap();
    assert_eq!(identity.verify, crate::TokenVerification::Jwks);
    assert_eq!(identity.cache_seconds, 60);
    let authorize = identity.authorize.clone().unwrap();
    assert_eq!(
        (authorize.group.as_str(), authorize.resource.as_str()),
        ("infergate.dev", "inferenceservices")
    );
    assert_eq!(
        identity.categories().unwrap(),
        [
            crate::RestrictedCategory::Inference,
            crate::RestrictedCategory::Logging,
            crate::RestrictedCategory::Trace
        ]
    );
    assert_eq!(cfg.validate(&["simple"]), Ok(()));

    let refused = |change: &dyn Fn(&mut SidecarConfig)| {
        let mut bad = cfg.clone();
        change(&mut bad);
        bad.validate(&["simple"])
            .unwrap_err()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let both = refused(&|c| c.server.http_restricted_api = vec!["logging:k=v".into()]);
    assert!(
        both.contains("'logging' has a restricted-API key as well"),
        "{both}"
    );
    let empty = refused(&|c| c.server.identity.as_mut().unwrap().apis.clear());
    assert!(empty.contains("names no API"), "{empty}");
    let unknown = refused(&|c| c.server.identity.as_mut().unwrap().apis = vec!["infer".into()]);
    assert!(unknown.contains("unknown api 'infer'"), "{unknown}");
    let long = refused(&|c| c.server.identity.as_mut().unwrap().cache_seconds = 7200);
    assert!(long.contains("more than an hour"), "{long}");
    let nameless = refused(&|c| {
        c.server
            .identity
            .as_mut()
            .unwrap()
            .authorize
            .as_mut()
            .unwrap()
            .name = String::new()
    });
    assert!(nameless.contains("authorize needs"), "{nameless}");
    // A verb of its own for some APIs: only for APIs the identity guards, and never empty.
    let verbs = |api: &str, verb: &str| {
        let (api, verb) = (api.to_string(), verb.to_string());
        move |c: &mut SidecarConfig| {
            let rule = c
                .server
                .identity
                .as_mut()
                .unwrap()
                .authorize
                .as_mut()
                .unwrap();
            rule.verbs.insert(api.clone(), verb.clone());
        }
    };
    let mut split = cfg.clone();
    verbs("logging", "control")(&mut split);
    assert_eq!(split.validate(&["simple"]), Ok(()));
    let rule = split
        .server
        .identity
        .as_ref()
        .unwrap()
        .authorize
        .as_ref()
        .unwrap();
    assert_eq!(rule.verb_for(crate::RestrictedCategory::Logging), "control");
    assert_eq!(
        rule.verb_for(crate::RestrictedCategory::Inference),
        rule.verb
    );
    let unguarded = refused(&verbs("model-repository", "control"));
    assert!(
        unguarded.contains("not one of the APIs it guards"),
        "{unguarded}"
    );
    let blank = refused(&verbs("trace", " "));
    assert!(blank.contains("an empty verb"), "{blank}");
}

#[test]
fn a_canary_names_its_sidecars_one_way_and_takes_a_percent() {
    let errors = |canary: crate::CanarySettings| -> Vec<String> {
        let mut config = SidecarConfig::default();
        config.server.canary = Some(canary);
        match config.validate(&[]) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    };
    let peers = crate::CanarySettings {
        peers: vec!["10.0.0.9:8001".into()],
        traffic_percent: 10,
        ..Default::default()
    };
    assert!(errors(peers.clone()).is_empty());
    let service = crate::CanarySettings {
        service: Some("ns/svc-canary".into()),
        ..Default::default()
    };
    assert!(errors(service).is_empty());
    assert_eq!(
        errors(crate::CanarySettings::default()),
        ["server.canary: name the canary's sidecars: canary.peers or canary.service"]
    );
    let both = crate::CanarySettings {
        service: Some("svc".into()),
        traffic_percent: 101,
        peers: vec!["nowhere".into()],
        ..Default::default()
    };
    assert_eq!(
        errors(both),
        [
            "server.canary.service: give either canary.peers or canary.service, not both",
            "server.canary.peers[0]: 'nowhere' is not HOST:PORT",
            "server.canary.traffic_percent: 101 is not a percent (0 to 100)",
        ]
    );
}

#[test]
fn an_activator_names_the_services_sidecars_and_holds_something() {
    let errors = |activator: crate::ActivatorSettings, canary: bool| -> Vec<String> {
        let mut config = SidecarConfig::default();
        config.server.activator = Some(activator);
        if canary {
            config.server.canary = Some(crate::CanarySettings {
                peers: vec!["10.0.0.9:8001".into()],
                ..Default::default()
            });
        }
        match config.validate(&[]) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    };
    let service = crate::ActivatorSettings {
        service: Some("ns/svc-peers".into()),
        deployment: Some("svc".into()),
        inference_service: Some("ns/svc".into()),
        ..Default::default()
    };
    assert!(errors(service.clone(), false).is_empty());
    assert_eq!(
        errors(service, true),
        [
            "server.activator: an activator serves no model: it takes neither sequence peers nor a canary"
        ]
    );
    assert_eq!(
        errors(crate::ActivatorSettings::default(), false),
        ["server.activator: name the service's sidecars: activator.peers or activator.service"]
    );
    let bad = crate::ActivatorSettings {
        peers: vec!["nowhere".into()],
        deployment: Some("a/b/c".into()),
        max_held_calls: 0,
        hold_timeout_seconds: 0,
        ..Default::default()
    };
    assert_eq!(
        errors(bad, false),
        [
            "server.activator.peers[0]: 'nowhere' is not HOST:PORT",
            "server.activator.deployment: 'a/b/c' is not [NAMESPACE/]NAME",
            "server.activator.hold_timeout_seconds: must be above 0",
            "server.activator.max_held_calls: must be above 0",
        ]
    );
}
