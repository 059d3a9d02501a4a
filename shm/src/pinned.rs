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
//! The pool is bounded: at most `limit` bytes are locked at once, lent and free together, and
//! one buffer holds at most a quarter of that, so one large tensor never empties the pool of
//! every other size. A request that finds no room gets `None` and the caller copies through
//! pageable memory as before, so the bound costs speed, never a request. Copies under
//! [`MIN_PINNED_BYTES`] are left to the driver: they are quick either way. Sizes are rounded up
//! to a power of two, so buffers fit the next request of a similar size; free buffers of other
//! sizes are released to make room. Where locking memory fails once (a container's limits, say),
//! the pool stops asking and lends only the buffers it has.
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
///
/// # Safety
/// `allocate(bytes)` returns the address of `bytes` bytes that this process may read and write,
/// that nothing else uses, and that stay valid until passed to `free`, which may be called from
/// any thread.
pub unsafe trait HostMemory: Send + Sync + 'static {
    /// `bytes` bytes of memory (their contents unspecified).
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
// list or one lent buffer); nothing else keeps its address.
unsafe impl Send for Block {}

struct State {
    free: Vec<Block>,
    /// Bytes locked, lent and free together, plus any being allocated; never above `limit`.
    held: usize,
    /// Locking memory failed: lend only the buffers already made.
    refused: bool,
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
                refused: false,
            }),
        })
    }

    /// The largest buffer the pool lends.
    fn largest(&self) -> usize {
        self.limit / 4
    }

    /// A buffer of at least `len` bytes to copy into, or `None` when `len` is small or large,
    /// or no room is left (the caller then copies through pageable memory).
    pub fn take(self: &Arc<Self>, len: usize) -> Option<Unfilled<M>> {
        if len < MIN_PINNED_BYTES {
            return None;
        }
        let capacity = len.checked_next_power_of_two()?;
        if capacity > self.largest() {
            return None;
        }
        let lent = |block| {
            Some(Unfilled(Lent {
                pool: self.clone(),
                block: Some(block),
                len,
            }))
        };
        {
            let mut state = self.state.lock();
            if let Some(i) = state.free.iter().position(|b| b.capacity == capacity) {
                let block = state.free.swap_remove(i);
                return lent(block);
            }
            let free: usize = state.free.iter().map(|b| b.capacity).sum();
            // `held` counts every free block, so it is at least `free`.
            if state.refused || state.held - free + capacity > self.limit {
                return None;
            }
            // Room for a new buffer: release free ones of other sizes, largest first. Freed
            // under the lock, so that `held` never falls below what is locked (rare: only when
            // the sizes asked for change).
            state.free.sort_by_key(|b| b.capacity);
            while state.held + capacity > self.limit {
                let Some(block) = state.free.pop() else { break };
                // SAFETY: the block came from `allocate(block.capacity)` and was on the free
                // list, so nothing uses it.
                unsafe { self.memory.free(block.ptr, block.capacity) };
                state.held -= block.capacity;
            }
            state.held += capacity;
        }
        match self.memory.allocate(capacity) {
            Ok(ptr) => lent(Block { ptr, capacity }),
            Err(e) => {
                let mut state = self.state.lock();
                state.held -= capacity;
                if !state.refused {
                    state.refused = true;
                    tracing::warn!(bytes = capacity, error = %e, "page-locked memory refused: large copies to and from CUDA regions go through pageable memory, slower");
                }
                None
            }
        }
    }

    /// Bytes locked now, lent and free together.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
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

/// A buffer just taken from the pool, not yet written: nothing can read it until the caller
/// says it has filled it ([`Unfilled::filled`]). Dropped unfilled, it goes back to the pool.
pub struct Unfilled<M: HostMemory>(Lent<M>);

impl<M: HostMemory> Unfilled<M> {
    /// Where a copy into the buffer goes: room for `len` bytes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0
            .block
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr.as_ptr())
    }

    /// The buffer, readable.
    ///
    /// # Safety
    /// All `len` bytes at [`Unfilled::as_mut_ptr`] have been written.
    pub unsafe fn filled(self) -> Lent<M> {
        self.0
    }
}

/// A filled buffer lent by the pool: `len` bytes of it are the caller's. Returned on drop.
pub struct Lent<M: HostMemory> {
    pool: Arc<PinnedPool<M>>,
    block: Option<Block>,
    len: usize,
}

impl<M: HostMemory> AsRef<[u8]> for Lent<M> {
    fn as_ref(&self) -> &[u8] {
        match &self.block {
            // SAFETY: the block holds at least `len` bytes (its capacity is `len` rounded up),
            // owned by this value alone until it is dropped, and all `len` of them were written
            // before the `Unfilled` it came from became a `Lent` (`Unfilled::filled`).
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
mod tests;
