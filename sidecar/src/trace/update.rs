//! A change to the trace settings, as Triton reads and applies it: the settings it reads, in its
//! order, the first refusal in that order the answer, and `null` (gRPC: no values) to fall back
//! to the server's setting (or the start's); all or nothing. A change starts a new generation of
//! the settings it touches (see `settings`).

use infergate_config::{TraceLevel, TraceMode};

use super::settings::{Overrides, Resolved, Retired, Settings};
use crate::cxx_number::{self, CxxParseError};
use crate::error::{Error, Result};
use crate::protocol::Protocol;

/// One setting as a request gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Given {
    /// REST `null`, or gRPC without values: back to the server's setting (or the start's).
    Clear,
    Values(Vec<String>),
    /// A REST value of the wrong JSON type, with the words of Triton's JSON accessor.
    Unreadable(&'static str),
}

/// A change asked for: settings by name, in the request's order (the first of a repeated name
/// counts, as Triton's lookups find it).
pub type Update = Vec<(String, Given)>;

/// The settings Triton reads from a change, in the order it reads them: the first refusal in
/// this order is the answer, whatever order the request gave them in. Others are ignored.
pub const READ_ORDER: [&str; 5] = [
    "trace_file",
    "trace_level",
    "trace_rate",
    "trace_count",
    "log_frequency",
];

impl Settings {
    /// Applies `update` to a model's settings (or the server's) as Triton does, all or nothing:
    /// unknown keys are ignored, as are the ones only the start sets (`trace_mode`, the exporter's).
    /// Answers the generations it replaced: dropping them writes what they held, best done
    /// outside any lock.
    pub fn update(
        &mut self,
        model: Option<&str>,
        update: &Update,
        via: Protocol,
    ) -> Result<Retired> {
        let mut retired = Retired(Vec::new());
        let mut changes = Overrides::default();
        let mut cleared = Overrides::default();
        for key in READ_ORDER {
            let Some((_, given)) = update.iter().find(|(k, _)| k == key) else {
                continue;
            };
            if key == "trace_file" {
                return Err(Error::unsupported(
                    "trace file location can not be updated through network protocol",
                ));
            }
            let values = match given {
                Given::Clear => None,
                Given::Values(values) => Some(values),
                Given::Unreadable(words) => return Err(Error::internal(*words)),
            };
            if key == "trace_level" {
                match values {
                    None => cleared.levels = Some(Vec::new()),
                    Some(names) => changes.levels = Some(parse_levels(names)?),
                }
                continue;
            }
            let Some(text) = single(key, values)? else {
                match key {
                    "trace_rate" => cleared.rate = Some(0),
                    "trace_count" => cleared.count = Some(0),
                    _ => cleared.log_frequency = Some(0),
                }
                continue;
            };
            match key {
                "trace_rate" => changes.rate = Some(parse_unsigned(key, text)?),
                "trace_count" => changes.count = Some(parse_count(text, via)?),
                _ => changes.log_frequency = Some(parse_unsigned(key, text)?),
            }
        }
        match model {
            None => {
                let start = &self.config;
                let mut global = self.global.clone();
                apply(
                    &mut global.levels,
                    changes.levels,
                    cleared.levels.is_some(),
                    || start.levels.clone(),
                );
                apply(
                    &mut global.rate,
                    changes.rate,
                    cleared.rate.is_some(),
                    || start.rate,
                );
                apply(
                    &mut global.count,
                    changes.count,
                    cleared.count.is_some(),
                    || start.count,
                );
                apply(
                    &mut global.log_frequency,
                    changes.log_frequency,
                    cleared.log_frequency.is_some(),
                    || start.log_frequency,
                );
                self.check(&global)?;
                self.global = global;
                // A new generation of the server's settings and, as in Triton, of every
                // model's own (they read the server's for what they do not set).
                let fresh = self.generation(&self.global);
                retired
                    .0
                    .push(std::mem::replace(&mut self.global_sampling, fresh));
                let models: Vec<String> = self.models.keys().cloned().collect();
                for model in models {
                    let fresh = self.generation(&self.resolved(Some(&model)));
                    if let Some((_, sampling)) = self.models.get_mut(&model) {
                        retired.0.push(std::mem::replace(sampling, fresh));
                    }
                }
            }
            Some(model) => {
                let mut own = self
                    .models
                    .get(model)
                    .map(|(own, _)| own.clone())
                    .unwrap_or_default();
                merge(&mut own.levels, changes.levels, cleared.levels.is_some());
                merge(&mut own.rate, changes.rate, cleared.rate.is_some());
                merge(&mut own.count, changes.count, cleared.count.is_some());
                merge(
                    &mut own.log_frequency,
                    changes.log_frequency,
                    cleared.log_frequency.is_some(),
                );
                let resolved = own.over(&self.global);
                self.check(&resolved)?;
                if own == Overrides::default() {
                    if let Some((_, old)) = self.models.remove(model) {
                        retired.0.push(old);
                    }
                } else {
                    let sampling = self.generation(&resolved);
                    if let Some((_, old)) = self.models.insert(model.to_string(), (own, sampling)) {
                        retired.0.push(old);
                    }
                }
            }
        }
        Ok(retired)
    }

