//! One POSIX shared-memory region, mapped read-write, under a SIGBUS guard (see [`super::guard`]):
//! its owner may shrink the object at any time, which must cost the request, not the server.

#![allow(unsafe_code)]

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use bytes::Bytes;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap, shm_open};
use nix::sys::stat::{Mode, fstat};

use super::guard::Guard;
use crate::error::{Error, Result};

/// Key prefixes clients may not register: Triton's python backend's, and the sidecar's own (its
/// staging pool, which carries other clients' tensors).
const RESERVED_PREFIXES: [&str; 2] = ["triton_python_backend_shm_region_", "infergate_"];

/// What identifies a shared-memory object whatever name it is opened by: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectId {
    pub device: u64,
    pub inode: u64,
}

/// A mapped `[offset, offset + byte_size)` window of a shared-memory object.
pub struct SystemRegion {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    /// Start of the mapping (page-aligned, at or below the registered offset).
    base: NonNull<u8>,
    /// Length of the mapping: `delta + byte_size`.
    mapped_len: usize,
    /// Distance from `base` to the registered offset.
    delta: usize,
    /// Kept open so every access can check the object was not shrunk under us.
    fd: OwnedFd,
    /// Entry of the mapping in the SIGBUS guard's table; released just before unmapping.
    guard: Option<Guard>,
}

// SAFETY: the mapping is owned by this value for its whole life and unmapped only in `drop`;
// the raw pointer is never handed out, and all reads and writes copy through `&self` methods
// that bounds-check against `byte_size`. Concurrent access from several threads is the same
// as concurrent access by the client process, which the design already assumes.
unsafe impl Send for SystemRegion {}
// SAFETY: see `Send`; no method hands out references into the mapping.
unsafe impl Sync for SystemRegion {}

impl std::fmt::Debug for SystemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemRegion")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish()
    }
}

/// Checks a key the way the server accepts it from a client: leading slashes are dropped (as
/// `shm_open` does); what remains must be non-empty, must not hold another `/` (no paths, no
/// `..` escapes), and must not use a reserved prefix.
pub fn validate_key(name: &str, key: &str) -> Result<()> {
    check_key_form(name, key)?;
    let stripped = key.trim_start_matches('/');
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| stripped.starts_with(*p)) {
        return Err(Error::invalid_arg(format!(
            "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{prefix}'"
        )));
    }
    Ok(())
}

fn check_key_form(name: &str, key: &str) -> Result<()> {
    let stripped = key.trim_start_matches('/');
    if stripped.is_empty() || stripped.contains('/') || stripped == "." || stripped == ".." {
        return Err(Error::invalid_arg(format!(
            "cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )));
    }
    Ok(())
}

/// Triton's words for a mapping that failed (`strerror` appended without a space, as it does).
fn mmap_failed(name: &str, errno: Errno) -> Error {
    Error::invalid_arg(format!(
        "failed to register shared memory region '{name}': unable to process address space{}",
        errno.desc()
    ))
}

fn page_size() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(n)) if n > 0 => n as u64,
        _ => 4096,
    }
}

