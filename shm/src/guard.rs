//! Survives the owner of a mapped shared-memory object shrinking it.
//!
//! A client may truncate its object while the sidecar holds it mapped; touching a page past the new
//! end raises SIGBUS, whose default action kills the process. Reading through the descriptor
//! (`pread`) avoids that but halves the bandwidth of the shared-memory path, so mappings stay, and
//! this module makes the fault harmless instead:
//!
//! * every mapping of a client's object is entered in a fixed table of address ranges, which a
//!   signal handler can read without locks or allocation;
//! * a SIGBUS inside one of those ranges marks the range poisoned and maps anonymous zero pages
//!   over the rest of it (`MAP_FIXED`), so the interrupted copy completes instead of faulting again;
//! * the copy's caller checks the poison mark after every copy and answers with an error; a
//!   poisoned region stays refused (its mapping no longer shows the object) until it is
//!   registered again;
//! * a SIGBUS anywhere else is a real bug: the handler restores the default action and returns,
//!   so the fault repeats and terminates the process as it would have without this module.

#![allow(unsafe_code)]

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// Ranges the handler knows: more than the registered regions a configuration may allow
/// (`limits.max_shm_regions` is capped below this) plus the staging pool.
pub const CAPACITY: usize = 4096;

struct Entry {
    /// Start of the mapping; 0 when the entry is free.
    base: AtomicUsize,
    len: AtomicUsize,
    poisoned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Entry = Entry {
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    poisoned: AtomicBool::new(false),
};

static TABLE: [Entry; CAPACITY] = [FREE; CAPACITY];
static INSTALL: Once = Once::new();

/// One mapping under guard; leaves the table when dropped (before the mapping is unmapped).
#[derive(Debug)]
pub struct Guard {
    index: usize,
}

impl Guard {
    /// Enters `[base, base + len)` in the table, installing the handler on first use. `None` when
    /// the table is full.
    pub fn watch(base: usize, len: usize) -> Option<Guard> {
        INSTALL.call_once(install);
        for (index, entry) in TABLE.iter().enumerate() {
            // Claim a free entry: its length first, then publish the base.
            if entry
                .base
                .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                entry.len.store(len, Ordering::Release);
                entry.poisoned.store(false, Ordering::Release);
                entry.base.store(base, Ordering::Release);
                return Some(Guard { index });
            }
        }
        None
    }

    /// Whether a fault hit this mapping: its contents no longer show the object.
    pub fn poisoned(&self) -> bool {
        TABLE[self.index].poisoned.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let entry = &TABLE[self.index];
        entry.len.store(0, Ordering::Release);
        entry.base.store(0, Ordering::Release);
    }
}

fn install() {
    // This replaces the handler Rust's runtime installs for SIGBUS (stack-overflow detection,
    // which on Linux arrives as SIGSEGV and keeps its own handler); for faults that are not ours
    // `on_sigbus` does what that handler does: restore the default action and return.
    let action = SigAction::new(
        SigHandler::SigAction(on_sigbus),
        SaFlags::SA_SIGINFO | SaFlags::SA_NODEFER,
        SigSet::empty(),
    );
    // SAFETY: `on_sigbus` only reads atomics, and calls `mmap` and `sigaction`, which are
    // async-signal-safe; it allocates nothing and takes no lock.
    if let Err(e) = unsafe { sigaction(Signal::SIGBUS, &action) } {
        tracing::warn!(error = %e, "cannot install the SIGBUS handler; a client shrinking a registered shared-memory object could crash the server");
    }
}

extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO; for
    // SIGBUS `si_addr` is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    for entry in TABLE.iter() {
        let base = entry.base.load(Ordering::Acquire);
        let len = entry.len.load(Ordering::Acquire);
        if base == 0 || base == usize::MAX || addr < base || addr - base >= len {
            continue;
        }
        entry.poisoned.store(true, Ordering::Release);
        let page = page_size();
        let start = addr - addr % page;
        let end = base + len;
        let end = end.div_ceil(page) * page;
        // SAFETY: `[start, end)` lies inside a mapping this process made and still holds (its
        // guard is in the table until just before `munmap`); replacing its pages with private
        // anonymous ones keeps the address range valid for the interrupted copy. Nothing else
        // refers into the mapping: access goes only through bounds-checked copies.
        let replaced = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            return;
        }
        break;
    }
    // Not ours (or the remap failed): let the default action end the process when the faulting
    // instruction runs again.
    // SAFETY: resetting a signal's disposition is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf is async-signal-safe and has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}
