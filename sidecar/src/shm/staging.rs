//! The staging pool: one POSIX shared-memory object the sidecar creates and owns, shared with the
//! model container through the pod's `/dev/shm`, and carved into slots that carry large tensors
//! to and from the upstream instead of the loopback socket.
//!
//! The object's pages are reserved with `posix_fallocate` when it is created, so a full `/dev/shm`
//! is an error at start rather than a SIGBUS in the middle of a request. Slots are returned to the
//! pool when dropped, on every path (success, upstream error, cancelled request). The object is
//! unlinked when the pool is dropped; a predecessor's object left by a killed process with the same
//! pid (a restarted container) is unlinked before a new one is made.
//!
//! The object's name is not guessable (`pool_key`), is never listed (not in `/status`, not in the
//! sidecar's shared-memory status), and clients cannot register it, by that name or any other
//! for the same object (`Registry::reserve`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use nix::errno::Errno;
use nix::fcntl::{OFlag, posix_fallocate};
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::{Mode, fchmod};
use parking_lot::Mutex;

use super::region::SystemRegion;
use crate::error::{Error, Result};

/// Slots start on this boundary (a cache line), so tensors are aligned for any element type.
const ALIGN: u64 = 64;

/// Free byte ranges of the pool, by offset; adjacent ranges are merged on release.
#[derive(Debug)]
struct FreeList {
    ranges: BTreeMap<u64, u64>,
}

impl FreeList {
    fn new(capacity: u64) -> Self {
        let mut ranges = BTreeMap::new();
        if capacity > 0 {
            ranges.insert(0, capacity);
        }
        FreeList { ranges }
    }

    /// First fit: the lowest free range that holds `len` bytes.
    fn take(&mut self, len: u64) -> Option<u64> {
        let (&offset, &free) = self.ranges.iter().find(|&(_, &free)| free >= len)?;
        self.ranges.remove(&offset);
        if free > len {
            self.ranges.insert(offset + len, free - len);
        }
        Some(offset)
    }

    fn give_back(&mut self, mut offset: u64, mut len: u64) {
        if let Some((&before, &before_len)) = self.ranges.range(..offset).next_back()
            && before + before_len == offset
        {
            self.ranges.remove(&before);
            offset = before;
            len += before_len;
        }
        if let Some(after_len) = self.ranges.remove(&(offset + len)) {
            len += after_len;
        }
        self.ranges.insert(offset, len);
    }
}

/// The mapped object and its allocator.
pub struct StagingPool {
    region: SystemRegion,
    free: Mutex<FreeList>,
    in_use: AtomicU64,
}

impl std::fmt::Debug for StagingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingPool")
            .field("key", &self.region.key)
            .field("byte_size", &self.region.byte_size)
            .finish()
    }
}

