//! Log lines in Triton's layouts, which its logging setting `log_format` names:
//!
//! - `default`: `I1129 04:20:00.123456 4242 main.rs:65] "message key=value ..."`
//! - `ISO8601`: `2026-11-29T04:20:00Z I 4242 main.rs:65] "message key=value ..."`
//!
//! As in Triton (`common/src/logging.cc`): the level letter (`E`, `W`, `I`; debug and trace
//! lines, Triton's verbose ones, are `I`), UTC time, the process id, the source file's name and
//! line, then the message as a JSON string, unless `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` asks for
//! it as it is. The event's other fields follow the message as `key=value`, inside that string
//! (Triton's lines have no fields; its readers take all that follows `] ` as the message). A
//! field named `table` is a table Triton prints as it is, after the header (`LOG_TABLE_INFO`):
//! written unescaped, in place of the message (which names the table in the JSON and text
//! layouts).
//!
//! Also the helpers of the lines Triton writes: its tables, client text made printable, and its
//! line for a failed inference.

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
    if !fields.table.is_empty() {
        return out.write_str(&fields.table);
    }
    // The fields go inside the message: a reader of Triton's lines (its QA's parser among
    // them) takes everything after `] ` as the message, one JSON string when escaped.
    let mut text = fields.message;
    text.push_str(&fields.rest);
    if escape {
        let mut quoted = crate::json::Writer::default();
        quoted.string(text.as_bytes());
        out.write_str(&String::from_utf8_lossy(&quoted.buf))
    } else {
        out.write_str(&text)
    }
}

/// A table as Triton's `TablePrinter` draws one for its log: a line break, then the header
/// and the rows between `+---+` dividers, each column as wide as its widest cell, cells padded
/// on the right; a cell of several lines makes its row that many lines high. Triton narrows the
/// columns to a terminal's width (500 characters without one) and wraps the cells that do not
/// fit; no table here comes near that, so none is wrapped.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let split = |cells: &[&str]| -> Vec<Vec<String>> {
        cells
            .iter()
            .map(|cell| {
                cell.split('\n')
                    .map(|line| printable(line).into_owned())
                    .collect()
            })
            .collect()
    };
    let mut records = vec![split(headers)];
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        records.push(split(&cells));
    }
    let mut widths = vec![0; headers.len()];
    for record in &records {
        for (width, lines) in widths.iter_mut().zip(record) {
            for line in lines {
                *width = (*width).max(line.chars().count());
            }
        }
    }
    let divider = |out: &mut String| {
        out.push('+');
        for width in &widths {
            out.push_str(&"-".repeat(width + 2));
            out.push('+');
        }
        out.push('\n');
    };
    let record_lines = |out: &mut String, record: &[Vec<String>]| {
        let height = record.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..height {
            out.push('|');
            for (lines, width) in record.iter().zip(&widths) {
                let line = lines.get(i).map_or("", String::as_str);
                let _ = write!(out, " {line:<width$} |");
            }
            out.push('\n');
        }
    };
    let mut out = String::from("\n");
    divider(&mut out);
    record_lines(&mut out, &records[0]);
    divider(&mut out);
    for record in &records[1..] {
        record_lines(&mut out, record);
    }
    divider(&mut out);
    out
}

/// `text` with its control characters escaped (a line break as `\n`), for text a client or a
/// model server gave that goes into a log line: whatever the layout, escaped or not, it cannot
/// start a line of its own there.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Triton's verbose line (level 1) for an inference request that failed, whatever failed it
/// (the body, the checks, the model); a request whose id is not known (or empty) is
/// `<id_unknown>`, as in Triton. Where Triton writes the error's message, this line names its
/// code: a message may quote the request's data back (an element that does not parse, a piece
/// of a malformed body), and request data never goes into the log. The id, the client's own
/// text, has its control characters escaped, so that it cannot forge a line in any layout.
pub fn log_infer_failure(request_id: &str, error: &crate::error::Error) {
    let id = if request_id.is_empty() {
        "<id_unknown>"
    } else {
        request_id
    };
    tracing::debug!(
        "[request id: {}] Infer failed: {}",
        printable(id),
        error.code.as_str()
    );
}

