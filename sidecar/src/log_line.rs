//! Log lines in Triton's layouts, which its logging setting `log_format` names:
//!
//! - `default`: `I1129 04:20:00.123456 4242 main.rs:65] "message" key=value ...`
//! - `ISO8601`: `2026-11-29T04:20:00Z I 4242 main.rs:65] "message" key=value ...`
//!
//! As in Triton (`common/src/logging.cc`): the level letter (`E`, `W`, `I`; debug and trace
//! lines, Triton's verbose ones, are `I`), UTC time, the process id, the source file's name and
//! line, then the message as a JSON string, unless `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` asks for
//! it as it is. The event's other fields follow the message as `key=value`, which Triton's lines
//! do not have.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level};

/// Which of Triton's two layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Default,
    Iso8601,
}

impl Layout {
    /// The layout `log_format` names (`default`, `ISO8601`).
    pub fn named(name: &str) -> Option<Layout> {
        match name {
            "default" => Some(Layout::Default),
            "ISO8601" => Some(Layout::Iso8601),
            _ => None,
        }
    }
}

/// Whether messages are written as JSON strings (Triton's default) or as they are.
pub fn escape_from_env() -> bool {
    std::env::var("TRITON_SERVER_ESCAPE_LOG_MESSAGES").map_or(true, |v| v != "0")
}

/// Writes `event` as one line (without the line break) in `layout`, at `now`.
pub fn write(
    out: &mut impl fmt::Write,
    layout: Layout,
    escape: bool,
    now: SystemTime,
    event: &Event<'_>,
) -> fmt::Result {
    let meta = event.metadata();
    let level = match *meta.level() {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let time = Civil::from_unix(since.as_secs());
    let micros = since.subsec_micros();
    let file = meta
        .file()
        .map_or("", |f| f.rsplit('/').next().unwrap_or(f));
    let line = meta.line().unwrap_or(0);
    let pid = std::process::id();
    match layout {
        Layout::Default => write!(
            out,
            "{level}{:02}{:02} {:02}:{:02}:{:02}.{micros:06} {pid} {file}:{line}] ",
            time.month, time.day, time.hour, time.minute, time.second
        )?,
        Layout::Iso8601 => write!(
            out,
            "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z {level} {pid} {file}:{line}] ",
            time.year, time.month, time.day, time.hour, time.minute, time.second
        )?,
    }
    let mut fields = Fields::default();
    event.record(&mut fields);
    if escape {
        let mut quoted = crate::json::Writer::default();
        quoted.string(fields.message.as_bytes());
        out.write_str(&String::from_utf8_lossy(&quoted.buf))?;
    } else {
        out.write_str(&fields.message)?;
    }
    out.write_str(&fields.rest)
}

/// An event's message, and its other fields as ` key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// A UTC date and time of day.
#[derive(Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
}

impl Civil {
    /// Seconds since the Unix epoch as a proleptic Gregorian UTC date and time (the days-to-civil
    /// conversion counts in 400-year eras of 146,097 days, from 0000-03-01).
    fn from_unix(secs: u64) -> Civil {
        let days = (secs / 86_400) as i64;
        let of_day = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: of_day / 3_600,
            minute: of_day % 3_600 / 60,
            second: of_day % 60,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tracing::Subscriber;
    use tracing_subscriber::layer::{Context, SubscriberExt};

    use super::*;

    #[test]
    fn civil_dates_across_leap_years_and_centuries() {
        let at = |secs| Civil::from_unix(secs);
        assert_eq!(
            at(0),
            Civil {
                year: 1970,
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0
            }
        );
        // 2000-02-29T23:59:59Z, 2024-12-31T12:34:56Z, 2100-03-01T00:00:00Z.
        let show = |c: Civil| {
            format!(
                "{}-{:02}-{:02}T{:02}:{:02}:{:02}",
                c.year, c.month, c.day, c.hour, c.minute, c.second
            )
        };
        assert_eq!(show(at(951_868_799)), "2000-02-29T23:59:59");
        assert_eq!(show(at(1_735_648_496)), "2024-12-31T12:34:56");
        assert_eq!(show(at(4_107_542_400)), "2100-03-01T00:00:00");
    }

    /// Formats every event it sees, as the log layer would.
    struct Capture {
        layout: Layout,
        escape: bool,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl<S: Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut line = String::new();
            let at = UNIX_EPOCH + Duration::from_micros(1_795_925_000_123_456);
            write(&mut line, self.layout, self.escape, at, event).unwrap();
            self.lines.lock().unwrap().push(line);
        }
    }

    fn lines(layout: Layout, escape: bool) -> Vec<String> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let capture = Capture {
            layout,
            escape,
            lines: lines.clone(),
        };
        let subscriber = tracing_subscriber::registry().with(capture);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(port = 8000, name = "a b", "serving \"simple\"");
            tracing::warn!("careful");
            tracing::error!("broken\nline");
            tracing::debug!("verbose");
        });
        lines.lock().unwrap().clone()
    }

    #[test]
    fn tritons_default_layout() {
        let pid = std::process::id();
        let got = lines(Layout::Default, true);
        assert_eq!(got.len(), 4);
        let prefix = format!("I1129 04:03:20.123456 {pid} log_line.rs:");
        assert!(got[0].starts_with(&prefix), "{}", got[0]);
        assert!(
            got[0].ends_with(r#"] "serving \"simple\"" port=8000 name=a b"#),
            "{}",
            got[0]
        );
        assert!(got[1].starts_with('W') && got[1].ends_with(r#"] "careful""#));
        assert!(got[2].starts_with('E') && got[2].ends_with(r#"] "broken\nline""#));
        assert!(got[3].starts_with('I') && got[3].ends_with(r#"] "verbose""#));
    }

    #[test]
    fn tritons_iso8601_layout_and_unescaped_messages() {
        let pid = std::process::id();
        let got = lines(Layout::Iso8601, false);
        let prefix = format!("2026-11-29T04:03:20Z I {pid} log_line.rs:");
        assert!(got[0].starts_with(&prefix), "{}", got[0]);
        assert!(got[0].ends_with(r#"] serving "simple" port=8000 name=a b"#));
        assert!(got[2].contains("] broken\nline"));
    }

    #[test]
    fn layouts_by_tritons_names() {
        assert_eq!(Layout::named("default"), Some(Layout::Default));
        assert_eq!(Layout::named("ISO8601"), Some(Layout::Iso8601));
        assert_eq!(Layout::named("iso8601"), None);
    }
}
