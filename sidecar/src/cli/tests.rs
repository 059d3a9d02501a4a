use super::*;

fn applied(flags: &[&str]) -> SidecarConfig {
    let args =
        Args::try_parse_from(std::iter::once("infergate-sidecar").chain(flags.iter().copied()))
            .unwrap();
    let mut config = SidecarConfig::default();
    args.apply(&mut config);
    config
}

#[test]
fn upstream_flags_set_the_upstream_backend() {
    let config = applied(&[
        "--upstream",
        "grpc://127.0.0.1:8001",
        "--upstream-rest",
        "http://127.0.0.1:8000",
        "--upstream-rest-max-bytes",
        "1024",
        "--upstream-rest-idle-ms",
        "250",
        "--staging-shm-bytes",
        "0",
    ]);
    let BackendConfig::Upstream(up) = config.backend else {
        panic!("not an upstream backend: {:?}", config.backend);
    };
    assert_eq!(up.url, "grpc://127.0.0.1:8001");
    assert_eq!(up.rest_url.as_deref(), Some("http://127.0.0.1:8000"));
    assert_eq!((up.rest_max_bytes, up.rest_idle_ms), (1024, 250));
    assert_eq!(up.staging_shm_bytes, 0);
}

#[test]
fn tritons_deprecated_trace_flags_stand_for_trace_config_settings() {
    let config = applied(&[
        "--trace-file=/tmp/old.json",
        "--trace-level=TIMESTAMPS",
        "--trace-level",
        "TENSORS",
        "--trace-rate=5",
        "--trace-count=7",
        "--trace-log-frequency=3",
        "--trace-config=rate=9",
    ]);
    // The deprecated ones first, so that --trace-config wins where both say something.
    assert_eq!(
        config.server.trace_config,
        [
            "triton,file=/tmp/old.json",
            "rate=5",
            "count=7",
            "triton,log-frequency=3",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "rate=9",
        ]
    );
    let trace = infergate_config::TraceConfig::parse(&config.server.trace_config).unwrap();
    assert_eq!((trace.rate, trace.count, trace.log_frequency), (9, 7, 3));
    assert_eq!(trace.file.as_deref(), Some("/tmp/old.json"));
    assert_eq!(trace.levels.len(), 2);
}

#[test]
fn restriction_flags_repeat_and_replace_the_file_s_settings() {
    let args = Args::try_parse_from([
        "infergate-sidecar",
        "--http-restricted-api=model-repository:admin-key=admin-value",
        "--http-restricted-api",
        "inference,metadata:infer-key=infer-value",
        "--grpc-restricted-protocol=health:k=v",
    ])
    .unwrap();
    let mut config = SidecarConfig::default();
    config.server.http_restricted_api = vec!["logging:a=b".into()];
    config.server.grpc_restricted_protocol = vec!["trace:a=b".into()];
    args.apply(&mut config);
    assert_eq!(
        config.server.http_restricted_api,
        [
            "model-repository:admin-key=admin-value",
            "inference,metadata:infer-key=infer-value"
        ]
    );
    assert_eq!(config.server.grpc_restricted_protocol, ["health:k=v"]);
    let mut kept = SidecarConfig::default();
    kept.server.http_restricted_api = vec!["logging:a=b".into()];
    Args::try_parse_from(["infergate-sidecar"])
        .unwrap()
        .apply(&mut kept);
    assert_eq!(kept.server.http_restricted_api, ["logging:a=b"]);
}

#[test]
fn tritons_log_flags_read_its_words_and_set_the_log_settings() {
    let config = applied(&[
        "--log-info=OFF",
        "--log-warning",
        "1",
        "--log-error=false",
        "--log-verbose=true",
        "--log-file=/tmp/sidecar.log",
    ]);
    let s = &config.server;
    assert_eq!(
        (s.log_info, s.log_warning, s.log_error),
        (Some(false), Some(true), Some(false))
    );
    assert_eq!(s.log_verbose, Some(1));
    assert_eq!(s.log_file.as_deref(), Some("/tmp/sidecar.log"));
    assert_eq!(applied(&["--log-verbose=-3"]).server.log_verbose, Some(0));
    assert_eq!(applied(&["--log-verbose=2"]).server.log_verbose, Some(2));
    assert_eq!(applied(&[]).server.log_info, None);
    // Shortened as getopt lets Triton's users shorten them.
    assert_eq!(
        applied(&["--log-warn=false"]).server.log_warning,
        Some(false)
    );
    assert!(Args::try_parse_from(["infergate-sidecar", "--log=1"]).is_err());
    for bad in [&["--log-info=yes"][..], &["--log-verbose=loud"]] {
        let parsed =
            Args::try_parse_from(std::iter::once("infergate-sidecar").chain(bad.iter().copied()));
        assert!(parsed.is_err(), "{bad:?} was taken");
    }
}

#[test]
fn upstream_settings_keep_their_defaults_without_flags() {
    let config = applied(&["--upstream", "http://127.0.0.1:8000"]);
    let BackendConfig::Upstream(up) = config.backend else {
        panic!("not an upstream backend: {:?}", config.backend);
    };
    assert_eq!(up, UpstreamConfig::new("http://127.0.0.1:8000"));
    assert_eq!(up.rest_idle_ms, 1000);
}

#[test]
fn tls_flags_read_as_tritons_the_last_one_counting() {
    // L0_secure_grpc's "both" case: --grpc-use-ssl=1 twice, then the mutual flag.
    let config = applied(&[
        "--grpc-use-ssl=1",
        "--grpc-server-cert",
        "server.crt",
        "--grpc-server-key=server.key",
        "--grpc-root-cert=ca.crt",
        "--grpc-use-ssl=1",
        "--grpc-use-ssl-mutual",
        "true",
    ]);
    let tls = &config.server.grpc_tls;
    assert!(tls.use_ssl && tls.use_ssl_mutual);
    assert_eq!(tls.server_cert.as_deref(), Some("server.crt"));
    assert_eq!(tls.root_cert.as_deref(), Some("ca.crt"));
    // The mutual flag turns TLS on whatever its value, as in Triton.
    let config = applied(&["--http-use-ssl=0", "--http-use-ssl-mutual=off"]);
    assert!(config.server.http_tls.use_ssl && !config.server.http_tls.use_ssl_mutual);
    assert!(!config.server.grpc_tls.enabled());
    // The metrics port's flags set its own settings, and nothing else.
    let config = applied(&[
        "--metrics-use-ssl=1",
        "--metrics-server-cert=m.crt",
        "--metrics-server-key=m.key",
    ]);
    let tls = &config.server.metrics_tls;
    assert!(tls.use_ssl && !tls.use_ssl_mutual);
    assert_eq!(tls.server_cert.as_deref(), Some("m.crt"));
    assert!(!config.server.http_tls.enabled() && !config.server.grpc_tls.enabled());
    let refused = Args::try_parse_from(["infergate-sidecar", "--grpc-use-ssl=maybe"]);
    assert!(refused.is_err());
}