impl StagingPool {
    /// Creates `/<key>` of `byte_size` bytes (mode 0660: the model container must run as the same
    /// user or share its group), reserves its pages and maps it.
    pub fn create(key: &str, byte_size: u64) -> Result<Arc<Self>> {
        let path = format!("/{}", key.trim_start_matches('/'));
        let fail = |what: &str, e: Errno| {
            Error::internal(format!(
                "cannot create the staging pool '{path}': {what}: {e}"
            ))
        };
        let fd = shm_open(
            path.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .map_err(|e| fail("shm_open", e))?;
        // From here on the object exists: unlink it on every failure.
        let unlink_on_error = |e: Error| {
            let _ = shm_unlink(path.as_str());
            e
        };
        // The umask may have narrowed the mode; group access is what lets a model container with
        // another uid but the pod's group open it.
        let mode = Mode::S_IRUSR | Mode::S_IWUSR | Mode::S_IRGRP | Mode::S_IWGRP;
        fchmod(&fd, mode)
            .map_err(|e| fail("fchmod", e))
            .map_err(unlink_on_error)?;
        let len = i64::try_from(byte_size)
            .map_err(|_| Error::invalid_arg(format!("staging pool size {byte_size} is too large")))
            .map_err(unlink_on_error)?;
        posix_fallocate(&fd, 0, len)
            .map_err(|e| fail("reserving its pages (is /dev/shm large enough?)", e))
            .map_err(unlink_on_error)?;
        drop(fd);
        let region = SystemRegion::open_own(key, byte_size)
            .map_err(Error::from)
            .map_err(unlink_on_error)?;
        Ok(Arc::new(StagingPool {
            region,
            free: Mutex::new(FreeList::new(byte_size)),
            in_use: AtomicU64::new(0),
        }))
    }

    /// The object's name under `/dev/shm`, as registered with the upstream.
    pub fn key(&self) -> &str {
        &self.region.key
    }

    /// The object's device and inode, which clients may not register by any name.
    pub fn object_id(&self) -> Result<super::region::ObjectId> {
        Ok(self.region.object_id()?)
    }

    pub fn byte_size(&self) -> u64 {
        self.region.byte_size
    }

    /// Bytes currently held by slots.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// A slot of at least `len` bytes, or `None` when the pool has no room (the caller sends the
    /// tensor over the socket instead of waiting).
    pub fn slot(self: &Arc<Self>, len: u64) -> Option<Slot> {
        let rounded = len.max(1).checked_next_multiple_of(ALIGN)?;
        let offset = self.free.lock().take(rounded)?;
        self.in_use.fetch_add(rounded, Ordering::Relaxed);
        Some(Slot {
            pool: self.clone(),
            offset,
            len: rounded,
            retired: false,
        })
    }

    /// Removes the object's name from `/dev/shm` (idempotent). The mapping, and the upstream's
    /// if it still has one, stay valid until unmapped; the memory is freed with the last one.
    pub fn unlink(&self) {
        let path = format!("/{}", self.region.key.trim_start_matches('/'));
        match shm_unlink(path.as_str()) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => tracing::warn!(key = %path, error = %e, "could not unlink the staging pool"),
        }
    }
}

/// A name for the pool no client can guess (128 random bits), under the reserved `infergate_`
/// prefix, led by the pid so that a successor can find what a killed predecessor left.
pub fn pool_key(pid: u32) -> std::io::Result<String> {
    use std::io::Read;
    let mut random = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let mut key = predecessor_prefix(pid);
    for byte in random {
        key.push_str(&format!("{byte:02x}"));
    }
    Ok(key)
}

fn predecessor_prefix(pid: u32) -> String {
    format!("infergate_staging_{pid}_")
}

/// Unlinks the pools a previous process with this pid left (a restarted container gets the same
/// pid, and the pod's `/dev/shm` outlives it): that process is gone, and its pool would hold the
/// memory until the pod ends. Another live sidecar sharing this `/dev/shm` has another pid.
pub fn unlink_predecessors(pid: u32) {
    let prefix = predecessor_prefix(pid);
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&prefix) {
            match shm_unlink(format!("/{name}").as_str()) {
                Ok(()) => tracing::info!("removed a staging pool a previous process left"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot remove a staging pool a previous process left")
                }
            }
        }
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// A range of the pool held for one tensor of one request; returned to the pool when dropped,
/// unless retired.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<StagingPool>,
    offset: u64,
    len: u64,
    retired: bool,
}

