//! One request traced in Triton's own mode: the JSON objects Triton writes for it, gathered while
//! the request runs and handed to the collector of the settings that sampled it once every part
//! of the request (front end, model, backend) has let go of it, as Triton writes a trace when
//! its last holder releases it.
//!
//! The objects, in Triton's words: `{"id":N,"model_name":"m","model_version":1}` (with
//! `"request_id"` when the request has one) before the model's first timestamp;
//! `{"id":N,"timestamps":[{"name":"REQUEST_START","ns":T}]}` for each timestamp, `T` on the
//! monotonic clock as Triton's `steady_clock`; and at level TENSORS
//! `{"id":N,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":..,"data":..,"shape":..,"dtype":..}}`.
//! At level TENSORS alone only the tensors are written, as in Triton.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use infergate_config::TraceLevel;
use parking_lot::Mutex;

use super::file::Collector;
use super::tensor_text;
use crate::json::Writer;
use crate::tensor::Tensor;

/// Trace ids, as Triton numbers its traces: from 1, one per sampled request, process-wide.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub struct Record {
    id: u64,
    timestamps: bool,
    tensors: bool,
    /// The objects so far, comma-separated.
    objects: Mutex<Writer>,
    collector: Arc<Collector>,
}

impl Record {
    pub(super) fn new(levels: &[TraceLevel], collector: Arc<Collector>) -> Record {
        Record {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            timestamps: levels.contains(&TraceLevel::Timestamps),
            tensors: levels.contains(&TraceLevel::Tensors),
            // A traced request at level TIMESTAMPS writes about 1 KB.
            objects: Mutex::new(Writer::with_capacity(1024)),
            collector,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// A moment of the request, by Triton's name for it.
    pub fn timestamp(&self, name: &str, at: Instant) {
        if self.timestamps {
            let ns = monotonic_ns(at);
            self.push(|o| {
                o.key("timestamps")
                    .raw("[{")
                    .key("name")
                    .string(name.as_bytes());
                o.raw(",").key("ns").u64(ns).raw("}]");
            });
        }
    }

    /// The model the request is for: written before the model's first timestamp.
    pub fn model(&self, name: &str, version: i64, request_id: &str) {
        if self.timestamps {
            self.push(|o| {
                o.key("model_name").string(name.as_bytes());
                o.raw(",").key("model_version").i64(version);
                if !request_id.is_empty() {
                    o.raw(",").key("request_id").string(request_id.as_bytes());
                }
            });
        }
    }

    /// One tensor at level TENSORS, with its data as Triton prints it.
    pub fn tensor(&self, activity: &str, tensor: &Tensor) {
        if !self.tensors {
            return;
        }
        let data = tensor_text::data(tensor);
        let shape = tensor
            .shape
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        self.push(|o| {
            o.key("activity").string(activity.as_bytes());
            o.raw(",").key("tensor").raw("{").key("name");
            o.string(tensor.name.as_bytes());
            o.raw(",").key("data").string(data.as_bytes());
            o.raw(",").key("shape").string(shape.as_bytes());
            o.raw(",").key("dtype");
            o.string(tensor.datatype.as_protocol().as_bytes()).raw("}");
        });
    }

    /// One object, `{"id":N,` then what `fields` writes, then `}`.
    fn push(&self, fields: impl FnOnce(&mut Writer)) {
        let mut objects = self.objects.lock();
        if !objects.buf.is_empty() {
            objects.raw(",");
        }
        objects.raw("{").key("id").u64(self.id).raw(",");
        fields(&mut objects);
        objects.raw("}");
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let objects = std::mem::take(self.objects.get_mut());
        self.collector.collect(&objects.buf);
    }
}

/// Where the monotonic clock and `Instant` were read together, once: an `Instant` is then
/// placed on Triton's clock (`steady_clock`, the monotonic clock's nanoseconds).
static ANCHOR: LazyLock<(Instant, u64)> = LazyLock::new(|| {
    let now = Instant::now();
    let ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64)
        .unwrap_or_default();
    (now, ns)
});

/// The monotonic clock's nanoseconds at `at`.
pub(super) fn monotonic_ns(at: Instant) -> u64 {
    let (instant, ns) = *ANCHOR;
    match at.checked_duration_since(instant) {
        Some(after) => ns.saturating_add(after.as_nanos() as u64),
        None => ns.saturating_sub(instant.duration_since(at).as_nanos() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::TraceFile;
    use super::*;

    #[test]
    fn strings_are_json_whatever_they_hold() {
        for text in [
            "plain",
            "a\"b\\c",
            "line\nbreak\ttab\r",
            "\u{1}\u{1f}",
            "é ü 漢",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.json");
            let file = Arc::new(TraceFile::new(path.to_string_lossy().into_owned()));
            let collector = Arc::new(Collector::new(file.clone(), 0));
            let record = Record::new(&[TraceLevel::Timestamps], collector.clone());
            record.model(text, 1, text);
            drop((record, collector));
            file.close();
            let out = std::fs::read_to_string(&path).unwrap();
            let objects: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(objects[0]["model_name"], text, "{out}");
            assert_eq!(objects[0]["request_id"], text, "{out}");
        }
    }

    #[test]
    fn instants_land_on_the_monotonic_clock() {
        let before = Instant::now();
        let ns = monotonic_ns(before);
        let read = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
        let clock = read.tv_sec() as u64 * 1_000_000_000 + read.tv_nsec() as u64;
        assert!(ns <= clock, "{ns} > {clock}");
        // Within a second of the clock read just after (the anchor is read once).
        assert!(clock - ns < 1_000_000_000, "{ns} vs {clock}");
        assert!(monotonic_ns(before + std::time::Duration::from_millis(5)) - ns == 5_000_000);
    }
}
