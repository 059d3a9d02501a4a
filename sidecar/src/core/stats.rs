//! Per-model counters behind the statistics extension and the Prometheus metrics: the fields
//! `perf_analyzer` reads (every count and nanosecond sum), per batch size, and failures.

use std::collections::BTreeMap;
use std::sync::Arc;
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
    fn absorb(&mut self, other: &Duration2) {
        self.count += other.count;
        self.ns = self.ns.saturating_add(other.ns);
    }

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

impl Snapshot {
    /// Adds `other`'s counts and durations to these (the later of the two last inferences).
    fn absorb(&mut self, other: &Snapshot) {
        self.last_inference_ms = self.last_inference_ms.max(other.last_inference_ms);
        self.inference_count += other.inference_count;
        self.execution_count += other.execution_count;
        for (mine, theirs) in [
            (&mut self.success, &other.success),
            (&mut self.fail, &other.fail),
            (&mut self.queue, &other.queue),
            (&mut self.compute_input, &other.compute_input),
            (&mut self.compute_infer, &other.compute_infer),
            (&mut self.compute_output, &other.compute_output),
            (&mut self.cache_hit, &other.cache_hit),
            (&mut self.cache_miss, &other.cache_miss),
        ] {
            mine.absorb(theirs);
        }
        for (size, theirs) in &other.batches {
            let mine = self.batches.entry(*size).or_default();
            mine.compute_input.absorb(&theirs.compute_input);
            mine.compute_infer.absorb(&theirs.compute_infer);
            mine.compute_output.absorb(&theirs.compute_output);
        }
        self.failures_rejected += other.failures_rejected;
        self.failures_backend += other.failures_backend;
    }
}

/// What a model's earlier loads counted, which its metrics go on from. Triton's metrics outlive
/// a reload (a load of a loaded model): the new model shares the old one's reporter, so its
/// counters go on, while its statistics (the extension) start again. An unload ends them.
#[derive(Default)]
pub struct EarlierLoads {
    /// The counts of loads no request can reach any more, added up.
    settled: Snapshot,
    /// Loads that requests may still be finishing on.
    live: Vec<Arc<ModelStats>>,
}

impl EarlierLoads {
    /// These (a replaced model's own), and then the replaced model's statistics: the next
    /// model's earlier loads.
    pub fn and(&self, replaced: &Arc<ModelStats>) -> EarlierLoads {
        let mut earlier = EarlierLoads {
            settled: self.settled.clone(),
            live: Vec::with_capacity(self.live.len() + 1),
        };
        for stats in &self.live {
            // Held by these alone: its model is gone, and nothing will count there again.
            if Arc::strong_count(stats) == 1 {
                earlier.settled.absorb(&stats.snapshot());
            } else {
                earlier.live.push(stats.clone());
            }
        }
        // Requests may still be finishing on the replaced model.
        earlier.live.push(replaced.clone());
        earlier
    }

    /// `current`'s counts, on top of the earlier loads'.
    pub fn with(&self, current: &ModelStats) -> Snapshot {
        let mut total = self.settled.clone();
        for stats in &self.live {
            total.absorb(&stats.snapshot());
        }
        total.absorb(&current.snapshot());
        total
    }

    /// `current`'s pending requests, with those the earlier loads are still finishing.
    pub fn pending_with(&self, current: &ModelStats) -> i64 {
        self.live.iter().map(|s| s.pending()).sum::<i64>() + current.pending()
    }
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

    /// One request that ran alone: a successful request and an execution of its batch size.
    pub fn record_success(&self, batch_size: u64, t: Timings) {
        self.record_request(batch_size, t);
        self.record_execution(
            batch_size,
            t.compute_input,
            t.compute_infer,
            t.compute_output,
        );
    }

    /// One successful request of `batch_size` rows, as Triton counts each request of a batch:
    /// its rows in `inference_count`, its durations in the inference statistics.
    pub fn record_request(&self, batch_size: u64, t: Timings) {
        let mut s = self.inner.lock();
        s.last_inference_ms = now_ms();
        s.inference_count += batch_size;
        s.success.add(t.total);
        s.queue.add(t.queue);
        s.compute_input.add(t.compute_input);
        s.compute_infer.add(t.compute_infer);
        s.compute_output.add(t.compute_output);
    }

    /// One execution of the model on a batch of `batch_size` rows (one request or several
    /// joined): `execution_count` and the batch statistics of that size.
    pub fn record_execution(
        &self,
        batch_size: u64,
        compute_input: Duration,
        compute_infer: Duration,
        compute_output: Duration,
    ) {
        let mut s = self.inner.lock();
        s.execution_count += 1;
        let b = s.batches.entry(batch_size).or_default();
        b.compute_input.add(compute_input);
        b.compute_infer.add(compute_infer);
        b.compute_output.add(compute_output);
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

    #[test]
    fn earlier_loads_add_up_and_settle_once_their_model_is_gone() {
        let t = Timings {
            total: Duration::from_micros(3),
            ..Default::default()
        };
        // Load 1 counts, then is replaced by load 2: its counts stay live (requests may still
        // finish on it, and what they count shows).
        let first = Arc::new(ModelStats::default());
        first.record_success(2, t);
        first.record_failure(Duration::from_micros(1), true);
        let after_first = EarlierLoads::default().and(&first);
        let second = Arc::new(ModelStats::default());
        let pending = first.enter();
        second.record_success(1, t);
        let total = after_first.with(&second);
        assert_eq!((total.inference_count, total.execution_count), (3, 2));
        assert_eq!((total.success.count, total.success.ns), (2, 6000));
        assert_eq!(total.failures_rejected, 1);
        assert_eq!(total.batches.len(), 2);
        assert_eq!(after_first.pending_with(&second), 1);
        first.record_success(1, t);
        drop(pending);
        assert_eq!(after_first.with(&second).inference_count, 4);
        // Load 1's model is gone (only the earlier loads hold its counts); load 2 is replaced
        // by load 3: load 1 settles into one sum, load 2 stays live.
        drop(first);
        let after_second = after_first.and(&second);
        assert_eq!(after_second.live.len(), 1);
        assert!(Arc::ptr_eq(&after_second.live[0], &second));
        let third = ModelStats::default();
        let total = after_second.with(&third);
        assert_eq!((total.inference_count, total.execution_count), (4, 3));
        assert_eq!(total.failures_rejected, 1);
    }
}
