use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Heap memory standing in for locked memory, recording what it hands out and takes back.
#[derive(Default)]
struct Heap {
    allocations: AtomicUsize,
    freed: Mutex<Vec<usize>>,
    fail: AtomicBool,
}

impl Heap {
    fn frees(&self) -> usize {
        self.freed.lock().len()
    }
}

// SAFETY: each allocation is a leaked boxed slice of the size asked for, ours alone until
// `free` turns it back into the box.
unsafe impl HostMemory for Arc<Heap> {
    fn allocate(&self, bytes: usize) -> Result<NonNull<u8>, String> {
        if self.fail.load(Ordering::SeqCst) {
            return Err("refused".into());
        }
        self.allocations.fetch_add(1, Ordering::SeqCst);
        let memory = Box::<[u8]>::leak(vec![0u8; bytes].into_boxed_slice());
        NonNull::new(memory.as_mut_ptr()).ok_or_else(|| "null".to_string())
    }

    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize) {
        self.freed.lock().push(ptr.as_ptr() as usize);
        let slice = std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), bytes);
        // SAFETY: made by `allocate` as a leaked boxed slice of `bytes` bytes.
        drop(unsafe { Box::from_raw(slice) });
    }
}

fn pool(limit: usize) -> (Arc<Heap>, Arc<PinnedPool<Arc<Heap>>>) {
    let heap = Arc::new(Heap::default());
    (heap.clone(), PinnedPool::new(heap, limit))
}

/// A buffer of `len` bytes, each `byte`.
fn filled(pool: &Arc<PinnedPool<Arc<Heap>>>, len: usize, byte: u8) -> Option<Lent<Arc<Heap>>> {
    let mut buffer = pool.take(len)?;
    // SAFETY: a taken buffer has room for `len` bytes; all of them are written before
    // `filled` makes them readable.
    unsafe {
        std::ptr::write_bytes(buffer.as_mut_ptr(), byte, len);
        Some(buffer.filled())
    }
}

fn address(lent: &Lent<Arc<Heap>>) -> usize {
    lent.as_ref().as_ptr() as usize
}

#[test]
fn small_and_oversized_copies_are_left_to_the_driver() {
    let (heap, pool) = pool(64 << 20);
    assert!(pool.take(MIN_PINNED_BYTES - 1).is_none());
    assert!(pool.take(0).is_none());
    assert!(pool.take(usize::MAX).is_none());
    assert!(
        pool.take((16 << 20) + 1).is_none(),
        "above a quarter of the pool"
    );
    assert_eq!(heap.allocations.load(Ordering::SeqCst), 0);
    assert!(pool.take(MIN_PINNED_BYTES).is_some());
    assert!(pool.take(16 << 20).is_some(), "exactly a quarter");
}

#[test]
fn a_returned_buffer_is_lent_again_for_a_similar_size() {
    let (heap, pool) = pool(64 << 20);
    let len = (4 << 20) - 100;
    let first = filled(&pool, len, 7).expect("room");
    assert_eq!(first.as_ref().len(), len);
    assert!(first.as_ref().iter().all(|&b| b == 7));
    let at = address(&first);
    drop(first);
    let second = filled(&pool, 4 << 20, 1).expect("room");
    assert_eq!(address(&second), at, "the same buffer, not a new one");
    assert_eq!(second.as_ref().len(), 4 << 20);
    assert_eq!(heap.allocations.load(Ordering::SeqCst), 1);
    assert_eq!(pool.held_bytes(), 4 << 20);
}

#[test]
fn an_unfilled_buffer_goes_back_unread() {
    let (heap, pool) = pool(64 << 20);
    drop(pool.take(1 << 20).expect("room"));
    assert!(pool.take(1 << 20).is_some());
    assert_eq!(heap.allocations.load(Ordering::SeqCst), 1);
}

