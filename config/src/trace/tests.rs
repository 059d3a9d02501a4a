use super::*;

fn parse(settings: &[&str]) -> Result<TraceConfig, String> {
    TraceConfig::parse(&settings.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn nothing_given_is_tritons_default() {
    let config = parse(&[]).unwrap();
    assert_eq!(config, TraceConfig::default());
    assert_eq!(config.mode, TraceMode::Triton);
    assert!(config.levels.is_empty());
    assert_eq!((config.rate, config.count), (1000, -1));
}

#[test]
fn reads_tritons_settings() {
    let config = parse(&[
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        "level=TENSORS",
        "rate=1",
        "count=10",
        "opentelemetry,url=collector:4318/v1/traces",
        "opentelemetry,resource=service.name=gate",
        "opentelemetry,resource=deployment.environment=test",
        "opentelemetry,bsp_schedule_delay=100",
        "opentelemetry,bsp_max_queue_size=64",
        "opentelemetry,bsp_max_export_batch_size=8",
    ])
    .unwrap();
    assert_eq!(config.mode, TraceMode::OpenTelemetry);
    assert_eq!(config.levels, [TraceLevel::Timestamps, TraceLevel::Tensors]);
    assert_eq!((config.rate, config.count), (1, 10));
    assert_eq!(config.endpoint(), "http://collector:4318/v1/traces");
    assert_eq!(config.resource.len(), 2);
    assert_eq!(config.resource[0], ("service.name".into(), "gate".into()));
    assert_eq!(
        (
            config.bsp_schedule_delay_ms,
            config.bsp_max_queue_size,
            config.bsp_max_export_batch_size
        ),
        (100, 64, 8)
    );
}

#[test]
fn a_trace_file_lets_tritons_mode_trace() {
    let config = parse(&[
        "triton,file=/tmp/trace.json",
        "triton,log-frequency=50",
        "level=TIMESTAMPS",
    ])
    .unwrap();
    assert_eq!(config.mode, TraceMode::Triton);
    assert_eq!(config.file.as_deref(), Some("/tmp/trace.json"));
    assert_eq!((config.log_frequency, config.levels.len()), (50, 1));
}

#[test]
fn level_off_clears_and_a_scheme_is_kept() {
    let config = parse(&[
        "mode=opentelemetry",
        "level=OFF",
        "opentelemetry,url=https://c:4318/v1/traces",
    ])
    .unwrap();
    assert!(config.levels.is_empty());
    assert_eq!(config.endpoint(), "https://c:4318/v1/traces");
}

#[test]
fn an_off_level_anywhere_turns_tracing_off() {
    for levels in [
        ["level=TIMESTAMPS", "level=OFF"],
        ["level=OFF", "level=TENSORS"],
    ] {
        let mut settings = vec!["triton,file=/tmp/t.json"];
        settings.extend(levels);
        assert!(parse(&settings).unwrap().levels.is_empty(), "{levels:?}");
    }
}

#[test]
fn refuses_what_it_cannot_do_or_read() {
    for (settings, words) in [
        (&["level=TIMESTAMPS"][..], "needs a trace file"),
        (&["triton,file="][..], "needs a path"),
        (&["level=ALL"][..], "unknown trace level"),
        (&["rate=0"][..], "above 0"),
        (&["count=-2"][..], "-1 or more"),
        (&["mode=jaeger"][..], "triton or opentelemetry"),
        (
            &["opentelemetry,colour=red"][..],
            "unknown opentelemetry setting",
        ),
        (&["zipkin,url=x"][..], "unknown trace mode"),
        (&["verbose=1"][..], "unknown trace setting"),
        (&["level"][..], "expected [<mode>,]<name>=<value>"),
        (&["opentelemetry,resource=novalue"][..], "<key>=<value>"),
        (&["opentelemetry,client_key="][..], "needs a path"),
        (
            &["opentelemetry,certificate=/ca.crt"][..],
            "url 'localhost:4318/v1/traces' is not https://",
        ),
        (
            &[
                "opentelemetry,bsp_max_queue_size=4",
                "opentelemetry,bsp_max_export_batch_size=8",
            ][..],
            "must not exceed",
        ),
    ] {
        let error = parse(settings).unwrap_err();
        assert!(error.contains(words), "{settings:?}: {error}");
    }
}

#[test]
fn reads_the_tls_files_towards_the_collector() {
    let config = parse(&[
        "mode=opentelemetry",
        "opentelemetry,url=https://collector:4318/v1/traces",
        "opentelemetry,certificate=/tls/ca.crt",
        "opentelemetry,client_certificate=/tls/tls.crt",
        "opentelemetry,client_key=/tls/tls.key",
    ])
    .unwrap();
    assert_eq!(
        config.tls,
        super::OtlpTlsSettings {
            certificate: Some("/tls/ca.crt".into()),
            client_certificate: Some("/tls/tls.crt".into()),
            client_key: Some("/tls/tls.key".into()),
        }
    );
    assert_eq!(config.endpoint(), "https://collector:4318/v1/traces");
    assert_eq!(parse(&[]).unwrap().tls, super::OtlpTlsSettings::default());
}

#[test]
fn levels_on_the_command_line_are_read_as_triton_reads_them() {
    for (given, want) in [
        ("min", vec![TraceLevel::Timestamps]),
        ("MAX", vec![TraceLevel::Timestamps]),
        ("On", vec![TraceLevel::Timestamps]),
        ("true", vec![TraceLevel::Timestamps]),
        ("timestamps", vec![TraceLevel::Timestamps]),
        ("Tensors", vec![TraceLevel::Tensors]),
        ("false", vec![]),
        ("off", vec![]),
    ] {
        let config = parse(&[&format!("level={given}"), "mode=opentelemetry"]).unwrap();
        assert_eq!(config.levels, want, "{given}");
    }
    // The trace settings API keeps its exact names.
    assert!(TraceLevel::parse("min").is_err());
    assert_eq!(
        TraceLevel::parse("TIMESTAMPS").unwrap(),
        Some(TraceLevel::Timestamps)
    );
}
