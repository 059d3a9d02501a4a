//! One POSIX shared-memory region, accessed through its file descriptor.
//!
//! The object is never mapped into the sidecar: bytes are copied with `pread`/`pwrite` at checked
//! offsets. The object belongs to another process, which may shrink or truncate it at any time;
//! through a mapping, touching a page past the new end raises SIGBUS and kills the server, while
//! through the descriptor it is a short read, answered as an error. Holding the descriptor keeps
//! the object alive after its owner unlinks it, as a mapping would. The copy costs the same as the
//! copy out of a mapping, which had to be made anyway at this trust boundary.

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};
use nix::fcntl::OFlag;
use nix::sys::mman::shm_open;
use nix::sys::stat::{Mode, fstat};

use crate::error::{Error, Result};

/// Keys reserved for Triton's python backend.
const RESERVED_PREFIX: &str = "triton_python_backend_shm_region_";

/// The `[offset, offset + byte_size)` window of a shared-memory object.
pub struct SystemRegion {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    /// The open object: every access goes through it.
    file: File,
}

impl std::fmt::Debug for SystemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemRegion")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish()
    }
}

/// Checks a key the way the server accepts it: leading slashes are dropped (as `shm_open`
/// does); what remains must be non-empty, must not hold another `/` (no paths, no `..`
/// escapes), and must not use the reserved prefix.
pub fn validate_key(name: &str, key: &str) -> Result<()> {
    let stripped = key.trim_start_matches('/');
    if stripped.is_empty() || stripped.contains('/') || stripped == "." || stripped == ".." {
        return Err(Error::invalid_arg(format!(
            "cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )));
    }
    if stripped.starts_with(RESERVED_PREFIX) {
        return Err(Error::invalid_arg(format!(
            "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_PREFIX}'"
        )));
    }
    Ok(())
}

impl SystemRegion {
    /// Opens `key` and checks that `[offset, offset + byte_size)` lies inside the object.
    pub fn open(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Self> {
        validate_key(name, key)?;
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
        if byte_size == 0 || end > u64::try_from(size).unwrap_or(0) || end > i64::MAX as u64 {
            return Err(invalid());
        }
        Ok(SystemRegion {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
            file: File::from(fd),
        })
    }

    /// The object offset of `[offset, offset + len)` inside the region, checked.
    fn window(&self, offset: u64, len: u64) -> Result<u64> {
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
        // Cannot overflow: offset + byte_size was checked at registration.
        Ok(self.offset + offset)
    }

    fn truncated(&self) -> Error {
        Error::internal(format!(
            "shared memory region '{}' was truncated by its owner after registration",
            self.name
        ))
    }

    /// Copies `len` bytes at `offset` (relative to the registered offset) out of the region.
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let at = self.window(offset, len)?;
        let len = usize::try_from(len).map_err(|_| Error::invalid_arg("byte size too large"))?;
        let mut out = BytesMut::zeroed(len);
        self.file.read_exact_at(&mut out, at).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.truncated()
            } else {
                Error::internal(format!(
                    "cannot read shared memory region '{}': {e}",
                    self.name
                ))
            }
        })?;
        Ok(out.freeze())
    }

    /// Copies `data` into the region at `offset` (relative to the registered offset).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.window(offset, data.len() as u64)?;
        // A write past the end would grow the owner's object again; refuse instead. (A shrink
        // racing this check regrows it, which is harmless: never a crash.)
        let size = fstat(&self.file)
            .map(|s| u64::try_from(s.st_size).unwrap_or(0))
            .unwrap_or(0);
        if at.saturating_add(data.len() as u64) > size {
            return Err(self.truncated());
        }
        self.file.write_all_at(data, at).map_err(|e| {
            Error::internal(format!(
                "cannot write shared memory region '{}': {e}",
                self.name
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Object(String);
    impl Drop for Object {
        fn drop(&mut self) {
            let _ = nix::sys::mman::shm_unlink(self.0.as_str());
        }
    }

    fn object(name: &str, len: usize) -> Object {
        let path = format!("/infergate_test_{name}_{}", std::process::id());
        let fd = shm_open(
            path.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .unwrap();
        nix::unistd::ftruncate(&fd, len as i64).unwrap();
        Object(path)
    }

    #[test]
    fn keys() {
        assert!(validate_key("r", "/ok").is_ok());
        assert!(validate_key("r", "///").is_err());
        assert!(validate_key("r", "/a/b").is_err());
        assert!(validate_key("r", "/..").is_err());
        assert!(validate_key("r", "/triton_python_backend_shm_region_1").is_err());
    }

    #[test]
    fn unaligned_offsets_read_and_write_the_right_bytes() {
        let obj = object("rw", 10_000);
        let a = SystemRegion::open("a", &obj.0, 0, 10_000).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        a.write(0, &data).unwrap();
        let b = SystemRegion::open("b", &obj.0, 4100, 100).unwrap();
        assert_eq!(&b.read(3, 10).unwrap()[..], &data[4103..4113]);
        b.write(0, &[7, 7]).unwrap();
        assert_eq!(&a.read(4100, 3).unwrap()[..], &[7, 7, data[4102]]);
    }

    #[test]
    fn bounds_are_enforced() {
        let obj = object("bounds", 4096);
        assert!(SystemRegion::open("x", &obj.0, 4000, 200).is_err());
        assert!(SystemRegion::open("x", &obj.0, u64::MAX, 2).is_err());
        let r = SystemRegion::open("x", &obj.0, 96, 4000).unwrap();
        assert!(r.read(0, 4000).is_ok());
        assert!(r.read(1, 4000).is_err());
        assert!(r.read(u64::MAX, 2).is_err());
        assert!(r.write(3999, &[1, 2]).is_err());
        assert!(
            SystemRegion::open("x", "/infergate_missing_object", 0, 1)
                .unwrap_err()
                .message
                .starts_with("Unable to open")
        );
    }

    #[test]
    fn a_truncated_object_is_refused_not_a_crash() {
        let obj = object("shrink", 8192);
        let r = SystemRegion::open("s", &obj.0, 0, 8192).unwrap();
        let fd = shm_open(obj.0.as_str(), OFlag::O_RDWR, Mode::empty()).unwrap();
        nix::unistd::ftruncate(&fd, 100).unwrap();
        assert!(r.read(0, 8192).is_err());
        assert!(r.read(0, 50).is_ok());
        assert!(r.write(200, &[1; 8]).is_err());
        assert_eq!(
            fstat(&fd).unwrap().st_size,
            100,
            "a refused write does not regrow it"
        );
    }

    #[test]
    fn an_owner_shrinking_and_growing_the_object_during_access_never_crashes() {
        // Through a mapping, this race raises SIGBUS in the reader; through the descriptor every
        // access either succeeds or is an error.
        let obj = object("race", 1 << 20);
        let r = SystemRegion::open("race", &obj.0, 0, 1 << 20).unwrap();
        let fd = shm_open(obj.0.as_str(), OFlag::O_RDWR, Mode::empty()).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..2000 {
                    let len = if i % 2 == 0 { 4096 } else { 1 << 20 };
                    nix::unistd::ftruncate(&fd, len).unwrap();
                }
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let (mut ok, mut refused) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match r.read(0, 1 << 20) {
                    Ok(b) => {
                        assert_eq!(b.len(), 1 << 20);
                        ok += 1
                    }
                    Err(e) => {
                        assert!(e.message.contains("truncated"), "{}", e.message);
                        refused += 1
                    }
                }
                let _ = r.write(0, &[7; 64]);
            }
            assert!(ok + refused > 0);
        });
    }
}
