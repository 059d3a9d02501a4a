//! Tests of the trace settings: what they answer, and which requests they sample. The helpers
//! serve `update`'s tests too.

use infergate_config::{TraceConfig, TraceLevel};

use super::{Settings, View};
use crate::protocol::Protocol;
use crate::trace::update::{Given, Update};

pub(in crate::trace) fn otel() -> Settings {
    let mut config = TraceConfig::parse(&["mode=opentelemetry".to_string()]).unwrap();
    config.url = "127.0.0.1:4318/v1/traces".into();
    Settings::new(config)
}

/// Settings that trace every request of every model (level TIMESTAMPS, rate 1).
pub(in crate::trace) fn tracing_every_request() -> Settings {
    let mut s = otel();
    s.update(
        None,
        &set(&[
            ("trace_level", Some(&["TIMESTAMPS"])),
            ("trace_rate", Some(&["1"])),
        ]),
        Protocol::Http,
    )
    .unwrap();
    s
}

pub(in crate::trace) fn set(pairs: &[(&str, Option<&[&str]>)]) -> Update {
    pairs
        .iter()
        .map(|(k, v)| {
            let given = match v {
                None => Given::Clear,
                Some(v) => Given::Values(v.iter().map(|s| s.to_string()).collect()),
            };
            (k.to_string(), given)
        })
        .collect()
}

pub(in crate::trace) fn value(view: &View, key: &str) -> Vec<String> {
    view.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

#[test]
fn the_url_is_listed_only_when_given_at_start() {
    let keys = |settings: &[&str]| -> Vec<&'static str> {
        let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
        let config = TraceConfig::parse(&settings).unwrap();
        Settings::new(config)
            .view(None)
            .iter()
            .map(|(k, _)| *k)
            .collect()
    };
    let without = keys(&["mode=opentelemetry"]);
    assert!(!without.contains(&"url") && without.contains(&"bsp_max_queue_size"));
    assert!(keys(&["mode=opentelemetry", "opentelemetry,url=c:4318/v1/traces"]).contains(&"url"));
}

#[test]
fn a_new_generation_counts_toward_the_rate_afresh() {
    let mut s = otel();
    let on = set(&[
        ("trace_level", Some(&["TIMESTAMPS"])),
        ("trace_rate", Some(&["2"])),
    ]);
    s.update(None, &on, Protocol::Http).unwrap();
    assert!(s.sample("simple").is_none());
    // Any change (here none of substance) starts the count again, as Triton's new settings.
    s.update(None, &on, Protocol::Http).unwrap();
    assert!(s.sample("simple").is_none());
    assert!(s.sample("simple").is_some());
}

#[test]
fn samples_one_in_rate_while_the_count_lasts() {
    let mut s = otel();
    s.update(
        None,
        &set(&[
            ("trace_level", Some(&["TIMESTAMPS"])),
            ("trace_rate", Some(&["2"])),
            ("trace_count", Some(&["2"])),
        ]),
        Protocol::Http,
    )
    .unwrap();
    let sampled: Vec<bool> = (0..8).map(|_| s.sample("simple").is_some()).collect();
    assert_eq!(
        sampled,
        [false, true, false, true, false, false, false, false]
    );
    assert_eq!(value(&s.view(None), "trace_count"), ["0"]);
    // A model with its own count uses its own.
    s.update(
        Some("m"),
        &set(&[("trace_count", Some(&["1"]))]),
        Protocol::Http,
    )
    .unwrap();
    assert!(s.sample("m").is_none());
    assert!(s.sample("m").is_some());
    assert!(s.sample("m").is_none());
    assert_eq!(value(&s.view(Some("m")), "trace_count"), ["0"]);
}

#[test]
fn level_off_for_one_model_only() {
    let mut s = tracing_every_request();
    s.update(
        Some("quiet"),
        &set(&[("trace_level", Some(&["OFF"]))]),
        Protocol::Http,
    )
    .unwrap();
    assert!(s.sample("quiet").is_none());
    assert_eq!(
        s.sample("loud").map(|s| s.levels),
        Some(vec![TraceLevel::Timestamps])
    );
}
