//! The subscriber every log line goes through: installed at start from the server's settings
//! ([`init`]), with severity switches, a level (and, for text, a layout) that `/v2/logging` and
//! the gRPC `LogSettings` RPC change at run time through [`LogControl`]; and Triton's settings as
//! `/v2/logging` reports them ([`LogSettings`]). Request payloads are never logged.

use std::fmt;
use std::fs::OpenOptions;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::SystemTime;

use infergate_config::ServerSettings;
use parking_lot::Mutex;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Filter, Layer as _, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

use super::line::{self, Layout};

/// Triton's log settings, as `/v2/logging` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// Where lines go: a file's path, or empty for stderr. Set at start only.
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

impl LogSettings {
    /// The settings a start gives: the level's, then Triton's switches over them.
    fn at_start(server: &ServerSettings) -> Self {
        let mut settings = LogSettings::from_level(&server.log_level);
        settings.log_info = server.log_info.unwrap_or(settings.log_info);
        settings.log_warning = server.log_warning.unwrap_or(settings.log_warning);
        settings.log_error = server.log_error.unwrap_or(settings.log_error);
        settings.log_verbose_level = server.log_verbose.unwrap_or(settings.log_verbose_level);
        if server.log_format == "ISO8601" {
            settings.log_format = server.log_format.clone();
        }
        settings
    }

    fn from_level(level: &str) -> Self {
        let (info, warn, verbose) = match level {
            "error" => (false, false, 0),
            "warn" => (false, true, 0),
            "debug" => (true, true, 1),
            "trace" => (true, true, 2),
            _ => (true, true, 0),
        };
        LogSettings {
            log_file: String::new(),
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

/// How text lines are laid out: tracing's own, or one of Triton's.
const TEXT: u8 = 0;
const TRITON_DEFAULT: u8 = 1;
const TRITON_ISO8601: u8 = 2;

fn style_of(layout: Option<Layout>) -> u8 {
    match layout {
        None => TEXT,
        Some(Layout::Default) => TRITON_DEFAULT,
        Some(Layout::Iso8601) => TRITON_ISO8601,
    }
}

/// Text lines in the style `style` holds, which a `log_format` change switches.
struct Lines {
    style: Arc<AtomicU8>,
    /// Triton's layouts write the message as a JSON string unless told not to.
    escape: bool,
    text: Format,
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let layout = match self.style.load(Ordering::Relaxed) {
            TRITON_DEFAULT => Layout::Default,
            TRITON_ISO8601 => Layout::Iso8601,
            _ => return self.text.format_event(ctx, writer, event),
        };
        line::write(&mut writer, layout, self.escape, SystemTime::now(), event)?;
        fmt::Write::write_char(&mut writer, '\n')
    }
}

/// Triton's three severity switches, each on its own: errors, warnings and info lines can be
/// turned off apart (`log_error` off with `log_warning` on hides errors and shows warnings).
/// Debug and trace lines, Triton's verbose ones, follow `log_verbose_level` alone, through the
/// level filter, which lets through the most verbose of what is on.
#[derive(Debug)]
struct Severities {
    info: AtomicBool,
    warning: AtomicBool,
    error: AtomicBool,
}

impl Severities {
    fn of(settings: &LogSettings) -> Severities {
        let severities = Severities {
            info: AtomicBool::new(false),
            warning: AtomicBool::new(false),
            error: AtomicBool::new(false),
        };
        severities.set(settings);
        severities
    }

    fn set(&self, settings: &LogSettings) {
        self.info.store(settings.log_info, Ordering::Relaxed);
        self.warning.store(settings.log_warning, Ordering::Relaxed);
        self.error.store(settings.log_error, Ordering::Relaxed);
    }

    fn allow(&self, level: &Level) -> bool {
        match *level {
            Level::ERROR => self.error.load(Ordering::Relaxed),
            Level::WARN => self.warning.load(Ordering::Relaxed),
            Level::INFO => self.info.load(Ordering::Relaxed),
            _ => true,
        }
    }
}

/// The severity switches as a filter of the log lines (asked each time: they change at run
/// time, so no answer is cached per call site).
struct SeverityFilter(Arc<Severities>);

impl<S> Filter<S> for SeverityFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.0.allow(meta.level())
    }

    fn callsite_enabled(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
}

/// Current settings plus the hooks that apply a new level, and a new layout of text lines, to
/// the running subscriber.
pub struct LogControl {
    settings: Mutex<LogSettings>,
    apply: Option<Reloader>,
    severities: Arc<Severities>,
    /// The style of text lines; `None` for JSON lines, which keep their own layout.
    style: Option<Arc<AtomicU8>>,
}

impl LogControl {
    /// A control that records settings without a subscriber (tests).
    pub fn detached(level: &str) -> Self {
        let settings = LogSettings::from_level(level);
        LogControl {
            severities: Arc::new(Severities::of(&settings)),
            settings: Mutex::new(settings),
            apply: None,
            style: None,
        }
    }

