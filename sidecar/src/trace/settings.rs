//! The trace settings clients read and change (`/v2/trace/setting`, gRPC `TraceSetting`), with
//! Triton's rules: server-wide settings, a model's own settings over them, `null` (gRPC: no
//! values) to fall back, and which requests are sampled (`trace_rate`, `trace_count`).
//!
//! As in Triton, every change starts a new generation of the settings it touches (a server-wide
//! change, of every model's own too): counting for `trace_rate` starts again, and in Triton's
//! own mode the finished traces of the old generation are written (see `file`).

use std::collections::HashMap;
use std::sync::Arc;

use infergate_proto::config::{TraceConfig, TraceLevel, TraceMode};

use super::file::{Collector, TraceFile};
use crate::cxx_number::{self, CxxParseError};
use crate::error::{Error, Result};
use crate::protocol::Protocol;

/// The settings that change at run time, for the server or a model (where `None` is "as the
/// server's").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Overrides {
    levels: Option<Vec<TraceLevel>>,
    rate: Option<u32>,
    count: Option<i32>,
    log_frequency: Option<u32>,
}

impl Overrides {
    /// These settings over the server's.
    fn over(&self, global: &Resolved) -> Resolved {
        Resolved {
            levels: self.levels.clone().unwrap_or_else(|| global.levels.clone()),
            rate: self.rate.unwrap_or(global.rate),
            count: self.count.unwrap_or(global.count),
            log_frequency: self.log_frequency.unwrap_or(global.log_frequency),
        }
    }
}

/// One generation's sampling state: every `rate`-th request is traced while `count` allows; in
/// Triton's mode with a file, where its traces go.
#[derive(Debug, Default)]
struct Sampling {
    seen: u64,
    collector: Option<Arc<Collector>>,
}

/// The settings of the server and of each model that has its own.
#[derive(Debug)]
pub struct Settings {
    config: TraceConfig,
    /// Triton's mode with a file: where traces are written.
    file: Option<Arc<TraceFile>>,
    global: Resolved,
    global_sampling: Sampling,
    models: HashMap<String, (Overrides, Sampling)>,
}

/// Generations of settings that a change replaced; dropping them writes their traces.
#[derive(Debug)]
pub struct Retired(Vec<Sampling>);

/// A request to trace: at which levels, and (in Triton's mode) where its trace goes.
#[derive(Debug)]
pub struct Sampled {
    pub levels: Vec<TraceLevel>,
    pub collector: Option<Arc<Collector>>,
}

/// Every setting with a value.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    levels: Vec<TraceLevel>,
    rate: u32,
    count: i32,
    log_frequency: u32,
}

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

