//! Registered regions by name, with Triton's register / status / unregister semantics and
//! explicit limits. System and CUDA regions share one namespace. A request holds an `Arc` of
//! each region it uses, so unregistering during a request unmaps only when that request ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::region::SystemRegion;
use crate::error::{Error, Result};

/// Limits on what clients may map.
#[derive(Clone, Copy, Debug)]
pub struct ShmLimits {
    pub max_regions: usize,
    pub max_total_bytes: u64,
}

impl Default for ShmLimits {
    fn default() -> Self {
        ShmLimits {
            max_regions: 256,
            max_total_bytes: 16 << 30,
        }
    }
}

pub const DISABLED: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// Status of one system region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

pub struct Registry {
    allowed: bool,
    limits: ShmLimits,
    system: Mutex<BTreeMap<String, Arc<SystemRegion>>>,
}

impl Registry {
    pub fn new(allowed: bool, limits: ShmLimits) -> Self {
        Registry {
            allowed,
            limits,
            system: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn allowed(&self) -> bool {
        self.allowed
    }

    pub fn register_system(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        if !self.allowed {
            return Err(Error::unsupported(DISABLED));
        }
        if name.is_empty() {
            return Err(Error::invalid_arg(
                "'region name' is necessary to register system shared memory region",
            ));
        }
        {
            let regions = self.system.lock();
            if regions.contains_key(name) {
                return Err(Error::already_exists(format!(
                    "shared memory region '{name}' already in manager"
                )));
            }
            if regions.len() >= self.limits.max_regions {
                return Err(Error::invalid_arg(format!(
                    "cannot register shared memory region '{name}': the limit of {} regions is reached",
                    self.limits.max_regions
                )));
            }
            let mapped: u64 = regions.values().map(|r| r.byte_size).sum();
            if mapped.saturating_add(byte_size) > self.limits.max_total_bytes {
                return Err(Error::invalid_arg(format!(
                    "cannot register shared memory region '{name}': registered regions would exceed the limit of {} bytes",
                    self.limits.max_total_bytes
                )));
            }
        }
        // Map outside the lock: opening may be slow and other requests must go on.
        let region = Arc::new(SystemRegion::open(name, key, offset, byte_size)?);
        let mut regions = self.system.lock();
        if regions.contains_key(name) {
            return Err(Error::already_exists(format!(
                "shared memory region '{name}' already in manager"
            )));
        }
        regions.insert(name.to_string(), region);
        tracing::info!(
            region = name,
            key,
            offset,
            byte_size,
            "system shared memory registered"
        );
        Ok(())
    }

    /// Unregisters `name`, or every system region when `None`. Unknown names are no-ops.
    pub fn unregister_system(&self, name: Option<&str>) -> Result<()> {
        if !self.allowed {
            return Err(Error::unsupported(DISABLED));
        }
        let mut regions = self.system.lock();
        match name {
            Some(n) => {
                regions.remove(n);
            }
            None => regions.clear(),
        }
        Ok(())
    }

    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<SystemStatus>> {
        let regions = self.system.lock();
        let status = |r: &SystemRegion| SystemStatus {
            name: r.name.clone(),
            key: r.key.clone(),
            offset: r.offset,
            byte_size: r.byte_size,
        };
        match name {
            None => Ok(regions.values().map(|r| status(r)).collect()),
            Some(n) => regions.get(n).map(|r| vec![status(r)]).ok_or_else(|| {
                Error::not_found(format!("Unable to find system shared memory region: '{n}'"))
            }),
        }
    }

    /// Whether `name` is a registered system region (CUDA status names it that way).
    pub fn is_system(&self, name: &str) -> bool {
        self.system.lock().contains_key(name)
    }

    /// The answer to a CUDA status request for `name`: no CUDA region can exist without a GPU.
    pub fn cuda_status_error(&self, name: &str) -> Error {
        if self.is_system(name) {
            Error::not_found(format!(
                "The region named '{name}' is registered as system shared memory, not CUDA shared memory"
            ))
        } else {
            Error::not_found(format!(
                "Unable to find cuda shared memory region: '{name}'"
            ))
        }
    }

    /// The region an inference request names, with its offset and size checked.
    pub fn resolve(&self, name: &str, offset: u64, byte_size: u64) -> Result<Arc<SystemRegion>> {
        let region = self.system.lock().get(name).cloned().ok_or_else(|| {
            Error::not_found(format!("Unable to find shared memory region: '{name}'"))
        })?;
        if offset >= region.byte_size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset for shared memory region: '{name}'"
            )));
        }
        let end = offset.checked_add(byte_size).ok_or_else(|| {
            Error::invalid_arg(format!(
                "Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value ({}) for region '{name}'",
                u64::MAX
            ))
        })?;
        if end > region.byte_size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{name}'"
            )));
        }
        Ok(region)
    }
}

/// Where an output goes when the client asked for it in shared memory.
#[derive(Clone, Debug)]
pub struct ShmTarget {
    pub region: Arc<SystemRegion>,
    pub offset: u64,
    pub byte_size: u64,
}

