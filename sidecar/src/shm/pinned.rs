//! Page-locked ("pinned") host buffers for copies between a CUDA region and host memory, kept
//! for reuse.
//!
//! The driver copies to and from ordinary (pageable) memory through a small page-locked buffer
//! of its own, a piece at a time; from a page-locked buffer the device copies directly, several
//! times faster. Locking memory costs far more than a copy (a system call that pins every
//! page), so buffers are made once and lent out again and again: a read from a CUDA region
//! lands in a lent buffer, the tensor's bytes are that buffer (`Bytes::from_owner`), and an
//! output written back from the same bytes (an identity model's) goes to the device from
//! page-locked memory too. The buffer returns to the pool when the last copy of the bytes is
//! dropped.
//!
//! The pool is bounded: at most `limit` bytes are locked at once, lent or free. A request that
//! finds no room gets `None` and the caller copies through pageable memory as before, so the
//! bound costs speed, never a request. Copies under [`MIN_PINNED_BYTES`] are left to the driver:
//! they are quick either way. Sizes are rounded up to a power of two, so buffers fit the next
//! request of a similar size; free buffers of other sizes are released to make room.
//!
//! The memory itself comes from a [`HostMemory`] (CUDA's `cuMemHostAlloc` in `cuda.rs`; plain
//! heap memory in the tests), so this bookkeeping runs and is tested without a GPU.

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

/// Copies smaller than this go through pageable memory.
pub const MIN_PINNED_BYTES: usize = 64 << 10;

/// Where locked memory comes from.
pub trait HostMemory: Send + Sync + 'static {
    /// `bytes` bytes of memory, writable and readable by this process until freed.
    fn allocate(&self, bytes: usize) -> Result<NonNull<u8>, String>;
    /// Frees memory returned by `allocate` with the same size.
    ///
    /// # Safety
    /// `ptr` came from `allocate(bytes)` on this value and is used by nothing any more.
    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize);
}

/// One locked allocation.
struct Block {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: a block is plain host memory owned by exactly one holder at a time (the pool's free
// list or one `Lent`); nothing else keeps its address.
unsafe impl Send for Block {}

struct State {
    free: Vec<Block>,
    /// Bytes locked, lent and free together; never above `limit`.
    held: usize,
}

/// A bounded set of reusable page-locked buffers.
pub struct PinnedPool<M: HostMemory> {
    memory: M,
    limit: usize,
    state: Mutex<State>,
}

impl<M: HostMemory> PinnedPool<M> {
    pub fn new(memory: M, limit: usize) -> Arc<Self> {
        Arc::new(PinnedPool {
            memory,
            limit,
            state: Mutex::new(State {
                free: Vec::new(),
                held: 0,
            }),
        })
    }

    /// A buffer of at least `len` bytes, or `None` when `len` is small, above the limit, or no
    /// room is left (the caller then copies through pageable memory). The caller must have made
    /// current whatever `allocate` and `free` need (for CUDA, a context).
    pub fn take(self: &Arc<Self>, len: usize) -> Option<Lent<M>> {
        if len < MIN_PINNED_BYTES {
            return None;
        }
        let capacity = len.checked_next_power_of_two()?;
        if capacity > self.limit {
            return None;
        }
        let mut released = Vec::new();
        let reused = {
            let mut state = self.state.lock();
            match state.free.iter().position(|b| b.capacity == capacity) {
                Some(i) => Some(state.free.swap_remove(i)),
                None => {
                    let free: usize = state.free.iter().map(|b| b.capacity).sum();
                    if state.held - free + capacity > self.limit {
                        return None;
                    }
                    // Room for a new buffer: release free ones of other sizes, largest first.
                    state.free.sort_by_key(|b| b.capacity);
                    while state.held + capacity > self.limit {
                        let Some(block) = state.free.pop() else { break };
                        state.held -= block.capacity;
                        released.push(block);
                    }
                    state.held += capacity;
                    None
                }
            }
        };
        for block in released {
            // SAFETY: the block came from `allocate(block.capacity)` and was on the free list,
            // so nothing uses it.
            unsafe { self.memory.free(block.ptr, block.capacity) };
        }
        let block = match reused {
            Some(block) => block,
            None => match self.memory.allocate(capacity) {
                Ok(ptr) => Block { ptr, capacity },
                Err(e) => {
                    self.state.lock().held -= capacity;
                    tracing::debug!(bytes = capacity, error = %e, "no page-locked buffer: copying through pageable memory");
                    return None;
                }
            },
        };
        Some(Lent {
            pool: self.clone(),
            block: Some(block),
            len,
        })
    }

    /// Bytes locked now, lent and free together.
    pub fn held_bytes(&self) -> usize {
        self.state.lock().held
    }

    fn give_back(&self, block: Block) {
        self.state.lock().free.push(block);
    }
}

impl<M: HostMemory> Drop for PinnedPool<M> {
    fn drop(&mut self) {
        for block in self.state.get_mut().free.drain(..) {
            // SAFETY: free blocks are used by nothing; lent ones hold the pool alive, so none
            // is out while the pool drops.
            unsafe { self.memory.free(block.ptr, block.capacity) };
        }
    }
}

/// A buffer lent by the pool: `len` bytes of it are the caller's. Returned on drop.
pub struct Lent<M: HostMemory> {
    pool: Arc<PinnedPool<M>>,
    block: Option<Block>,
    len: usize,
}

impl<M: HostMemory> Lent<M> {
    /// Where a copy into the buffer goes: `len` writable bytes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.block
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr.as_ptr())
    }
}

