//! Logging: text or JSON lines on stderr, with a level that `/v2/logging` and the gRPC
//! `LogSettings` RPC change at run time. Request payloads are never logged.

use std::sync::Arc;

use parking_lot::Mutex;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

/// Triton's log settings, as `/v2/logging` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

impl LogSettings {
    fn from_level(level: &str) -> Self {
        let (info, warn, verbose) = match level {
            "error" => (false, false, 0),
            "warn" => (false, true, 0),
            "debug" => (true, true, 1),
            "trace" => (true, true, 2),
            _ => (true, true, 0),
        };
        LogSettings {
            log_info: info,
            log_warning: warn,
            log_error: true,
            log_verbose_level: verbose,
            log_format: "default".into(),
        }
    }

    /// The tracing filter these settings mean.
    pub fn filter(&self) -> &'static str {
        match (
            self.log_verbose_level,
            self.log_info,
            self.log_warning,
            self.log_error,
        ) {
            (v, _, _, _) if v >= 2 => "trace",
            (1, _, _, _) => "debug",
            (_, true, _, _) => "info",
            (_, false, true, _) => "warn",
            (_, false, false, true) => "error",
            _ => "off",
        }
    }
}

type Reloader = Arc<dyn Fn(&str) + Send + Sync>;

/// Current settings plus the hook that applies a new level to the running subscriber.
pub struct LogControl {
    settings: Mutex<LogSettings>,
    apply: Option<Reloader>,
}

impl LogControl {
    /// A control that records settings without a subscriber (tests).
    pub fn detached(level: &str) -> Self {
        LogControl {
            settings: Mutex::new(LogSettings::from_level(level)),
            apply: None,
        }
    }

    pub fn get(&self) -> LogSettings {
        self.settings.lock().clone()
    }

    pub fn set(&self, settings: LogSettings) {
        if let Some(apply) = &self.apply {
            apply(settings.filter());
        }
        *self.settings.lock() = settings;
    }
}

/// Installs the global subscriber. `level` is one of error, warn, info, debug, trace.
pub fn init(level: &str, json: bool) -> LogControl {
    let filter = EnvFilter::new(filter_directive(level));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .flatten_event(true),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(std::io::stderr),
            )
            .try_init()
    };
    if let Err(err) = result {
        eprintln!("logging was already initialized: {err}");
    }
    let apply: Reloader = Arc::new(move |level: &str| {
        let _ = handle.modify(|f| *f = EnvFilter::new(filter_directive(level)));
    });
    LogControl {
        settings: Mutex::new(LogSettings::from_level(level)),
        apply: Some(apply),
    }
}

fn filter_directive(level: &str) -> String {
    // Our crates at the chosen level; the libraries below us one notch quieter.
    format!("{level},h2=warn,hyper=warn,tower=warn")
}
