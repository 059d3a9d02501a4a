//! Tests of a change to the trace settings: what it changes, and Triton's refusals.

use infergate_config::TraceConfig;

use crate::protocol::Protocol;
use crate::trace::settings::Settings;
use crate::trace::settings::tests::{otel, set, tracing_every_request, value};

#[test]
fn tritons_default_view_and_its_refusal_to_trace_without_a_file() {
    let mut s = Settings::new(TraceConfig::default());
    let keys: Vec<&str> = s.view(None).iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            "trace_level",
            "trace_rate",
            "trace_count",
            "log_frequency",
            "trace_file",
            "trace_mode"
        ]
    );
    let e = s
        .update(
            None,
            &set(&[("trace_level", Some(&["TIMESTAMPS"]))]),
            Protocol::Http,
        )
        .unwrap_err();
    assert_eq!(
        e.message,
        "Attempting to set invalid trace setting :trace file name is not given"
    );
    assert!(!s.any_enabled());
    s.update(
        None,
        &set(&[("log_frequency", Some(&["2"]))]),
        Protocol::Http,
    )
    .unwrap();
    assert_eq!(value(&s.view(None), "log_frequency"), ["2"]);
}

#[test]
fn a_models_settings_override_the_servers_until_cleared() {
    let mut s = tracing_every_request();
    s.update(
        Some("simple"),
        &set(&[("trace_rate", Some(&["3"]))]),
        Protocol::Http,
    )
    .unwrap();
    s.update(None, &set(&[("trace_rate", Some(&["7"]))]), Protocol::Http)
        .unwrap();
    assert_eq!(value(&s.view(Some("simple")), "trace_rate"), ["3"]);
    assert_eq!(value(&s.view(Some("other")), "trace_rate"), ["7"]);
    assert_eq!(
        value(&s.view(Some("simple")), "trace_level"),
        ["TIMESTAMPS"]
    );
    s.update(
        Some("simple"),
        &set(&[("trace_rate", None)]),
        Protocol::Http,
    )
    .unwrap();
    assert_eq!(value(&s.view(Some("simple")), "trace_rate"), ["7"]);
    // Cleared server-wide: back to the start's value.
    s.update(
        None,
        &set(&[("trace_rate", None), ("trace_level", None)]),
        Protocol::Http,
    )
    .unwrap();
    assert_eq!(value(&s.view(None), "trace_rate"), ["1000"]);
    assert_eq!(value(&s.view(None), "trace_level"), ["OFF"]);
}

#[test]
fn bad_values_are_refused_with_tritons_words_and_change_nothing() {
    let mut s = otel();
    let before = s.view(None);
    for (update, status, words) in [
        (
            set(&[("trace_rate", Some(&["abc"]))]),
            400,
            "Unable to parse 'trace_rate', got: abc",
        ),
        (
            set(&[
                ("trace_level", Some(&["TIMESTAMPS"])),
                ("trace_rate", Some(&["0"])),
            ]),
            400,
            "Attempting to set invalid trace setting :sample rate must be non-zero",
        ),
        (
            set(&[("trace_count", Some(&["-5"]))]),
            400,
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-5",
        ),
        (
            set(&[("trace_count", Some(&["x"]))]),
            400,
            "Unable to parse 'trace_count', got: x",
        ),
        (
            set(&[("trace_level", Some(&["OFF", "TIMESTAMPS"]))]),
            400,
            "Expect only one trace level 'OFF' is specified",
        ),
        (
            set(&[
                ("trace_level", Some(&["TIMESTAMPS"])),
                ("trace_file", Some(&["f"])),
            ]),
            501,
            "trace file location can not be updated through network protocol",
        ),
    ] {
        let e = s.update(None, &update, Protocol::Http).unwrap_err();
        assert_eq!(
            (e.http_status().as_u16(), e.message.as_str()),
            (status, words)
        );
        assert_eq!(s.view(None), before);
    }
    // Unknown keys and levels are skipped, as Triton skips them; "-1" wraps as stoul does.
    s.update(
        None,
        &set(&[("bogus", Some(&["1"])), ("trace_level", Some(&["FOO"]))]),
        Protocol::Http,
    )
    .unwrap();
    assert_eq!(s.view(None), before);
    s.update(None, &set(&[("trace_rate", Some(&["-1"]))]), Protocol::Http)
        .unwrap();
    assert_eq!(value(&s.view(None), "trace_rate"), ["4294967295"]);
}