impl Slot {
    /// Offset inside the pool's object (what the upstream is told).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Usable bytes (the requested length rounded up to the alignment).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn write(&self, data: &[u8]) -> Result<()> {
        if data.len() as u64 > self.len {
            return Err(Error::internal("tensor larger than its staging slot"));
        }
        Ok(self.pool.region.write(self.offset, data)?)
    }

    /// Copies the first `len` bytes of the slot out.
    pub fn read(&self, len: u64) -> Result<Bytes> {
        if len > self.len {
            return Err(Error::internal(format!(
                "the upstream reported {len} bytes for a {}-byte staging slot",
                self.len
            )));
        }
        Ok(self.pool.region.read(self.offset, len)?)
    }

    /// Keeps the range out of the pool for good (it stays counted in `in_use`): the upstream was
    /// told to use it and never answered, so it may still read or write it, and handing it to
    /// another request could mix two requests' tensors.
    pub fn retire(mut self) {
        self.retired = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.retired {
            return;
        }
        self.pool.free.lock().give_back(self.offset, self.len);
        self.pool.in_use.fetch_sub(self.len, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> String {
        format!("infergate_test_staging_{name}_{}", std::process::id())
    }

    fn exists(key: &str) -> bool {
        std::path::Path::new("/dev/shm").join(key).exists()
    }

    #[test]
    fn free_list_first_fit_and_merges() {
        let mut f = FreeList::new(1000);
        assert_eq!(f.take(100), Some(0));
        assert_eq!(f.take(200), Some(100));
        assert_eq!(f.take(300), Some(300));
        assert_eq!(f.take(500), None);
        f.give_back(100, 200);
        assert_eq!(f.take(150), Some(100));
        f.give_back(100, 150);
        f.give_back(0, 100);
        f.give_back(300, 300);
        assert_eq!(f.ranges.len(), 1, "{:?}", f.ranges);
        assert_eq!(f.take(1000), Some(0));
    }

    #[test]
    fn slots_do_not_overlap_and_come_back_when_dropped() {
        let k = key("slots");
        let pool = StagingPool::create(&k, 4096).unwrap();
        assert!(exists(&k));
        let a = pool.slot(100).unwrap();
        let b = pool.slot(1).unwrap();
        assert_eq!(a.len(), 128);
        assert!(b.offset() >= a.offset() + a.len());
        a.write(&[1; 100]).unwrap();
        b.write(&[2]).unwrap();
        assert_eq!(&a.read(100).unwrap()[..], &[1; 100][..]);
        assert_eq!(&b.read(1).unwrap()[..], &[2]);
        assert!(a.read(129).is_err());
        assert!(b.write(&[0; 65]).is_err());
        assert!(pool.slot(4096).is_none(), "the pool is partly used");
        assert_eq!(pool.in_use(), 192);
        drop((a, b));
        assert_eq!(pool.in_use(), 0);
        assert!(pool.slot(4096).is_some());
        drop(pool);
        assert!(!exists(&k), "the object is unlinked with the pool");
    }

    #[test]
    fn a_retired_slot_never_comes_back() {
        let k = key("retired");
        let pool = StagingPool::create(&k, 4096).unwrap();
        let a = pool.slot(1024).unwrap();
        let offset = a.offset();
        a.retire();
        assert_eq!(pool.in_use(), 1024);
        let rest = pool.slot(3072).unwrap();
        assert!(
            rest.offset() >= offset + 1024,
            "the retired range is not handed out again"
        );
        assert!(pool.slot(1).is_none());
        drop(rest);
        assert_eq!(pool.in_use(), 1024);
    }

    #[test]
    fn what_a_killed_predecessor_with_this_pid_left_is_removed_and_nothing_else() {
        // A pid no process of this machine has, so that no live pool is touched.
        let pid = u32::MAX - std::process::id();
        let mine = pool_key(pid).unwrap();
        let another = pool_key(pid - 1).unwrap();
        std::mem::forget(StagingPool::create(&mine, 4096).unwrap()); // as if killed
        std::mem::forget(StagingPool::create(&another, 4096).unwrap());
        unlink_predecessors(pid);
        assert!(!exists(&mine));
        assert!(exists(&another));
        unlink_predecessors(pid - 1);
        assert!(!exists(&another));
    }

    #[test]
    fn pool_keys_are_led_by_the_pid_and_not_guessable() {
        let a = pool_key(7).unwrap();
        let b = pool_key(7).unwrap();
        assert_ne!(a, b);
        let random = a.strip_prefix("infergate_staging_7_").unwrap();
        assert_eq!(random.len(), 32);
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn an_impossible_size_is_an_error_and_leaves_nothing() {
        let k = key("huge");
        let err = StagingPool::create(&k, 1 << 50).unwrap_err();
        assert!(err.message.contains("staging pool"), "{}", err.message);
        assert!(!exists(&k));
    }
}