    /// Triton's one check of settings as they would be: with a level on, they must sample
    /// (a rate above 0) and, in its own mode, have a file to write to.
    fn check(&self, r: &Resolved) -> Result<()> {
        if r.levels.is_empty() {
            return Ok(());
        }
        if r.rate == 0 {
            return Err(invalid_setting("sample rate must be non-zero"));
        }
        if self.config.mode == TraceMode::Triton && self.file.is_none() {
            return Err(invalid_setting("trace file name is not given"));
        }
        Ok(())
    }
}

/// The one value of a single-valued setting (`None`: cleared). gRPC can send several.
fn single<'a>(key: &str, values: Option<&'a Vec<String>>) -> Result<Option<&'a str>> {
    match values.map(Vec::as_slice) {
        None | Some([]) => Ok(None),
        Some([one]) => Ok(Some(one)),
        Some(_) => Err(Error::invalid_arg(format!(
            "expect only 1 value for '{key}'"
        ))),
    }
}

/// A server-wide setting: a new value, or back to the start's.
fn apply<T>(slot: &mut T, change: Option<T>, cleared: bool, start: impl FnOnce() -> T) {
    if let Some(v) = change {
        *slot = v;
    } else if cleared {
        *slot = start();
    }
}

/// A model's setting: its own value, or back to the server's.
fn merge<T>(slot: &mut Option<T>, change: Option<T>, cleared: bool) {
    if change.is_some() {
        *slot = change;
    } else if cleared {
        *slot = None;
    }
}

fn invalid_setting(detail: &str) -> Error {
    Error::invalid_arg(format!("Attempting to set invalid trace setting :{detail}"))
}

/// Levels as Triton reads them: OFF alone, or any of the others; names it does not know are
/// skipped, as Triton skips them.
fn parse_levels(names: &[String]) -> Result<Vec<TraceLevel>> {
    let mut levels = Vec::new();
    for name in names {
        match TraceLevel::parse(name) {
            Ok(None) if names.len() > 1 => {
                return Err(Error::invalid_arg(
                    "Expect only one trace level 'OFF' is specified",
                ));
            }
            Ok(None) | Err(_) => {}
            Ok(Some(level)) => {
                if !levels.contains(&level) {
                    levels.push(level);
                }
            }
        }
    }
    levels.sort();
    Ok(levels)
}

/// An unsigned setting as Triton reads it: `std::stoi` into 32 unsigned bits ("-1" wraps
/// around, beyond `int` is out of range).
fn parse_unsigned(key: &str, text: &str) -> Result<u32> {
    match cxx_number::stoi(text) {
        Ok(n) => Ok(n as u32),
        Err(CxxParseError::Invalid) => Err(Error::invalid_arg(format!(
            "Unable to parse '{key}', got: {text}"
        ))),
        Err(CxxParseError::OutOfRange) => Err(Error::invalid_arg(format!(
            "Unable to parse '{key}', value is out of range [ 0, {} ], got: {text}",
            u32::MAX
        ))),
    }
}

fn parse_count(text: &str, via: Protocol) -> Result<i32> {
    let count = cxx_number::stoi(text).map_err(|e| match e {
        CxxParseError::Invalid => {
            Error::invalid_arg(format!("Unable to parse 'trace_count', got: {text}"))
        }
        CxxParseError::OutOfRange => Error::invalid_arg(format!(
            "Unable to parse 'trace_count', value is out of range [ -1, {} ], got: {text}",
            i32::MAX
        )),
    })?;
    if count < -1 {
        // Triton's REST and gRPC front ends space this one differently.
        let space = match via {
            Protocol::Http => "",
            Protocol::Grpc => " ",
        };
        return Err(Error::invalid_arg(format!(
            "Unable to parse 'trace_count'. Expecting value >= -1, got:{space}{text}"
        )));
    }
    Ok(count)
}

#[cfg(test)]
mod tests;