#[test]
fn the_limit_holds_lent_and_free_buffers_together_and_lent_ones_are_never_freed() {
    let (heap, pool) = pool(32 << 20);
    let lent: Vec<_> = (0..4).map(|i| filled(&pool, 8 << 20, i)).collect();
    assert!(lent.iter().all(Option::is_some));
    assert!(
        filled(&pool, 8 << 20, 9).is_none(),
        "a fifth would pass the limit"
    );
    assert!(filled(&pool, 1 << 20, 9).is_none(), "so would any size");
    assert_eq!(pool.held_bytes(), 32 << 20);
    let mut lent: Vec<_> = lent.into_iter().flatten().collect();
    let given_back = lent.pop().expect("four");
    let freed_at = address(&given_back);
    drop(given_back);
    // A different size: the free 8 MiB buffer is released to make room, no lent one.
    let small = filled(&pool, 2 << 20, 5).expect("room after releasing a free buffer");
    assert_eq!(*heap.freed.lock(), vec![freed_at]);
    assert_eq!(pool.held_bytes(), (24 << 20) + (2 << 20));
    assert!(lent.iter().all(|l| l.as_ref().iter().all(|&b| b < 3)));
    drop((lent, small));
    drop(pool);
    assert_eq!(
        heap.frees(),
        heap.allocations.load(Ordering::SeqCst),
        "every buffer freed once the pool is gone"
    );
}

#[test]
fn bytes_keep_the_buffer_until_the_last_copy_is_dropped_on_any_thread() {
    let (_heap, pool) = pool(64 << 20);
    let len = 1 << 20;
    let bytes = bytes::Bytes::from_owner(filled(&pool, len, 3).expect("room"));
    let view = bytes.slice(10..20);
    drop(bytes);
    assert!(
        pool.take(len).is_some(),
        "a second buffer fits beside the first"
    );
    assert_eq!(pool.held_bytes(), 2 << 20, "the first is still lent");
    std::thread::spawn(move || {
        assert_eq!(&view[..], &[3u8; 10]);
    })
    .join()
    .expect("the other thread");
    assert!(pool.take(len).is_some());
    assert_eq!(
        pool.held_bytes(),
        2 << 20,
        "both buffers reused, none added"
    );
}

#[test]
fn a_pool_dropped_while_buffers_are_lent_frees_them_when_they_come_back() {
    let (heap, pool) = pool(64 << 20);
    let lent = filled(&pool, 1 << 20, 1).expect("room");
    drop(pool);
    assert_eq!(heap.frees(), 0, "still lent");
    assert_eq!(lent.as_ref()[0], 1);
    drop(lent);
    assert_eq!(heap.frees(), 1);
}

#[test]
fn once_locking_is_refused_only_the_buffers_made_are_lent() {
    let (heap, pool) = pool(32 << 20);
    let kept = filled(&pool, 4 << 20, 1).expect("room");
    drop(filled(&pool, 8 << 20, 1).expect("room"));
    drop(kept);
    heap.fail.store(true, Ordering::SeqCst);
    assert!(pool.take(2 << 20).is_none(), "a new size is refused");
    assert_eq!(
        pool.held_bytes(),
        12 << 20,
        "its room given back, nothing released"
    );
    assert_eq!(heap.frees(), 0);
    heap.fail.store(false, Ordering::SeqCst);
    assert!(pool.take(2 << 20).is_none(), "the pool stopped asking");
    assert!(
        pool.take(4 << 20).is_some(),
        "a buffer it has is still lent"
    );
    assert_eq!(heap.allocations.load(Ordering::SeqCst), 2);
}

#[test]
fn a_refusal_after_releasing_free_buffers_leaves_the_count_right() {
    let (heap, pool) = pool(16 << 20);
    let a = filled(&pool, 4 << 20, 1).expect("room");
    let b = filled(&pool, 4 << 20, 1).expect("room");
    let c = filled(&pool, 4 << 20, 1).expect("room");
    let d = filled(&pool, 4 << 20, 1).expect("room");
    drop((a, b));
    let _lent = (c, d);
    heap.fail.store(true, Ordering::SeqCst);
    assert!(pool.take(2 << 20).is_none());
    assert_eq!(
        heap.frees(),
        1,
        "one free 4 MiB buffer released to make room"
    );
    assert_eq!(pool.held_bytes(), 12 << 20);
}

#[test]
fn many_threads_never_pass_the_limit() {
    let (heap, pool) = pool(16 << 20);
    let sizes = [64 << 10, 100 << 10, 1 << 20, 3 << 20, 4 << 20];
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let len = sizes[(t + i) % sizes.len()];
                    if let Some(lent) = filled(&pool, len, t as u8) {
                        assert!(pool.held_bytes() <= 16 << 20);
                        assert!(lent.as_ref().iter().all(|&b| b == t as u8));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a worker");
    }
    let live = heap.allocations.load(Ordering::SeqCst) - heap.frees();
    assert!(pool.held_bytes() <= 16 << 20);
    assert_eq!(
        pool.state.lock().free.len(),
        live,
        "every live buffer is free again"
    );
}
