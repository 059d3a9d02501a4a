//! The sequences this sidecar serves: started here, or found here by a peer's walk. A request
//! for one of them is served here whoever owns its id now, which is what keeps a sequence in
//! flight where its state is when peers come and go.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::core::sequence::CorrelationId;

/// Entries are dropped this long after their last request, beyond the model's own idle
/// timeout, after which the state is gone anyway.
const MARGIN: Duration = Duration::from_secs(1);

/// Pruned when it grows past this many entries.
const PRUNE_ABOVE: usize = 4096;

#[derive(Default)]
pub struct Held {
    sequences: Mutex<HashMap<(String, CorrelationId), Entry>>,
}

struct Entry {
    last: Instant,
    idle: Duration,
}

impl Held {
    pub fn contains(&self, model: &str, id: &CorrelationId) -> bool {
        let now = Instant::now();
        let mut sequences = self.sequences.lock();
        let key = (model.to_string(), id.clone());
        match sequences.get(&key) {
            Some(e) if now.duration_since(e.last) <= e.idle + MARGIN => true,
            Some(_) => {
                sequences.remove(&key);
                false
            }
            None => false,
        }
    }

    /// A request of the sequence was served here; its END forgets it.
    pub fn served(&self, model: &str, id: &CorrelationId, idle: Duration, end: bool) {
        let mut sequences = self.sequences.lock();
        let key = (model.to_string(), id.clone());
        if end {
            sequences.remove(&key);
            return;
        }
        let now = Instant::now();
        if sequences.len() >= PRUNE_ABOVE {
            sequences.retain(|_, e| now.duration_since(e.last) <= e.idle + MARGIN);
        }
        sequences.insert(key, Entry { last: now, idle });
    }

    /// The sequence started elsewhere: what this sidecar held of it is stale.
    pub fn forget(&self, model: &str, id: &CorrelationId) {
        self.sequences
            .lock()
            .remove(&(model.to_string(), id.clone()));
    }

    /// How many sequences are held here now (those past their idle timeout are dropped).
    pub fn live(&self) -> usize {
        let now = Instant::now();
        let mut sequences = self.sequences.lock();
        sequences.retain(|_, e| now.duration_since(e.last) <= e.idle + MARGIN);
        sequences.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_until_its_end_or_its_idle_timeout() {
        let held = Held::default();
        let id = CorrelationId::Number(3);
        assert!(!held.contains("m", &id));
        held.served("m", &id, Duration::from_secs(5), false);
        assert!(held.contains("m", &id));
        assert!(!held.contains("other", &id));
        held.served("m", &id, Duration::from_secs(5), true);
        assert!(!held.contains("m", &id));
        // Past its idle timeout (and the margin) it is no longer held.
        held.served("m", &id, Duration::ZERO, false);
        held.sequences.lock().values_mut().for_each(|e| {
            e.last = Instant::now() - Duration::from_secs(2);
        });
        assert!(!held.contains("m", &id));
        assert_eq!(held.live(), 0);
    }

    #[test]
    fn live_counts_the_sequences_not_ended_nor_idle() {
        let held = Held::default();
        for n in 0..3 {
            held.served(
                "m",
                &CorrelationId::Number(n),
                Duration::from_secs(5),
                false,
            );
        }
        assert_eq!(held.live(), 3);
        held.served("m", &CorrelationId::Number(0), Duration::from_secs(5), true);
        assert_eq!(held.live(), 2);
        held.sequences.lock().values_mut().take(1).for_each(|e| {
            e.last = Instant::now() - Duration::from_secs(7);
        });
        assert_eq!(held.live(), 1);
    }
}
