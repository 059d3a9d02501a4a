//! Logging: text or JSON lines on stderr, or text lines in Triton's layouts, with a level (and,
//! for text, a layout) that `/v2/logging` and the gRPC `LogSettings` RPC change at run time.
//! Request payloads are never logged.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

use crate::log_line::{self, Layout};

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
        log_line::write(&mut writer, layout, self.escape, SystemTime::now(), event)?;
        fmt::Write::write_char(&mut writer, '\n')
    }
}

/// Current settings plus the hooks that apply a new level, and a new layout of text lines, to
/// the running subscriber.
pub struct LogControl {
    settings: Mutex<LogSettings>,
    apply: Option<Reloader>,
    /// The style of text lines; `None` for JSON lines, which keep their own layout.
    style: Option<Arc<AtomicU8>>,
}

impl LogControl {
    /// A control that records settings without a subscriber (tests).
    pub fn detached(level: &str) -> Self {
        LogControl {
            settings: Mutex::new(LogSettings::from_level(level)),
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

/// Installs the global subscriber. `level` is one of error, warn, info, debug, trace; `format`
/// one of text, json, or Triton's layouts `default` and `ISO8601`.
pub fn init(level: &str, format: &str) -> LogControl {
    let filter = EnvFilter::new(filter_directive(level));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let json = format == "json";
    let style = Arc::new(AtomicU8::new(style_of(Layout::named(format))));
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
                    .with_writer(std::io::stderr)
                    .event_format(Lines {
                        style: style.clone(),
                        escape: log_line::escape_from_env(),
                        text: Format::default(),
                    }),
            )
            .try_init()
    };
    if let Err(err) = result {
        eprintln!("logging was already initialized: {err}");
    }
    let apply: Reloader = Arc::new(move |level: &str| {
        let _ = handle.modify(|f| *f = EnvFilter::new(filter_directive(level)));
    });
    let mut settings = LogSettings::from_level(level);
    if format == "ISO8601" {
        settings.log_format = format.to_string();
    }
    LogControl {
        settings: Mutex::new(settings),
        apply: Some(apply),
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
            settings: Mutex::new(LogSettings::from_level("info")),
            apply: None,
            style: Some(style.clone()),
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
}
