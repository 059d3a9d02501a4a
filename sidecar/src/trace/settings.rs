//! The trace settings clients read (`/v2/trace/setting`, gRPC `TraceSetting`), with Triton's
//! rules: server-wide settings, a model's own settings over them, and which requests are sampled
//! (`trace_rate`, `trace_count`). A change is read and applied in `update`.
//!
//! As in Triton, every change starts a new generation of the settings it touches (a server-wide
//! change, of every model's own too): counting for `trace_rate` starts again, and in Triton's
//! own mode the finished traces of the old generation are written (see `file`).

use std::collections::HashMap;
use std::sync::Arc;

use infergate_config::{TraceConfig, TraceLevel, TraceMode};

use super::file::{Collector, TraceFile};

/// The settings that change at run time, for the server or a model (where `None` is "as the
/// server's").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Overrides {
    pub(super) levels: Option<Vec<TraceLevel>>,
    pub(super) rate: Option<u32>,
    pub(super) count: Option<i32>,
    pub(super) log_frequency: Option<u32>,
}

impl Overrides {
    /// These settings over the server's.
    pub(super) fn over(&self, global: &Resolved) -> Resolved {
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
pub(super) struct Sampling {
    seen: u64,
    collector: Option<Arc<Collector>>,
}

/// The settings of the server and of each model that has its own.
#[derive(Debug)]
pub struct Settings {
    pub(super) config: TraceConfig,
    /// Triton's mode with a file: where traces are written.
    pub(super) file: Option<Arc<TraceFile>>,
    pub(super) global: Resolved,
    pub(super) global_sampling: Sampling,
    pub(super) models: HashMap<String, (Overrides, Sampling)>,
}

/// Generations of settings that a change replaced; dropping them writes their traces.
#[derive(Debug)]
pub struct Retired(pub(super) Vec<Sampling>);

/// A request to trace: at which levels, and (in Triton's mode) where its trace goes.
#[derive(Debug)]
pub struct Sampled {
    pub levels: Vec<TraceLevel>,
    pub collector: Option<Arc<Collector>>,
}

/// Every setting with a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Resolved {
    pub(super) levels: Vec<TraceLevel>,
    pub(super) rate: u32,
    pub(super) count: i32,
    pub(super) log_frequency: u32,
}

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
    pub(super) fn generation(&self, r: &Resolved) -> Sampling {
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

    pub(super) fn resolved(&self, model: Option<&str>) -> Resolved {
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

#[cfg(test)]
pub(super) mod tests;
