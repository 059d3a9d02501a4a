//! A small map whose entries expire: what was verified, and for how long it may be believed.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most entries kept; a full map first forgets what expired, then everything (a flood of
/// distinct tokens costs their verification, never memory).
const MAX_ENTRIES: usize = 10_000;

#[derive(Debug)]
pub struct Cache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    /// The value of `key`, unless it expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        let (value, until) = entries.get(key)?;
        (Instant::now() < *until).then(|| value.clone())
    }

    /// Keeps `value` for `key` for `ttl` (nothing for a zero one).
    pub fn put(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_a_full_map_makes_room() {
        let cache = Cache::default();
        cache.put(1, "one", Duration::from_secs(60));
        cache.put(2, "two", Duration::ZERO);
        cache.put(3, "three", Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(cache.get(&1), Some("one"));
        assert_eq!(cache.get(&2), None);
        assert_eq!(cache.get(&3), None);
        for i in 10..10 + MAX_ENTRIES as u64 {
            cache.put(i, "many", Duration::from_secs(60));
        }
        assert!(cache.entries.lock().len() <= MAX_ENTRIES);
    }
}
