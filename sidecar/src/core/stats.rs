//! Per-model counters behind the statistics extension and the Prometheus metrics: the fields
//! `perf_analyzer` reads (every count and nanosecond sum), per batch size, and failures.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// A count and a cumulative duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Duration2 {
    pub count: u64,
    pub ns: u64,
}

impl Duration2 {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns = self
            .ns
            .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64);
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub compute_input: Duration2,
    pub compute_infer: Duration2,
    pub compute_output: Duration2,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub last_inference_ms: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: Duration2,
    pub fail: Duration2,
    pub queue: Duration2,
    pub compute_input: Duration2,
    pub compute_infer: Duration2,
    pub compute_output: Duration2,
    pub cache_hit: Duration2,
    pub cache_miss: Duration2,
    pub batches: BTreeMap<u64, BatchStats>,
    /// Failures by Prometheus `reason`: REJECTED (invalid request) or BACKEND (model error).
    pub failures_rejected: u64,
    pub failures_backend: u64,
}

/// Where each part of one successful request's time went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub total: Duration,
    pub queue: Duration,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

#[derive(Default)]
pub struct ModelStats {
    inner: Mutex<Snapshot>,
    pending: AtomicI64,
}

/// Keeps the pending-request gauge honest on every path, early returns included.
pub struct PendingGuard<'a>(&'a AtomicI64);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl ModelStats {
    pub fn enter(&self) -> PendingGuard<'_> {
        self.pending.fetch_add(1, Ordering::Relaxed);
        PendingGuard(&self.pending)
    }

    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Relaxed)
    }

    pub fn record_success(&self, batch_size: u64, t: Timings) {
        let mut s = self.inner.lock();
        s.last_inference_ms = now_ms();
        s.inference_count += batch_size;
        s.execution_count += 1;
        s.success.add(t.total);
        s.queue.add(t.queue);
        s.compute_input.add(t.compute_input);
        s.compute_infer.add(t.compute_infer);
        s.compute_output.add(t.compute_output);
        let b = s.batches.entry(batch_size).or_default();
        b.compute_input.add(t.compute_input);
        b.compute_infer.add(t.compute_infer);
        b.compute_output.add(t.compute_output);
    }

    pub fn record_failure(&self, elapsed: Duration, rejected: bool) {
        let mut s = self.inner.lock();
        s.fail.add(elapsed);
        if rejected {
            s.failures_rejected += 1;
        } else {
            s.failures_backend += 1;
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        self.inner.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_batches_and_failures() {
        let stats = ModelStats::default();
        {
            let _g = stats.enter();
            assert_eq!(stats.pending(), 1);
        }
        assert_eq!(stats.pending(), 0);
        let t = Timings {
            total: Duration::from_micros(5),
            ..Default::default()
        };
        stats.record_success(4, t);
        stats.record_success(1, t);
        stats.record_failure(Duration::from_micros(1), true);
        let s = stats.snapshot();
        assert_eq!(s.inference_count, 5);
        assert_eq!(s.execution_count, 2);
        assert_eq!(s.success.count, 2);
        assert_eq!(s.queue.count, 2);
        assert_eq!(s.success.ns, 10_000);
        assert_eq!(s.fail.count, 1);
        assert_eq!(s.failures_rejected, 1);
        assert_eq!(s.batches.len(), 2);
        assert!(s.last_inference_ms > 0);
    }
}