impl ShmTarget {
    /// Writes an output's bytes, refusing results larger than the space the client gave.
    pub fn write(&self, output: &str, data: &[u8]) -> Result<()> {
        if data.len() as u64 > self.byte_size {
            return Err(Error::internal(format!(
                "shared memory size specified with the request for output '{output}' ({} bytes) should be at least {} bytes to hold the results",
                self.byte_size,
                data.len()
            )));
        }
        self.region.write(self.offset, data)
    }
}

impl PartialEq for ShmTarget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.region, &other.region)
            && self.offset == other.offset
            && self.byte_size == other.byte_size
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use nix::fcntl::OFlag;
    use nix::sys::mman::{shm_open, shm_unlink};
    use nix::sys::stat::Mode;
    use proptest::prelude::*;

    use super::*;

    const OBJECT_SIZE: u64 = 3 * 4096 + 100;

    struct Object(String);
    impl Drop for Object {
        fn drop(&mut self) {
            let _ = shm_unlink(self.0.as_str());
        }
    }

    fn object(tag: &str) -> Object {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!("/infergate_registry_{tag}_{}_{n}", std::process::id());
        let fd = shm_open(
            path.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .unwrap();
        nix::unistd::ftruncate(&fd, OBJECT_SIZE as i64).unwrap();
        Object(path)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Register {
            name: u8,
            offset: u64,
            size: u64,
        },
        Unregister {
            name: Option<u8>,
        },
        Use {
            name: u8,
            offset: u64,
            size: u64,
            write: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let edge = prop_oneof![
            0..OBJECT_SIZE + 10,
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(4096u64),
            Just(4095u64)
        ];
        prop_oneof![
            (0..4u8, edge.clone(), edge.clone()).prop_map(|(name, offset, size)| Op::Register {
                name,
                offset,
                size
            }),
            proptest::option::of(0..4u8).prop_map(|name| Op::Unregister { name }),
            (0..4u8, edge.clone(), edge, any::<bool>()).prop_map(|(name, offset, size, write)| {
                Op::Use {
                    name,
                    offset,
                    size: size % 8192,
                    write,
                }
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Random register / use / unregister sequences agree with a plain model of the
        /// registry, and no access ever escapes a region (it would crash or corrupt).
        #[test]
        fn registry_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
            let obj = object("prop");
            let registry = Registry::new(true, ShmLimits { max_regions: 3, max_total_bytes: 3 * OBJECT_SIZE });
            let mut model: HashMap<u8, (u64, u64)> = HashMap::new();
            for op in ops {
                match op {
                    Op::Register { name, offset, size } => {
                        let fits = size > 0 && offset.checked_add(size).is_some_and(|e| e <= OBJECT_SIZE);
                        let expect_ok = !model.contains_key(&name) && model.len() < 3 && fits;
                        let got = registry.register_system(&format!("r{name}"), &obj.0, offset, size);
                        prop_assert_eq!(got.is_ok(), expect_ok, "{:?}", got);
                        if expect_ok {
                            model.insert(name, (offset, size));
                        }
                    }
                    Op::Unregister { name } => {
                        registry.unregister_system(name.map(|n| format!("r{n}")).as_deref()).unwrap();
                        match name {
                            Some(n) => { model.remove(&n); }
                            None => model.clear(),
                        }
                    }
                    Op::Use { name, offset, size, write } => {
                        let got = registry.resolve(&format!("r{name}"), offset, size);
                        let expect_ok = model.get(&name).is_some_and(|(_, region)| {
                            offset < *region && offset.checked_add(size).is_some_and(|e| e <= *region)
                        });
                        prop_assert_eq!(got.is_ok(), expect_ok);
                        if let Ok(region) = got {
                            if write {
                                region.write(offset, &vec![0xAB; size as usize]).unwrap();
                            }
                            let bytes = region.read(offset, size).unwrap();
                            prop_assert_eq!(bytes.len() as u64, size);
                            if write {
                                prop_assert!(bytes.iter().all(|b| *b == 0xAB));
                            }
                        }
                    }
                }
                let listed: Vec<String> = registry.system_status(None).unwrap().into_iter().map(|s| s.name).collect();
                let mut expected: Vec<String> = model.keys().map(|n| format!("r{n}")).collect();
                expected.sort();
                prop_assert_eq!(listed, expected);
            }
        }
    }

    #[test]
    fn disabled_registry_refuses_registration() {
        let registry = Registry::new(false, ShmLimits::default());
        let err = registry.register_system("a", "/x", 0, 1).unwrap_err();
        assert_eq!(err.message, DISABLED);
        assert!(registry.system_status(None).unwrap().is_empty());
    }

    #[test]
    fn in_flight_requests_keep_an_unregistered_region_mapped() {
        let obj = object("inflight");
        let registry = Registry::new(true, ShmLimits::default());
        registry.register_system("a", &obj.0, 0, 64).unwrap();
        let held = registry.resolve("a", 0, 64).unwrap();
        registry.unregister_system(Some("a")).unwrap();
        assert!(registry.resolve("a", 0, 1).is_err());
        held.write(0, &[1, 2, 3]).unwrap();
        assert_eq!(&held.read(0, 3).unwrap()[..], &[1, 2, 3]);
    }
}
