//! The canary's share of the calls: a percent, set at start and, where a file holds it, read
//! again every second, so that the operator changes it through the pods' ConfigMap without
//! rolling them. A file that cannot be read, or does not hold a percent, leaves the share as it
//! was, with one warning per new problem.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// How often the file is read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

pub struct Share {
    percent: AtomicU8,
    file: Option<PathBuf>,
    /// The last problem with the file, warned of once.
    problem: Mutex<Option<String>>,
}

impl Share {
    /// `percent`, replaced by the file's where it holds one.
    pub fn new(percent: u8, file: Option<PathBuf>) -> Share {
        let share = Share {
            percent: AtomicU8::new(percent.min(100)),
            file,
            problem: Mutex::new(None),
        };
        share.reload();
        share
    }

    /// The percent of calls the canary gets now.
    pub fn percent(&self) -> u8 {
        self.percent.load(Ordering::Relaxed)
    }

    /// Whether a call is the canary's: a draw of 0..100 below the percent.
    pub fn takes(&self, draw: u8) -> bool {
        draw < self.percent()
    }

    /// Whether the share is read from a file.
    pub fn reloads(&self) -> bool {
        self.file.is_some()
    }

    /// Reads the file again, where there is one.
    pub fn reload(&self) {
        let Some(file) = &self.file else {
            return;
        };
        let read = std::fs::read_to_string(file)
            .map_err(|e| format!("{}: {e}", file.display()))
            .and_then(|text| parse(&text).map_err(|e| format!("{}: {e}", file.display())));
        match read {
            Ok(percent) => {
                *self.problem.lock() = None;
                let was = self.percent.swap(percent, Ordering::Relaxed);
                if was != percent {
                    tracing::info!(from = was, to = percent, "canary share changed");
                }
            }
            Err(problem) => {
                let mut last = self.problem.lock();
                if last.as_deref() != Some(problem.as_str()) {
                    tracing::warn!(error = %problem, percent = self.percent(), "canary share not read; keeping the last one");
                    *last = Some(problem);
                }
            }
        }
    }
}

/// A whole percent, 0 to 100, with surrounding white space.
fn parse(text: &str) -> Result<u8, String> {
    let text = text.trim();
    match text.parse::<u8>() {
        Ok(percent) if percent <= 100 => Ok(percent),
        _ => Err(format!("'{text}' is not a whole percent (0 to 100)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_replaces_the_percent_and_a_bad_one_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("percent");
        std::fs::write(&file, "30\n").unwrap();
        let share = Share::new(10, Some(file.clone()));
        assert_eq!(share.percent(), 30);
        assert!(share.takes(29) && !share.takes(30));
        for bad in ["101", "-1", "12.5", "", "ten"] {
            std::fs::write(&file, bad).unwrap();
            share.reload();
            assert_eq!(share.percent(), 30, "{bad:?}");
        }
        std::fs::write(&file, " 0 ").unwrap();
        share.reload();
        assert_eq!(share.percent(), 0);
        assert!(!share.takes(0));
        std::fs::remove_file(&file).unwrap();
        share.reload();
        assert_eq!(share.percent(), 0);
    }

    #[test]
    fn without_a_file_the_setting_holds() {
        let share = Share::new(100, None);
        assert!(share.takes(99));
        assert!(!share.reloads());
        let missing = Share::new(25, Some("/nonexistent/percent".into()));
        assert_eq!(missing.percent(), 25);
    }
}