impl<M: HostMemory> AsRef<[u8]> for Lent<M> {
    fn as_ref(&self) -> &[u8] {
        match &self.block {
            // SAFETY: the block holds at least `len` bytes (its capacity is `len` rounded up),
            // owned by this value alone until it is dropped. The pool lends a buffer only to a
            // caller that fills it (a device copy of `len` bytes) before reading it.
            Some(block) => unsafe { std::slice::from_raw_parts(block.ptr.as_ptr(), self.len) },
            None => &[],
        }
    }
}

impl<M: HostMemory> Drop for Lent<M> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.pool.give_back(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Heap memory standing in for locked memory, counting what it hands out.
    #[derive(Default)]
    struct Heap {
        allocations: AtomicUsize,
        frees: AtomicUsize,
        fail: bool,
    }

    impl HostMemory for Arc<Heap> {
        fn allocate(&self, bytes: usize) -> Result<NonNull<u8>, String> {
            if self.fail {
                return Err("refused".into());
            }
            self.allocations.fetch_add(1, Ordering::SeqCst);
            let memory = Box::<[u8]>::leak(vec![0u8; bytes].into_boxed_slice());
            NonNull::new(memory.as_mut_ptr()).ok_or_else(|| "null".to_string())
        }

        unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize) {
            self.frees.fetch_add(1, Ordering::SeqCst);
            let slice = std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), bytes);
            // SAFETY: made by `allocate` as a leaked boxed slice of `bytes` bytes.
            drop(unsafe { Box::from_raw(slice) });
        }
    }

    fn pool(limit: usize) -> (Arc<Heap>, Arc<PinnedPool<Arc<Heap>>>) {
        let heap = Arc::new(Heap::default());
        (heap.clone(), PinnedPool::new(heap, limit))
    }

    fn fill(lent: &mut Lent<Arc<Heap>>, byte: u8, len: usize) {
        // SAFETY: a lent buffer has room for `len` bytes.
        unsafe { std::ptr::write_bytes(lent.as_mut_ptr(), byte, len) };
    }

    #[test]
    fn small_copies_are_left_to_the_driver() {
        let (heap, pool) = pool(16 << 20);
        assert!(pool.take(MIN_PINNED_BYTES - 1).is_none());
        assert!(pool.take(0).is_none());
        assert_eq!(heap.allocations.load(Ordering::SeqCst), 0);
        assert!(pool.take(MIN_PINNED_BYTES).is_some());
    }

    #[test]
    fn a_returned_buffer_is_lent_again_for_a_similar_size() {
        let (heap, pool) = pool(16 << 20);
        let len = (4 << 20) - 100;
        let mut first = pool.take(len).expect("room");
        fill(&mut first, 7, len);
        let address = first.as_mut_ptr();
        assert_eq!(first.as_ref().len(), len);
        assert!(first.as_ref().iter().all(|&b| b == 7));
        drop(first);
        let mut second = pool.take(4 << 20).expect("room");
        assert_eq!(
            second.as_mut_ptr(),
            address,
            "the same buffer, not a new one"
        );
        assert_eq!(second.as_ref().len(), 4 << 20);
        assert_eq!(heap.allocations.load(Ordering::SeqCst), 1);
        assert_eq!(pool.held_bytes(), 4 << 20);
    }

    #[test]
    fn the_limit_holds_lent_and_free_buffers_together() {
        let (heap, pool) = pool(8 << 20);
        let a = pool.take(4 << 20).expect("room for the first");
        let b = pool.take(4 << 20).expect("room for the second");
        assert!(pool.take(4 << 20).is_none(), "a third would pass the limit");
        assert!(pool.take(16 << 20).is_none(), "larger than the limit");
        assert_eq!(pool.held_bytes(), 8 << 20);
        drop(a);
        // A different size: the free 4 MiB buffer is released to make room.
        let c = pool
            .take(2 << 20)
            .expect("room after releasing a free buffer");
        assert_eq!(heap.frees.load(Ordering::SeqCst), 1);
        assert_eq!(pool.held_bytes(), (4 << 20) + (2 << 20));
        drop((b, c));
        drop(pool);
        assert_eq!(
            heap.frees.load(Ordering::SeqCst),
            heap.allocations.load(Ordering::SeqCst),
            "every buffer freed once the pool is gone"
        );
    }

    #[test]
    fn bytes_keep_the_buffer_until_the_last_copy_is_dropped() {
        let (_heap, pool) = pool(8 << 20);
        let len = 1 << 20;
        let mut lent = pool.take(len).expect("room");
        fill(&mut lent, 3, len);
        let bytes = bytes::Bytes::from_owner(lent);
        let view = bytes.slice(10..20);
        drop(bytes);
        assert!(
            pool.take(len).is_some(),
            "a second buffer fits beside the first"
        );
        assert_eq!(pool.held_bytes(), 2 << 20, "the first is still lent");
        assert_eq!(&view[..], &[3u8; 10]);
        drop(view);
        assert_eq!(pool.take(len).map(|l| l.as_ref().len()), Some(len));
        assert_eq!(
            pool.held_bytes(),
            2 << 20,
            "both buffers reused, none added"
        );
    }

    #[test]
    fn a_refused_allocation_gives_back_its_room() {
        let heap = Arc::new(Heap {
            fail: true,
            ..Heap::default()
        });
        let pool = PinnedPool::new(heap, 8 << 20);
        assert!(pool.take(4 << 20).is_none());
        assert_eq!(pool.held_bytes(), 0);
    }
}
