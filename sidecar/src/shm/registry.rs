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
