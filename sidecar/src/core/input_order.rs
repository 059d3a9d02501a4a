//! The order in which Triton's core visits a request's inputs.
//!
//! Triton keeps a request's inputs in a `std::unordered_map<std::string, Input>` and checks
//! them (unknown names, batch sizes, datatypes, shapes, byte sizes) by iterating that map, so
//! the input an error names, and the order of the names in "Got input(s) [...]", is the map's
//! iteration order, not the request's. For the two inputs of `simple` that is the reverse of the
//! request's order; for more it depends on the names' hashes. Clients and tests compare those
//! messages, so the sidecar reproduces the order: the hash (`std::hash<std::string>`, libstdc++'s
//! `_Hash_bytes`), the bucket counts the map grows through, and where a new node goes in the
//! map's one linked list (first in its bucket; first of the list when its bucket was empty),
//! including when the map grows and moves every node to the new buckets.
//!
//! `tests/data/unordered_map_order.txt` holds orders printed by libstdc++ itself (the program
//! that made them is beside it); the tests below compare with them.

/// libstdc++'s seed for `std::hash<std::string>` (`_Hash_bytes(ptr, len, 0xc70f6907)`).
const SEED: u64 = 0xc70f_6907;
const MUL: u64 = (0xc6a4_a793_u64 << 32) + 0x5bd1_e995;

/// The bucket counts an `unordered_map` moves through as it grows, one insert at a time: 13 at
/// the first insert, the next when the element count would exceed the bucket count. (Past the
/// last, a map of millions of inputs, the emulation stops growing: the order is then only
/// approximate, never wrong in any way that matters.)
const BUCKET_COUNTS: [usize; 19] = [
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061,
    712697, 1447153, 2938679, 5967347,
];

/// `std::hash<std::string>` on a 64-bit libstdc++.
pub fn std_hash(bytes: &[u8]) -> u64 {
    let shift_mix = |v: u64| v ^ (v >> 47);
    let len = bytes.len() as u64;
    let mut hash = SEED ^ len.wrapping_mul(MUL);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let data = shift_mix(u64::from_le_bytes(word).wrapping_mul(MUL)).wrapping_mul(MUL);
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // The trailing bytes as a little-endian number.
        let data = rest
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) + u64::from(b));
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    hash = shift_mix(hash).wrapping_mul(MUL);
    shift_mix(hash)
}

/// Where a bucket's nodes start: `Before(None)` is the list's head, `Before(Some(i))` the node
/// `i` that precedes the bucket's first node (libstdc++ stores the node *before* each bucket).
#[derive(Clone, Copy)]
struct Before(Option<usize>);

/// Indices of `names` in the order Triton's map of them iterates, for distinct names inserted
/// in the order given (a repeated name is refused before Triton builds the map).
pub fn triton_order<S: AsRef<str>>(names: &[S]) -> Vec<usize> {
    let hashes: Vec<u64> = names
        .iter()
        .map(|n| std_hash(n.as_ref().as_bytes()))
        .collect();
    // One singly linked list through every node, as libstdc++ keeps it.
    let mut next: Vec<Option<usize>> = vec![None; names.len()];
    let mut head: Option<usize> = None;
    let mut buckets: Vec<Option<Before>> = Vec::new();
    let mut growth = BUCKET_COUNTS.iter();

    for node in 0..names.len() {
        if node + 1 > buckets.len()
            && let Some(&count) = growth.next()
        {
            // Growing moves the nodes, in list order, each to the front of its new bucket.
            let mut old = head.take();
            buckets = vec![None; count];
            while let Some(n) = old {
                old = next[n];
                insert_first_in_bucket(n, &hashes, &mut next, &mut head, &mut buckets);
            }
        }
        insert_first_in_bucket(node, &hashes, &mut next, &mut head, &mut buckets);
    }

    let mut order = Vec::with_capacity(names.len());
    let mut at = head;
    while let Some(n) = at {
        order.push(n);
        at = next[n];
    }
    order
}

fn bucket_of(hash: u64, count: usize) -> usize {
    (hash % count as u64) as usize
}

/// libstdc++'s `_M_insert_bucket_begin` (and the same step of `_M_rehash`).
fn insert_first_in_bucket(
    node: usize,
    hashes: &[u64],
    next: &mut [Option<usize>],
    head: &mut Option<usize>,
    buckets: &mut [Option<Before>],
) {
    let bucket = bucket_of(hashes[node], buckets.len());
    match buckets[bucket] {
        Some(Before(None)) => {
            next[node] = *head;
            *head = Some(node);
        }
        Some(Before(Some(before))) => {
            next[node] = next[before];
            next[before] = Some(node);
        }
        None => {
            // An empty bucket: the node becomes the list's head, and the bucket of the node that
            // was the head now starts after this one.
            next[node] = *head;
            *head = Some(node);
            if let Some(former) = next[node] {
                let former_bucket = bucket_of(hashes[former], buckets.len());
                buckets[former_bucket] = Some(Before(Some(node)));
            }
            buckets[bucket] = Some(Before(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_inputs_come_in_reverse() {
        assert_eq!(triton_order(&["INPUT0", "INPUT1"]), vec![1, 0]);
        assert_eq!(triton_order(&["INPUT1", "INPUT0"]), vec![1, 0]);
        assert_eq!(triton_order::<&str>(&[]), Vec::<usize>::new());
        assert_eq!(triton_order(&["only"]), vec![0]);
    }

    #[test]
    fn hashes_are_libstdcxx() {
        // Printed by `std::hash<std::string>{}` (libstdc++, x86-64).
        assert_eq!(std_hash(b"INPUT0"), 2526639154658133543);
        assert_eq!(std_hash(b"INPUT1"), 8525754564184113504);
        assert_eq!(std_hash(b"a"), 4993892634952068459);
        assert_eq!(std_hash(b"abcdefghij"), 18042067762304121004);
    }

    #[test]
    fn orders_are_libstdcxx() {
        let table = include_str!("../../tests/data/unordered_map_order.txt");
        let mut checked = 0;
        for line in table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (given, iterated) = line.split_once(" | ").expect("a line of the table");
            let names: Vec<&str> = given.split(' ').collect();
            let order: Vec<&str> = triton_order(&names).into_iter().map(|i| names[i]).collect();
            assert_eq!(order.join(" "), iterated, "inserted as {given}");
            checked += 1;
        }
        assert!(checked >= 50, "the table has {checked} rows");
    }

    #[test]
    fn many_inputs_are_a_permutation() {
        let names: Vec<String> = (0..5000).map(|i| format!("in{i}")).collect();
        let mut order = triton_order(&names);
        order.sort_unstable();
        assert!(order.iter().copied().eq(0..5000));
    }
}