/// What `trace_level` (the only list) and every other key answer, in Triton's order.
pub type View = Vec<(&'static str, Vec<String>)>;

impl Settings {
    pub fn new(config: TraceConfig) -> Settings {
        let global = Resolved {
            levels: config.levels.clone(),
            rate: config.rate,
            count: config.count,
            log_frequency: config.log_frequency,
        };
        let file = match (config.mode, &config.file) {
            (TraceMode::Triton, Some(path)) => Some(Arc::new(TraceFile::new(path.clone()))),
            _ => None,
        };
        let mut settings = Settings {
            config,
            file,
            global,
            global_sampling: Sampling::default(),
            models: HashMap::new(),
        };
        settings.global_sampling = settings.generation(&settings.global);
        settings
    }

    /// A new generation's sampling state for settings resolved as `r`.
    fn generation(&self, r: &Resolved) -> Sampling {
        Sampling {
            seen: 0,
            collector: self
                .file
                .as_ref()
                .map(|file| Arc::new(Collector::new(file.clone(), r.log_frequency))),
        }
    }

    /// The trace file, in Triton's mode with one.
    pub fn file(&self) -> Option<&Arc<TraceFile>> {
        self.file.as_ref()
    }

    /// Retires every generation (their traces are written), as the server stops.
    pub fn retire(&mut self) {
        self.global_sampling = Sampling::default();
        for (_, sampling) in self.models.values_mut() {
            *sampling = Sampling::default();
        }
    }

    /// Whether any request may be traced: some scope has a level on.
    pub fn any_enabled(&self) -> bool {
        !self.global.levels.is_empty()
            || self
                .models
                .values()
                .any(|(o, _)| o.levels.as_ref().is_some_and(|l| !l.is_empty()))
    }

    fn resolved(&self, model: Option<&str>) -> Resolved {
        match model.and_then(|m| self.models.get(m)) {
            Some((own, _)) => own.over(&self.global),
            None => self.global.clone(),
        }
    }

    /// The settings a model (or, without one, the server) has, as the API answers them.
    pub fn view(&self, model: Option<&str>) -> View {
        let file = self.file.as_ref().map(|f| f.path().to_string());
        let r = self.resolved(model);
        let levels = if r.levels.is_empty() {
            vec!["OFF".to_string()]
        } else {
            r.levels.iter().map(|l| l.as_str().to_string()).collect()
        };
        let one = |v: String| vec![v];
        let mut view: View = vec![
            ("trace_level", levels),
            ("trace_rate", one(r.rate.to_string())),
            ("trace_count", one(r.count.to_string())),
        ];
        match self.config.mode {
            TraceMode::Triton => {
                view.push(("log_frequency", one(r.log_frequency.to_string())));
                view.push(("trace_file", one(file.unwrap_or_default())));
                view.push(("trace_mode", one("triton".into())));
            }
            TraceMode::OpenTelemetry => {
                let c = &self.config;
                view.push(("trace_mode", one("opentelemetry".into())));
                if c.url_given {
                    // Triton lists the OpenTelemetry settings given at start, and the batch
                    // processor's whether given or not.
                    view.push(("url", one(c.url.clone())));
                }
                view.push((
                    "bsp_max_export_batch_size",
                    one(c.bsp_max_export_batch_size.to_string()),
                ));
                view.push((
                    "bsp_schedule_delay",
                    one(c.bsp_schedule_delay_ms.to_string()),
                ));
                view.push(("bsp_max_queue_size", one(c.bsp_max_queue_size.to_string())));
            }
        }
        view
    }

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

    /// Whether this request of `model` is traced, and at which levels: one in `rate`, while the
    /// count (of the model's own settings, or else the server's) lasts, which it then uses up.
    pub fn sample(&mut self, model: &str) -> Option<Sampled> {
        let resolved = self.resolved(Some(model));
        if resolved.levels.is_empty() || resolved.count == 0 {
            return None;
        }
        let own = self.models.get_mut(model);
        let counts_own = own.as_ref().is_some_and(|(o, _)| o.count.is_some());
        let sampling = match own {
            Some((_, sampling)) => sampling,
            None => &mut self.global_sampling,
        };
        sampling.seen += 1;
        let seen = sampling.seen;
        // A rate of 0 never samples (a level cannot be on with it; this is for safety).
        if resolved.rate == 0 || seen % u64::from(resolved.rate) != 0 {
            return None;
        }
        let collector = sampling.collector.clone();
        if resolved.count > 0 {
            let count = match (counts_own, self.models.get_mut(model)) {
                (true, Some((own, _))) => own.count.as_mut(),
                _ => Some(&mut self.global.count),
            };
            if let Some(count) = count {
                *count -= 1;
                // No request is counted after this one: the trace file's count rule.
                if let (0, Some(collector)) = (*count, &collector) {
                    collector.used_up(seen);
                }
            }
        }
        Some(Sampled {
            levels: resolved.levels,
            collector,
        })
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
mod tests {
    use super::*;

    fn otel() -> Settings {
        let mut config = TraceConfig::parse(&["mode=opentelemetry".to_string()]).unwrap();
        config.url = "127.0.0.1:4318/v1/traces".into();
        Settings::new(config)
    }

    fn set(pairs: &[(&str, Option<&[&str]>)]) -> Update {
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

    fn value(view: &View, key: &str) -> Vec<String> {
        view.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

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
        assert!(
            keys(&["mode=opentelemetry", "opentelemetry,url=c:4318/v1/traces"]).contains(&"url")
        );
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
    fn a_models_settings_override_the_servers_until_cleared() {
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
}
