//! Shared-memory parameter handling: registering regions (names, keys, offsets and sizes at and
//! past every boundary), resolving the `shared_memory_*` parameters of a request against them,
//! reading and writing through them, and the client resizing its object while registered.
//!
//! The input is a sequence of operations on two `/dev/shm` objects the target owns. Keys other
//! than those two are fuzzed text behind a fixed `infergate-fuzz-` prefix, so that a fuzzed key
//! can never name another program's object.
//!
//! Checked: a registration succeeds only inside its object; a read or write succeeds only inside
//! its region; what is read is what was last written there (while the object keeps its size).

use std::fs::{File, OpenOptions};

use arbitrary::Arbitrary;
use infergate_sidecar::shm::{Registry, ShmLimits, cuda};

const OBJECT_BYTES: u64 = 3 * 4096;
const NAMES: [&str; 4] = ["a", "b", "c", ""];

#[derive(Arbitrary, Debug)]
pub enum Op {
    Register {
        name: u8,
        key: Key,
        offset: u64,
        byte_size: u64,
    },
    Unregister {
        name: Option<u8>,
    },
    Status {
        name: Option<u8>,
    },
    Read {
        name: u8,
        offset: u64,
        byte_size: u64,
    },
    Write {
        name: u8,
        offset: u64,
        fill: u8,
        len: u16,
    },
    /// The client truncates or extends its object while it is registered.
    Resize {
        object: bool,
        len: u16,
    },
}

#[derive(Arbitrary, Debug)]
pub enum Key {
    Object(bool),
    Text(String),
}

/// One of the target's own `/dev/shm` objects, made fresh for every input and removed after it
/// (a libFuzzer process ends with `exit`, so nothing made once would ever be removed).
struct Object {
    key: String,
    path: String,
    file: File,
}

impl Object {
    fn create(n: u8) -> Object {
        let key = format!("infergate-fuzz-{}-{n}", std::process::id());
        let path = format!("/dev/shm/{key}");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        file.set_len(OBJECT_BYTES)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        Object { key, path, file }
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A registered region as the client sees it.
#[derive(Clone)]
struct Mirror {
    name: &'static str,
    object: usize,
    offset: u64,
    byte_size: u64,
}

pub fn run(ops: &[Op]) {
    let objects = [Object::create(0), Object::create(1)];
    let mut contents = [
        vec![0u8; OBJECT_BYTES as usize],
        vec![0u8; OBJECT_BYTES as usize],
    ];
    let registry = Registry::new(
        true,
        ShmLimits {
            max_regions: 3,
            max_total_bytes: 2 * OBJECT_BYTES,
        },
        cuda::Cuda::Unavailable("fuzzing".to_string()),
    );
    let mut regions: Vec<Mirror> = Vec::new();
    let mut sizes = [OBJECT_BYTES; 2];
    // Once an object changed size, what a stale mapping shows of it is the kernel's business.
    let mut predictable = [true; 2];
    for op in ops.iter().take(64) {
        match op {
            Op::Register {
                name,
                key,
                offset,
                byte_size,
            } => {
                let name = NAMES[usize::from(*name) % NAMES.len()];
                let (key, object) = match key {
                    Key::Object(second) => {
                        let i = usize::from(*second);
                        (objects[i].key.clone(), Some(i))
                    }
                    Key::Text(text) => (format!("infergate-fuzz-absent-{text}"), None),
                };
                let result = registry.register_system(name, &key, *offset, *byte_size);
                match (result, object) {
                    (Ok(()), Some(object)) => {
                        let end = offset.checked_add(*byte_size);
                        assert!(
                            *byte_size > 0 && end.is_some_and(|end| end <= sizes[object]),
                            "registered {offset}+{byte_size} in an object of {}",
                            sizes[object]
                        );
                        regions.push(Mirror {
                            name,
                            object,
                            offset: *offset,
                            byte_size: *byte_size,
                        });
                    }
                    (Ok(()), None) => panic!("registered a key that names no object: {key}"),
                    (Err(_), _) => {}
                }
            }
            Op::Unregister { name } => {
                let name = name.map(|n| NAMES[usize::from(n) % NAMES.len()]);
                registry
                    .unregister_system(name)
                    .unwrap_or_else(|e| panic!("unregister {name:?}: {}", e.message));
                regions.retain(|r| name.is_some_and(|n| n != r.name));
            }
            Op::Status { name } => {
                let name = name.map(|n| NAMES[usize::from(n) % NAMES.len()]);
                let listed = registry.system_status(name);
                if name.is_none() {
                    let listed = listed.unwrap_or_else(|e| panic!("status: {}", e.message));
                    assert_eq!(listed.len(), regions.len(), "status lists every region");
                }
            }
            Op::Read {
                name,
                offset,
                byte_size,
            } => {
                let name = NAMES[usize::from(*name) % NAMES.len()];
                let read = registry
                    .resolve(name, *offset, *byte_size)
                    .and_then(|region| region.read(*offset, *byte_size));
                let mirror = regions.iter().find(|r| r.name == name);
                if let Ok(bytes) = read {
                    let mirror =
                        mirror.unwrap_or_else(|| panic!("read from unregistered '{name}'"));
                    check_inside(mirror, *offset, *byte_size);
                    assert_eq!(bytes.len() as u64, *byte_size);
                    if predictable[mirror.object] {
                        let start = (mirror.offset + offset) as usize;
                        let expected = &contents[mirror.object][start..start + bytes.len()];
                        assert!(bytes == expected, "read back differs from what was written");
                    }
                }
            }
            Op::Write {
                name,
                offset,
                fill,
                len,
            } => {
                let name = NAMES[usize::from(*name) % NAMES.len()];
                let data = vec![*fill; usize::from(*len)];
                let written = registry
                    .resolve(name, *offset, u64::from(*len))
                    .and_then(|region| region.write(*offset, &data));
                if written.is_ok() {
                    let mirror = regions
                        .iter()
                        .find(|r| r.name == name)
                        .unwrap_or_else(|| panic!("write to unregistered '{name}'"));
                    check_inside(mirror, *offset, u64::from(*len));
                    if predictable[mirror.object] {
                        let start = (mirror.offset + offset) as usize;
                        contents[mirror.object][start..start + data.len()].copy_from_slice(&data);
                    }
                }
            }
            Op::Resize { object, len } => {
                let i = usize::from(*object);
                let len = u64::from(*len) % (2 * OBJECT_BYTES);
                if objects[i].file.set_len(len).is_ok() {
                    sizes[i] = len;
                    contents[i].resize(len as usize, 0);
                    predictable[i] = false;
                }
            }
        }
    }
    // The regions are unmapped before their objects are removed.
    drop(registry);
    drop(objects);
}

fn check_inside(region: &Mirror, offset: u64, byte_size: u64) {
    assert!(
        offset
            .checked_add(byte_size)
            .is_some_and(|end| end <= region.byte_size),
        "access {offset}+{byte_size} outside a region of {}",
        region.byte_size
    );
}
