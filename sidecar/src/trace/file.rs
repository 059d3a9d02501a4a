//! Triton's trace files (mode `triton`): where finished traces go, and when they are written.
//!
//! As in Triton, each generation of trace settings (the server's, or a model's own; every change
//! makes a new one) has a collector that gathers its finished traces. They are written:
//! - every `log_frequency` traces, to `<file>.<n>` (`n` from 0, one JSON array per file);
//! - when the settings' `trace_count` is used up and every request they counted is written,
//!   likewise to the next `<file>.<n>`;
//! - otherwise when the collector is retired (the settings change, or the server stops): to
//!   `<file>.<n>` with a `log_frequency`, else appended to `<file>`, one JSON array that the
//!   server closes (`]`) as it stops.
//!
//! Writes happen on the thread that finishes the trace, as in Triton; a write that fails is
//! logged and its traces are lost, never the request.

use std::fs::File;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

/// The trace file of the server, and its numbered siblings.
#[derive(Debug)]
pub struct TraceFile {
    path: String,
    next_index: AtomicU32,
    main: Mutex<Main>,
}

/// The unnumbered file: opened at its first write, closed as the server stops.
#[derive(Debug, Default)]
struct Main {
    file: Option<File>,
    closed: bool,
}

impl TraceFile {
    pub fn new(path: String) -> TraceFile {
        TraceFile {
            path,
            next_index: AtomicU32::new(0),
            main: Mutex::new(Main::default()),
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Writes finished traces (JSON objects, comma-separated): to the next numbered file, or
    /// appended to the main one.
    fn save(&self, traces: &[u8], numbered: bool) {
        if numbered {
            let path = format!(
                "{}.{}",
                self.path,
                self.next_index.fetch_add(1, Ordering::Relaxed)
            );
            let written = File::create(&path).and_then(|mut file| {
                file.write_all(b"[")?;
                file.write_all(traces)?;
                file.write_all(b"]")
            });
            if let Err(e) = written {
                tracing::error!(path, error = %e, "failed creating trace file");
            }
            return;
        }
        let mut main = self.main.lock();
        if main.closed {
            tracing::warn!(
                path = self.path,
                "traces finished after the trace file was closed are not written"
            );
            return;
        }
        let written = match &mut main.file {
            Some(file) => file.write_all(b",").and_then(|()| file.write_all(traces)),
            None => File::create(&self.path).and_then(|mut file| {
                file.write_all(b"[")?;
                file.write_all(traces)?;
                main.file = Some(file);
                Ok(())
            }),
        };
        if let Err(e) = written {
            tracing::error!(path = self.path, error = %e, "failed writing the trace file");
        }
    }

    /// Ends the main file's array, as the server stops; nothing is written to it after.
    pub fn close(&self) {
        let mut main = self.main.lock();
        main.closed = true;
        if let Some(mut file) = main.file.take()
            && let Err(e) = file.write_all(b"]")
        {
            tracing::error!(path = self.path, error = %e, "failed closing the trace file");
        }
    }
}

/// One generation of settings' finished traces.
#[derive(Debug)]
pub struct Collector {
    file: Arc<TraceFile>,
    log_frequency: u32,
    batch: Mutex<Batch>,
}

#[derive(Debug, Default)]
struct Batch {
    /// Finished traces not written yet, comma-separated.
    traces: Vec<u8>,
    /// How many traces `traces` holds (some may have written nothing).
    held: u32,
    /// Traces finished under these settings.
    collected: u64,
    /// Once `trace_count` is used up: how many requests these settings had counted (for
    /// `trace_rate`) by then; none are counted after.
    used_up_at: Option<u64>,
}

impl Collector {
    pub fn new(file: Arc<TraceFile>, log_frequency: u32) -> Collector {
        Collector {
            file,
            log_frequency,
            batch: Mutex::new(Batch::default()),
        }
    }

    /// The settings' `trace_count` ran out with the request they counted `counted`th.
    pub fn used_up(&self, counted: u64) {
        self.batch.lock().used_up_at = Some(counted);
    }

    /// A finished trace (its objects, possibly none); writes the batch when it is due.
    pub fn collect(&self, trace: &[u8]) {
        let mut batch = self.batch.lock();
        if !trace.is_empty() {
            if !batch.traces.is_empty() {
                batch.traces.push(b',');
            }
            batch.traces.extend_from_slice(trace);
        }
        batch.held += 1;
        batch.collected += 1;
        let count_done = batch.used_up_at == Some(batch.collected);
        let frequency_due = self.log_frequency != 0 && batch.held >= self.log_frequency;
        if count_done || frequency_due {
            let traces = std::mem::take(&mut batch.traces);
            batch.held = 0;
            drop(batch);
            self.file.save(&traces, true);
        }
    }
}

impl Drop for Collector {
    /// Retired: what it still holds is written.
    fn drop(&mut self) {
        let batch = self.batch.get_mut();
        if batch.held != 0 {
            self.file.save(&batch.traces, self.log_frequency != 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &std::path::Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn without_a_frequency_traces_wait_for_the_settings_to_retire_then_share_one_array() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let file = Arc::new(TraceFile::new(path.to_string_lossy().into_owned()));
        let first = Collector::new(file.clone(), 0);
        first.collect(br#"{"id":1}"#);
        first.collect(br#"{"id":2}"#);
        assert!(!path.exists());
        drop(first);
        let second = Collector::new(file.clone(), 0);
        second.collect(br#"{"id":3}"#);
        drop(second);
        file.close();
        assert_eq!(read(&path), serde_json::json!([{"id":1},{"id":2},{"id":3}]));
        assert!(!dir.path().join("t.json.0").exists());
    }

    #[test]
    fn a_frequency_writes_numbered_files_and_the_rest_at_retirement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let file = Arc::new(TraceFile::new(path.to_string_lossy().into_owned()));
        let c = Collector::new(file.clone(), 2);
        for id in 1..=3 {
            c.collect(format!(r#"{{"id":{id}}}"#).as_bytes());
        }
        assert_eq!(
            read(&dir.path().join("t.json.0")),
            serde_json::json!([{"id":1},{"id":2}])
        );
        drop(c);
        assert_eq!(
            read(&dir.path().join("t.json.1")),
            serde_json::json!([{"id":3}])
        );
        file.close();
        assert!(!path.exists());
    }

    #[test]
    fn a_used_up_count_writes_once_every_counted_request_is_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let file = Arc::new(TraceFile::new(path.to_string_lossy().into_owned()));
        let c = Collector::new(file.clone(), 0);
        c.used_up(2);
        c.collect(br#"{"id":1}"#);
        assert!(!dir.path().join("t.json.0").exists());
        c.collect(br#"{"id":2}"#);
        assert_eq!(
            read(&dir.path().join("t.json.0")),
            serde_json::json!([{"id":1},{"id":2}])
        );
        drop(c);
        file.close();
        assert!(!path.exists());
    }
}