impl SystemRegion {
    /// Opens `key` and maps `[offset, offset + byte_size)`. As in Triton, which maps at the
    /// offset itself, the offset must be a multiple of the page size and the size above zero
    /// (Triton's `mmap` fails with EINVAL otherwise, and says so). (The mapping code still
    /// handles an offset inside a page, at the page below it.)
    pub fn open(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Self> {
        validate_key(name, key)?;
        Self::map(name, key, offset, byte_size)
    }

    /// Opens an object of the sidecar's own (the staging pool), whose key has a reserved prefix.
    ///
    /// Only for objects the sidecar created itself: the staging pool
    /// (`infergate_sidecar::shm::staging`), which lives in the sidecar and so needs this public.
    /// It skips the reserved-prefix check that keeps clients from registering those objects, so a
    /// key that came from a client must never reach it; clients' regions go through
    /// [`SystemRegion::open`].
    pub fn open_own(key: &str, byte_size: u64) -> Result<Self> {
        check_key_form(key, key)?;
        Self::map(key, key, 0, byte_size)
    }

    /// The object's device and inode.
    pub fn object_id(&self) -> Result<ObjectId> {
        let stat = fstat(&self.fd).map_err(|e| {
            Error::internal(format!(
                "cannot look at shared memory region '{}': {e}",
                self.name
            ))
        })?;
        Ok(ObjectId {
            device: stat.st_dev,
            inode: stat.st_ino,
        })
    }

    fn map(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Self> {
        let invalid = || {
            Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': invalid args"
            ))
        };
        let path = format!("/{}", key.trim_start_matches('/'));
        let fd = shm_open(path.as_str(), OFlag::O_RDWR, Mode::empty()).map_err(|_| {
            Error::internal(format!("Unable to open shared memory region: '{key}'"))
        })?;
        let size = fstat(&fd).map_err(|_| invalid())?.st_size;
        let end = offset.checked_add(byte_size).ok_or_else(invalid)?;
        if end > u64::try_from(size).unwrap_or(0) {
            return Err(invalid());
        }
        let page = page_size();
        if byte_size == 0 || !offset.is_multiple_of(page) {
            return Err(mmap_failed(name, Errno::EINVAL));
        }
        let map_offset = offset - offset % page;
        let delta = usize::try_from(offset - map_offset).map_err(|_| invalid())?;
        let mapped_len = usize::try_from(byte_size)
            .ok()
            .and_then(|b| b.checked_add(delta))
            .ok_or_else(invalid)?;
        let length = NonZeroUsize::new(mapped_len).ok_or_else(invalid)?;
        let file_offset = i64::try_from(map_offset).map_err(|_| invalid())?;
        // SAFETY: a fresh shared mapping of an object we opened read-write, at a page-aligned
        // file offset, of a length checked against the object's size above; the kernel picks
        // the address. The mapping is released in `drop` with the same base and length.
        let base = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                file_offset,
            )
        }
        .map_err(|e| mmap_failed(name, e))?;
        let Some(guard) = Guard::watch(base.as_ptr() as usize, mapped_len) else {
            // SAFETY: the mapping was made just above with this base and length and is not
            // referred to by anything yet.
            let _ = unsafe { munmap(base, mapped_len) };
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': too many regions mapped"
            )));
        };
        Ok(SystemRegion {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
            base: base.cast(),
            mapped_len,
            delta,
            fd,
            guard: Some(guard),
        })
    }

    /// The `[offset, offset + len)` window inside the region, checked, as a pointer range.
    fn window(&self, offset: u64, len: u64) -> Result<(usize, usize)> {
        self.check_intact()?;
        let end = offset.checked_add(len).ok_or_else(|| {
            Error::invalid_arg(format!(
                "Integer overflow detected: byte_size ({len}) + offset ({offset}) exceeds maximum value ({}) for region '{}'",
                u64::MAX,
                self.name
            ))
        })?;
        if end > self.byte_size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                self.name
            )));
        }
        // Still backed? A client may shrink the object after registering it; touching pages
        // past its end would raise SIGBUS. (A shrink racing this check is still possible.)
        let size = fstat(&self.fd)
            .map(|s| u64::try_from(s.st_size).unwrap_or(0))
            .unwrap_or(0);
        if self.offset.saturating_add(end) > size {
            return Err(self.truncated());
        }
        let start = self.delta
            + usize::try_from(offset).map_err(|_| Error::invalid_arg("offset too large"))?;
        let len = usize::try_from(len).map_err(|_| Error::invalid_arg("byte size too large"))?;
        Ok((start, len))
    }

    fn truncated(&self) -> Error {
        Error::internal(format!(
            "shared memory region '{}' was truncated by its owner after registration",
            self.name
        ))
    }

    /// Refuses a region whose mapping took a fault: part of it is no longer the object.
    fn check_intact(&self) -> Result<()> {
        if self.guard.as_ref().is_some_and(Guard::poisoned) {
            return Err(self.truncated());
        }
        Ok(())
    }

    /// Copies `len` bytes at `offset` (relative to the registered offset) out of the region.
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let (start, len) = self.window(offset, len)?;
        // Not zero-filled first: the copy writes every byte, and filling megabytes with zeros
        // costs nearly as much as the copy itself.
        let mut out = Vec::<u8>::with_capacity(len);
        // SAFETY: `window` checked `start + len <= delta + byte_size == mapped_len`, so the
        // source lies inside our live mapping; the destination is the vector's spare capacity,
        // at least `len` bytes, which cannot overlap the mapping. The client may write the
        // source concurrently: we copy raw bytes and never form a reference to them. If it
        // shrinks the object during the copy, the guard turns the fault into zero pages and a
        // poison mark, checked right after; the copy still writes all `len` bytes either way,
        // so they are initialized when `set_len` makes them part of the vector.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(start), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        self.check_intact()?;
        Ok(Bytes::from(out))
    }

    /// Copies `data` into the region at `offset` (relative to the registered offset).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let (start, len) = self.window(offset, data.len() as u64)?;
        // SAFETY: as in `read`, the destination range is inside the mapping, which is writable
        // (PROT_WRITE, MAP_SHARED); the source is our own buffer of exactly `len` bytes.
        // A shrink during the copy is caught by the guard as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(start), len) };
        self.check_intact()
    }
}

impl Drop for SystemRegion {
    fn drop(&mut self) {
        // Out of the guard's table first: once unmapped, the range may be reused by anything.
        drop(self.guard.take());
        // SAFETY: `base` and `mapped_len` are exactly what `mmap` returned and was asked for;
        // nothing refers into the mapping once the last owner drops it.
        if let Err(e) = unsafe { munmap(self.base.cast(), self.mapped_len) } {
            tracing::warn!(region = %self.name, error = %e, "munmap failed");
        }
    }
}

#[cfg(test)]
mod tests;
