//! Changing the log settings (REST `POST /v2/logging`, gRPC `LogSettings`) as Triton does: the
//! settings it knows, in its fixed order (`log_file`, `log_info`, `log_warning`, `log_error`,
//! `log_verbose_level`, `log_format`), each applied as soon as it is read, so that the ones
//! before an invalid one stay changed; names it does not know are ignored. The two front ends
//! differ in their error codes and texts: REST's come from Triton's JSON helper (INTERNAL), gRPC's
//! are its own (INVALID_ARGUMENT).

use super::subscriber::LogSettings;
use crate::error::{Error, Result};
use crate::protocol::Protocol;

/// One setting's value as the request gave it.
pub enum LogValue {
    /// JSON `null`: REST leaves the setting as it is.
    Null,
    Bool(bool),
    Uint(u64),
    String(String),
    /// Any other JSON type, or a gRPC value with no choice set.
    Other,
}

/// Applies the settings `take` yields (it is asked for each name Triton knows, once).
pub fn update(
    settings: &mut LogSettings,
    protocol: Protocol,
    mut take: impl FnMut(&str) -> Option<LogValue>,
) -> Result<()> {
    if let Some(value) = take("log_file")
        && (protocol == Protocol::Grpc || !matches!(value, LogValue::Null))
    {
        return Err(Error::unsupported(
            "log file location can not be updated through network protocol",
        ));
    }
    for key in ["log_info", "log_warning", "log_error"] {
        let Some(value) = present(take(key), protocol) else {
            continue;
        };
        let LogValue::Bool(on) = value else {
            return Err(wrong_type(protocol, key, "boolean", "boolean"));
        };
        match key {
            "log_info" => settings.log_info = on,
            "log_warning" => settings.log_warning = on,
            _ => settings.log_error = on,
        }
    }
    if let Some(value) = present(take("log_verbose_level"), protocol) {
        let LogValue::Uint(level) = value else {
            return Err(wrong_type(
                protocol,
                "log_verbose_level",
                "unsigned-integer",
                "int32",
            ));
        };
        // Triton keeps the level as an int32; larger values are cut to that width as it does.
        settings.log_verbose_level = level as u32;
    }
    if let Some(value) = present(take("log_format"), protocol) {
        let LogValue::String(format) = value else {
            return Err(wrong_type(protocol, "log_format", "string", "string"));
        };
        if format != "default" && format != "ISO8601" {
            return Err(match protocol {
                Protocol::Http => {
                    Error::unavailable(format!("invalid argument for --log_format, got: {format}"))
                }
                Protocol::Grpc => {
                    Error::invalid_arg(format!("invalid argument for log_format, got: {format}"))
                }
            });
        }
        settings.log_format = format;
    }
    Ok(())
}

/// A value to apply: REST skips a `null`.
fn present(value: Option<LogValue>, protocol: Protocol) -> Option<LogValue> {
    match value {
        Some(LogValue::Null) if protocol == Protocol::Http => None,
        other => other,
    }
}

fn wrong_type(protocol: Protocol, key: &str, json_type: &str, grpc_type: &str) -> Error {
    match protocol {
        Protocol::Http => Error::internal(format!(
            "attempt to access JSON non-{json_type} as {json_type}"
        )),
        Protocol::Grpc => Error::invalid_arg(format!("expect {grpc_type} for '{key}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings() -> LogSettings {
        LogSettings {
            log_file: String::new(),
            log_info: true,
            log_warning: true,
            log_error: true,
            log_verbose_level: 0,
            log_format: "default".into(),
        }
    }

    fn apply(protocol: Protocol, pairs: Vec<(&str, LogValue)>) -> (LogSettings, Result<()>) {
        let mut given: HashMap<&str, LogValue> = pairs.into_iter().collect();
        let mut s = settings();
        let result = update(&mut s, protocol, |k| given.remove(k));
        (s, result)
    }

    #[test]
    fn unknown_names_and_rest_nulls_are_ignored() {
        let (s, r) = apply(
            Protocol::Http,
            vec![("nope", LogValue::Uint(1)), ("log_info", LogValue::Null)],
        );
        assert!(r.is_ok());
        assert_eq!(s, settings());
    }

    #[test]
    fn settings_before_an_invalid_one_stay_applied() {
        let (s, r) = apply(
            Protocol::Http,
            vec![
                ("log_format", LogValue::String("x".into())),
                ("log_warning", LogValue::Bool(false)),
                ("log_verbose_level", LogValue::Uint(3)),
            ],
        );
        let e = r.unwrap_err();
        assert_eq!(e.message, "invalid argument for --log_format, got: x");
        assert!(!s.log_warning);
        assert_eq!(s.log_verbose_level, 3);
    }

    #[test]
    fn wrong_types_answer_per_front() {
        let (_, r) = apply(Protocol::Http, vec![("log_error", LogValue::Uint(1))]);
        assert_eq!(
            r.unwrap_err().message,
            "attempt to access JSON non-boolean as boolean"
        );
        let (_, r) = apply(Protocol::Grpc, vec![("log_verbose_level", LogValue::Other)]);
        assert_eq!(
            r.unwrap_err().message,
            "expect int32 for 'log_verbose_level'"
        );
        let (_, r) = apply(Protocol::Grpc, vec![("log_file", LogValue::Null)]);
        assert_eq!(
            r.unwrap_err().message,
            "log file location can not be updated through network protocol"
        );
    }
}
