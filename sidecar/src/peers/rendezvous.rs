//! Rendezvous (highest random weight) hashing: every peer scores each sequence, and the order of
//! the scores is the sequence's ranking of the peers. The owner is the first; adding a peer moves
//! only the sequences it now wins (their old owner becomes second), and removing one moves only
//! its own, which is what lets a sequence in flight be found where it started.
//!
//! The hash is FNV-1a with a 64-bit finalizer, written out here because every sidecar must
//! compute the same ranking whatever its build: `std`'s hasher makes no such promise.

use crate::core::sequence::CorrelationId;

/// The scores of `peers` for the sequence `id` of `model`, highest first: indexes into `peers`.
/// Ties (practically impossible) fall to the lower index, so every peer ranks alike.
pub fn rank<S: AsRef<str>>(peers: &[S], model: &str, id: &CorrelationId) -> Vec<usize> {
    let key = key_hash(model, id);
    let mut scored: Vec<(u64, usize)> = peers
        .iter()
        .enumerate()
        .map(|(i, peer)| (score(key, peer.as_ref()), i))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// Where the sequence `id` of `model` falls in 0..100, the same on every sidecar: a canary given
/// p percent takes the sequences below p, so that a whole sequence goes one way.
pub fn percentile(model: &str, id: &CorrelationId) -> u8 {
    // Salted, so that which sequences go to the canary is independent of which peer owns them.
    let draw = score(key_hash(model, id), "canary split");
    u8::try_from(draw % 100).unwrap_or(0)
}

fn key_hash(model: &str, id: &CorrelationId) -> u64 {
    let mut h = Fnv::new();
    h.write(model.as_bytes());
    h.write(&[0]);
    // Numeric and string ids are different sequences even when they look alike.
    match id {
        CorrelationId::Number(n) => {
            h.write(b"n");
            h.write(&n.to_le_bytes());
        }
        CorrelationId::Text(s) => {
            h.write(b"s");
            h.write(s.as_bytes());
        }
    }
    h.finish()
}

fn score(key: u64, peer: &str) -> u64 {
    let mut h = Fnv::new();
    h.write(&key.to_le_bytes());
    h.write(peer.as_bytes());
    mix(h.finish())
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// SplitMix64's finalizer: FNV's low bits alone spread poorly over similar peer names.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:8001", i + 1)).collect()
    }

    fn owner(peers: &[String], id: u64) -> &str {
        &peers[rank(peers, "m", &CorrelationId::Number(id))[0]]
    }

    #[test]
    fn every_peer_owns_a_fair_share() {
        let peers = peers(3);
        let mut owned = [0usize; 3];
        for id in 1..=30_000u64 {
            owned[rank(&peers, "m", &CorrelationId::Number(id))[0]] += 1;
        }
        for n in owned {
            assert!((9_000..11_000).contains(&n), "{owned:?}");
        }
    }

    #[test]
    fn sequences_spread_evenly_over_the_percentiles() {
        let mut below = [0usize; 4];
        for id in 1..=20_000u64 {
            let p = percentile("m", &CorrelationId::Number(id));
            assert!(p < 100);
            for (i, cut) in [10u8, 25, 50, 90].iter().enumerate() {
                below[i] += usize::from(p < *cut);
            }
        }
        // Within about 4 standard deviations of the binomial expectation.
        for (n, expected) in below.iter().zip([2_000usize, 5_000, 10_000, 18_000]) {
            assert!(n.abs_diff(expected) < 300, "{below:?}");
        }
        assert_eq!(
            percentile("m", &CorrelationId::Text("a".into())),
            percentile("m", &CorrelationId::Text("a".into()))
        );
    }

    #[test]
    fn a_new_peer_takes_only_what_it_wins_and_the_old_owner_comes_second() {
        let before = peers(3);
        let after = peers(4);
        let mut moved = 0;
        for id in 1..=10_000u64 {
            let was = owner(&before, id);
            let now = owner(&after, id);
            if was != now {
                moved += 1;
                assert_eq!(now, after[3], "a sequence moved between old peers");
                let ranking = rank(&after, "m", &CorrelationId::Number(id));
                assert_eq!(after[ranking[1]], was);
            }
        }
        assert!((2_000..3_000).contains(&moved), "{moved}");
    }

    #[test]
    fn a_peer_leaving_moves_only_its_own_sequences() {
        let all = peers(4);
        let without: Vec<String> = all.iter().filter(|p| **p != all[1]).cloned().collect();
        for id in 1..=5_000u64 {
            let was = owner(&all, id);
            if was != all[1] {
                assert_eq!(owner(&without, id), was);
            }
        }
    }

    #[test]
    fn the_ranking_is_the_same_whatever_the_order_of_the_list_and_ids_differ_by_kind() {
        let peers = peers(5);
        let mut reversed = peers.clone();
        reversed.reverse();
        for id in 1..=200u64 {
            let id = CorrelationId::Number(id);
            let a: Vec<&String> = rank(&peers, "m", &id).iter().map(|&i| &peers[i]).collect();
            let b: Vec<&String> = rank(&reversed, "m", &id)
                .iter()
                .map(|&i| &reversed[i])
                .collect();
            assert_eq!(a, b);
        }
        // The hash, not the text, decides: "7" the string and 7 the number are different keys.
        assert_ne!(
            key_hash("m", &CorrelationId::Number(7)),
            key_hash("m", &CorrelationId::Text("7".into()))
        );
        assert_ne!(
            key_hash("m", &CorrelationId::Number(7)),
            key_hash("n", &CorrelationId::Number(7))
        );
    }
}
