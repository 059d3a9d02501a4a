//! How busy the sidecar is, for the operator's scale to zero (`/status` `traffic`): inference
//! calls in flight and open `ModelStreamInfer` streams, and since when there have been none.
//!
//! Only inference counts: health checks, metadata and the other sidecars' probes (twice a second
//! from every sequence peer, canary and activator) would keep an idle service up for ever.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Traffic {
    in_flight: AtomicUsize,
    /// When the last call or stream ended (or the sidecar started), in milliseconds since
    /// `started`.
    quiet_since_ms: AtomicU64,
    started: Instant,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            in_flight: AtomicUsize::new(0),
            quiet_since_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

impl Traffic {
    /// A call or a stream begins; it counts until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Calls and streams in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// How long there has been no call or stream in flight; zero while one is.
    pub fn quiet_for(&self) -> Duration {
        if self.in_flight() > 0 {
            return Duration::ZERO;
        }
        let since = Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        self.started.elapsed().saturating_sub(since)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One call or stream in flight.
#[derive(Debug)]
pub struct Busy(Arc<Traffic>);

impl Drop for Busy {
    fn drop(&mut self) {
        let traffic = &self.0;
        traffic
            .quiet_since_ms
            .store(traffic.now_ms(), Ordering::Release);
        traffic.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_counts_from_the_last_call_and_not_while_one_is_in_flight() {
        let traffic = Arc::new(Traffic::default());
        std::thread::sleep(Duration::from_millis(30));
        assert!(traffic.quiet_for() >= Duration::from_millis(30));
        let call = traffic.begin();
        let stream = traffic.begin();
        assert_eq!(traffic.in_flight(), 2);
        assert_eq!(traffic.quiet_for(), Duration::ZERO);
        drop(call);
        assert_eq!(traffic.quiet_for(), Duration::ZERO, "the stream is open");
        drop(stream);
        assert!(traffic.quiet_for() < Duration::from_millis(20));
        assert_eq!(traffic.in_flight(), 0);
    }
}