/// Whether a failed inference's line would be written: the front ends keep the request's id
/// for it only then.
pub fn infer_failures_logged() -> bool {
    tracing::enabled!(tracing::Level::DEBUG)
}

/// An event's message, its table, and its other fields as ` key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    table: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "table" => self.table.push_str(value),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            // A table is given as a `Display` value (`table = %text`), whose Debug is its text.
            "table" => {
                let _ = write!(self.table, "{value:?}");
            }
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
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
            tracing::info!(table = %"\n+---+\n| a |\n+---+\n", "a table");
        });
        lines.lock().unwrap().clone()
    }

    #[test]
    fn tritons_default_layout() {
        let pid = std::process::id();
        let got = lines(Layout::Default, true);
        assert_eq!(got.len(), 5);
        let prefix = format!("I1129 04:03:20.123456 {pid} line.rs:");
        assert!(got[0].starts_with(&prefix), "{}", got[0]);
        assert!(
            got[0].ends_with(r#"] "serving \"simple\" port=8000 name=a b""#),
            "{}",
            got[0]
        );
        assert!(got[1].starts_with('W') && got[1].ends_with(r#"] "careful""#));
        assert!(got[2].starts_with('E') && got[2].ends_with(r#"] "broken\nline""#));
        assert!(got[3].starts_with('I') && got[3].ends_with(r#"] "verbose""#));
        // A table as Triton prints one: unescaped, its first line break right after the header.
        assert!(got[4].ends_with("] \n+---+\n| a |\n+---+\n"), "{}", got[4]);
    }

    #[test]
    fn tritons_iso8601_layout_and_unescaped_messages() {
        let pid = std::process::id();
        let got = lines(Layout::Iso8601, false);
        let prefix = format!("2026-11-29T04:03:20Z I {pid} line.rs:");
        assert!(got[0].starts_with(&prefix), "{}", got[0]);
        assert!(got[0].ends_with(r#"] serving "simple" port=8000 name=a b"#));
        assert!(got[2].contains("] broken\nline"));
    }

    #[test]
    fn tables_as_tritons_table_printer_draws_them() {
        let rows = vec![
            vec!["simple".to_string(), "1".to_string(), "READY".to_string()],
            vec![
                "a_longer_name".to_string(),
                "-".to_string(),
                "UNAVAILABLE: unloaded".to_string(),
            ],
        ];
        let got = table(&["Model", "Version", "Status"], &rows);
        let want = "\n\
            +---------------+---------+-----------------------+\n\
            | Model         | Version | Status                |\n\
            +---------------+---------+-----------------------+\n\
            | simple        | 1       | READY                 |\n\
            | a_longer_name | -       | UNAVAILABLE: unloaded |\n\
            +---------------+---------+-----------------------+\n";
        assert_eq!(got, want);
        // An empty table is still drawn, as Triton draws its empty ones.
        assert_eq!(table(&["Repository Agent", "Path"], &[]).lines().count(), 5);
        // A cell of two lines makes a row two lines high; other control characters are escaped.
        let rows = vec![vec!["a\nbb".to_string(), "c\r".to_string()]];
        let want = "\n+----+-----+\n| k  | v   |\n+----+-----+\n| a  | c\\r |\n| bb |     |\n+----+-----+\n";
        assert_eq!(table(&["k", "v"], &rows), want);
    }

    #[test]
    fn printable_text_has_no_control_characters() {
        assert!(matches!(
            printable("plain 'text'"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            printable("a\nI0205 x.cc:1] \"forged\"\u{7}"),
            "a\\nI0205 x.cc:1] \"forged\"\\u{7}"
        );
    }

    #[test]
    fn layouts_by_tritons_names() {
        assert_eq!(Layout::named("default"), Some(Layout::Default));
        assert_eq!(Layout::named("ISO8601"), Some(Layout::Iso8601));
        assert_eq!(Layout::named("iso8601"), None);
    }
}