    pub fn get(&self) -> LogSettings {
        self.settings.lock().clone()
    }

    /// Applies `settings`. A `log_format` that changes switches text lines to that Triton
    /// layout (tracing's own text, which started as `default`, stays until the first change).
    pub fn set(&self, settings: LogSettings) {
        if let Some(apply) = &self.apply {
            apply(settings.filter());
        }
        self.severities.set(&settings);
        let mut current = self.settings.lock();
        if let Some(style) = &self.style
            && settings.log_format != current.log_format
        {
            style.store(
                style_of(Layout::named(&settings.log_format)),
                Ordering::Relaxed,
            );
        }
        *current = settings;
    }
}

/// Installs the global subscriber, with the server's log settings: its level and Triton's
/// switches, its line format (text, json, or Triton's layouts `default` and `ISO8601`) and where
/// lines go (stderr, or appended to `log_file`; one that cannot be opened leaves them on stderr,
/// with a warning, as Triton goes on without it).
pub fn init(server: &ServerSettings) -> LogControl {
    let mut settings = LogSettings::at_start(server);
    let (writer, file_error) = match server.log_file.as_deref().filter(|f| !f.is_empty()) {
        None => (BoxMakeWriter::new(std::io::stderr), None),
        Some(path) => match OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => {
                settings.log_file = path.to_string();
                (BoxMakeWriter::new(Arc::new(file)), None)
            }
            Err(e) => (
                BoxMakeWriter::new(std::io::stderr),
                Some(format!("{path}: {e}")),
            ),
        },
    };
    let to_terminal = settings.log_file.is_empty() && std::io::stderr().is_terminal();
    let filter = EnvFilter::new(filter_directive(settings.filter()));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let json = server.log_format == "json";
    let style = Arc::new(AtomicU8::new(style_of(Layout::named(&server.log_format))));
    let severities = Arc::new(Severities::of(&settings));
    let gate = SeverityFilter(severities.clone());
    let result = if json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(writer)
                    .flatten_event(true)
                    .with_filter(gate),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(to_terminal)
                    .with_writer(writer)
                    .event_format(Lines {
                        style: style.clone(),
                        escape: line::escape_from_env(),
                        text: Format::default(),
                    })
                    .with_filter(gate),
            )
            .try_init()
    };
    if let Err(err) = result {
        eprintln!("logging was already initialized: {err}");
    }
    if let Some(error) = file_error {
        tracing::warn!(%error, "cannot open the log file; logging to stderr");
    }
    let apply: Reloader = Arc::new(move |level: &str| {
        let _ = handle.modify(|f| *f = EnvFilter::new(filter_directive(level)));
    });
    LogControl {
        settings: Mutex::new(settings),
        apply: Some(apply),
        severities,
        style: (!json).then_some(style),
    }
}

fn filter_directive(level: &str) -> String {
    // Our crates at the chosen level; the libraries below us one notch quieter.
    format!("{level},h2=warn,hyper=warn,tower=warn")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_format_change_switches_text_lines_and_nothing_else_does() {
        let style = Arc::new(AtomicU8::new(TEXT));
        let control = LogControl {
            style: Some(style.clone()),
            ..LogControl::detached("info")
        };
        let with = |format: &str, verbose: u32| LogSettings {
            log_format: format.into(),
            log_verbose_level: verbose,
            ..control.get()
        };
        // Started as text, reported as Triton's `default`: setting `default` again keeps text.
        control.set(with("default", 1));
        assert_eq!(style.load(Ordering::Relaxed), TEXT);
        control.set(with("ISO8601", 1));
        assert_eq!(style.load(Ordering::Relaxed), TRITON_ISO8601);
        control.set(with("ISO8601", 0));
        assert_eq!(style.load(Ordering::Relaxed), TRITON_ISO8601);
        control.set(with("default", 0));
        assert_eq!(style.load(Ordering::Relaxed), TRITON_DEFAULT);
        assert_eq!(control.get().log_format, "default");
    }

    #[test]
    fn each_severity_is_switched_on_its_own() {
        let control = LogControl::detached("info");
        let allowed = |c: &LogControl| {
            [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG].map(|l| c.severities.allow(&l))
        };
        assert_eq!(allowed(&control), [true, true, true, true]);
        control.set(LogSettings {
            log_error: false,
            log_info: false,
            log_verbose_level: 1,
            ..control.get()
        });
        // Warnings only, and the verbose (debug) lines the level filter lets through.
        assert_eq!(allowed(&control), [false, true, false, true]);
        assert_eq!(control.get().filter(), "debug");
    }
}
