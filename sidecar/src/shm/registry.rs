//! Registered regions by name, with Triton's register / status / unregister semantics and
//! explicit limits. System and CUDA regions share one namespace.
//!
//! A request holds an `Arc` of each region it uses (in its [`ShmTarget`]s). Unregistering a
//! region that requests are using succeeds at once but, as in Triton, only marks it: it stays
//! registered (listed, usable by new requests, its name taken) until the last request using it
//! ends, which then completes the unregistration. A region whose last user ended without seeing
//! the mark (the two raced) is let go of by the next call that looks at the table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use super::cuda::{Cuda, CudaRegion, HANDLE_BYTES};
use super::forwarded::ForwardedCudaRegion;
use super::region::{ObjectId, SystemRegion};
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

/// A registered region of either kind.
#[derive(Debug)]
pub enum Region {
    System(SystemRegion),
    Cuda(CudaRegion),
    /// A CUDA buffer only the model server opens (this container has no usable GPU).
    CudaForwarded(ForwardedCudaRegion),
}

impl Region {
    pub fn byte_size(&self) -> u64 {
        match self {
            Region::System(r) => r.byte_size,
            Region::Cuda(r) => r.byte_size,
            Region::CudaForwarded(r) => r.byte_size,
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Region::System(_) => Kind::System,
            Region::Cuda(_) | Region::CudaForwarded(_) => Kind::Cuda,
        }
    }

    /// A CUDA region's IPC handle and device, to hand the buffer to a model server.
    pub fn cuda_handle(&self) -> Option<(&[u8; HANDLE_BYTES], u64)> {
        match self {
            Region::System(_) => None,
            Region::Cuda(r) => Some((&r.raw_handle, r.device as u64)),
            Region::CudaForwarded(r) => Some((&r.raw_handle, r.device_id)),
        }
    }

    /// Whether only the model server can use this region's bytes.
    pub fn is_forwarded(&self) -> bool {
        matches!(self, Region::CudaForwarded(_))
    }

    /// Copies `len` bytes at `offset` (inside the region) out of it.
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        match self {
            Region::System(r) => Ok(r.read(offset, len)?),
            Region::Cuda(r) => Ok(r.read(offset, len)?),
            // An empty window needs no bytes (a zero-sized tensor).
            Region::CudaForwarded(_) if len == 0 => Ok(Bytes::new()),
            Region::CudaForwarded(r) => Err(r.unusable()),
        }
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        match self {
            Region::System(r) => Ok(r.write(offset, data)?),
            Region::Cuda(r) => Ok(r.write(offset, data)?),
            Region::CudaForwarded(_) if data.is_empty() => Ok(()),
            Region::CudaForwarded(r) => Err(r.unusable()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    System,
    Cuda,
}

/// Status of one system region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Status of one CUDA region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaStatus {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
}

pub struct Registry {
    allowed: bool,
    limits: ShmLimits,
    cuda: Cuda,
    table: Arc<Table>,
    /// Objects of the sidecar's own (the staging pool): no client registers them, by any name.
    reserved: parking_lot::RwLock<Vec<ObjectId>>,
    /// Set on the registry callers get that shared memory is not served to (`refusing`): every
    /// operation answers this refusal.
    refusal: Option<&'static str>,
}

/// One registration.
#[derive(Debug)]
struct Registered {
    region: Arc<Region>,
    /// Unregistered while requests were using it: it goes when the last of them ends.
    awaiting_unregister: bool,
}

/// The registered regions by name, shared with the requests that use them so that the last one
/// to end can complete an unregistration that waited for it.
#[derive(Debug, Default)]
struct Table {
    regions: Mutex<BTreeMap<String, Registered>>,
    /// How many registrations wait for their requests to end; while none do, a request ends
    /// without taking the lock.
    awaiting: AtomicUsize,
}

type Regions = BTreeMap<String, Registered>;

impl Table {
    /// The table, locked, without the waiting registrations that nothing uses any more.
    fn lock(&self) -> parking_lot::MutexGuard<'_, Regions> {
        let mut regions = self.regions.lock();
        if self.awaiting.load(Ordering::Acquire) > 0 {
            self.remove_where(&mut regions, |_| false);
        }
        regions
    }

    /// Unregisters the regions `wanted` picks: at once those no request uses, the others when
    /// the last request using them ends (marked until then).
    fn unregister(&self, regions: &mut Regions, wanted: impl Fn(&str, &Registered) -> bool) {
        regions.retain(|name, entry| {
            if !wanted(name, entry) {
                return true;
            }
            if Arc::strong_count(&entry.region) == 1 {
                self.forget(entry);
                return false;
            }
            if !entry.awaiting_unregister {
                entry.awaiting_unregister = true;
                self.awaiting.fetch_add(1, Ordering::AcqRel);
                tracing::debug!(
                    region = name,
                    "shared memory region will be unregistered after in-flight requests complete"
                );
            }
            true
        });
    }

    /// Accounts for `entry` leaving the table.
    fn forget(&self, entry: &Registered) {
        if entry.awaiting_unregister {
            self.awaiting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Removes the waiting registrations no request uses, counting `ending` (a request's hold
    /// that is about to be dropped) as not using its region.
    fn remove_where(&self, regions: &mut Regions, ending: impl Fn(&Arc<Region>) -> bool) {
        regions.retain(|_, entry| {
            let holders = Arc::strong_count(&entry.region) - usize::from(ending(&entry.region));
            let done = entry.awaiting_unregister && holders == 1;
            if done {
                self.forget(entry);
            }
            !done
        });
    }

    /// A request lets go of `region`: the unregistration it was the last user of is completed.
    fn release(&self, region: &Arc<Region>) {
        if self.awaiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut regions = self.regions.lock();
        self.remove_where(&mut regions, |r| Arc::ptr_eq(r, region));
    }
}

impl Registry {
    pub fn new(allowed: bool, limits: ShmLimits, cuda: Cuda) -> Self {
        Registry {
            allowed,
            limits,
            cuda,
            table: Arc::default(),
            reserved: parking_lot::RwLock::default(),
            refusal: None,
        }
    }

    /// What callers that shared memory is not served to see: a registry that refuses every
    /// operation (registration, status, unregistering, a request naming a region) with
    /// `refusal`, before looking at anything, so that it tells nothing of the regions there are.
    pub fn refusing(refusal: &'static str) -> Self {
        Registry {
            allowed: false,
            limits: ShmLimits::default(),
            cuda: Cuda::unavailable("shared memory is not served to this client"),
            table: Arc::default(),
            reserved: parking_lot::RwLock::default(),
            refusal: Some(refusal),
        }
    }

    /// The refusal of a caller shared memory is not served to, if this registry is its.
    pub fn check_caller(&self) -> Result<()> {
        match self.refusal {
            Some(refusal) => Err(Error::restricted(refusal)),
            None => Ok(()),
        }
    }

    /// Whether a registration may go on: the caller's refusal, then Triton's answer when client
    /// shared memory is off.
    pub fn check_open(&self) -> Result<()> {
        self.check_caller()?;
        if !self.allowed {
            return Err(Error::unsupported(DISABLED));
        }
        Ok(())
    }

    /// Refuses `object` to clients from now on, whatever key names it.
    pub fn reserve(&self, object: ObjectId) {
        self.reserved.write().push(object);
    }

    /// A client's region that is one of the reserved objects (another name for the same object)
    /// is refused as a reserved key is.
    fn check_not_reserved(&self, region: &SystemRegion, name: &str, key: &str) -> Result<()> {
        let reserved = self.reserved.read();
        if reserved.is_empty() {
            return Ok(());
        }
        let id = region.object_id()?;
        if reserved.contains(&id) {
            return Err(Error::invalid_arg(format!(
                "cannot register shared memory region '{name}' with key '{key}' as the key names an object reserved by the server"
            )));
        }
        Ok(())
    }

    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// What the CUDA probe found at start.
    pub fn cuda(&self) -> &Cuda {
        &self.cuda
    }

    /// Refuses a name already taken (by either kind) or a registration beyond the limits.
    fn check_room(&self, regions: &Regions, name: &str, byte_size: u64) -> Result<()> {
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
        let mapped: u64 = regions.values().map(|r| r.region.byte_size()).sum();
        if mapped.saturating_add(byte_size) > self.limits.max_total_bytes {
            return Err(Error::invalid_arg(format!(
                "cannot register shared memory region '{name}': registered regions would exceed the limit of {} bytes",
                self.limits.max_total_bytes
            )));
        }
        Ok(())
    }

    /// Checks room, opens the region outside the lock (opening may be slow and other requests
    /// must go on), then inserts it unless another registration took the name meanwhile.
    fn insert(
        &self,
        name: &str,
        byte_size: u64,
        open: impl FnOnce() -> Result<Region>,
    ) -> Result<Arc<Region>> {
        self.check_room(&self.table.lock(), name, byte_size)?;
        let region = Arc::new(open()?);
        let mut regions = self.table.lock();
        self.check_room(&regions, name, byte_size)?;
        let registered = Registered {
            region: region.clone(),
            awaiting_unregister: false,
        };
        regions.insert(name.to_string(), registered);
        Ok(region)
    }

    /// Takes back a registration that could not be completed, unless the name was unregistered
    /// and registered again meanwhile.
    pub fn withdraw(&self, name: &str, region: &Arc<Region>) {
        let mut regions = self.table.lock();
        if regions
            .get(name)
            .is_some_and(|r| Arc::ptr_eq(&r.region, region))
            && let Some(entry) = regions.remove(name)
        {
            self.table.forget(&entry);
        }
    }

    pub fn register_system(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        self.check_open()?;
        if name.is_empty() {
            return Err(Error::invalid_arg(
                "'region name' is necessary to register system shared memory region",
            ));
        }
        self.insert(name, byte_size, || {
            let region = SystemRegion::open(name, key, offset, byte_size)?;
            self.check_not_reserved(&region, name, key)?;
            Ok(Region::System(region))
        })?;
        tracing::info!(
            region = name,
            key,
            offset,
            byte_size,
            "system shared memory registered"
        );
        Ok(())
    }

    /// Registers a client's CUDA buffer from its 64-byte IPC handle: opened here where the
    /// driver is usable; otherwise, when `forward` (a model server that can open it is behind
    /// this sidecar), kept for that server without being opened.
    pub fn register_cuda(
        &self,
        name: &str,
        raw_handle: &[u8],
        device_id: u64,
        byte_size: u64,
        forward: bool,
    ) -> Result<Arc<Region>> {
        self.check_caller()?;
        let driver = match &self.cuda {
            Cuda::Usable(driver) => Some(driver),
            Cuda::Unavailable(_) if forward => None,
            Cuda::Unavailable(_) => return Err(gpus_not_supported(name)),
        };
        if !self.allowed {
            return Err(Error::unsupported(DISABLED));
        }
        if name.is_empty() {
            return Err(Error::invalid_arg(
                "'region name' is necessary to register cuda shared memory region",
            ));
        }
        // REST checked the length already, with its own text. Triton's gRPC handler does not: it
        // hands the driver 64 bytes from whatever it was sent, and the failed open answers (seen
        // against Triton 2.51 on a GPU). The same answer here, without reading past the handle.
        if raw_handle.len() != HANDLE_BYTES {
            return Err(Error::invalid_arg(
                "failed to register shared memory region: invalid args",
            ));
        }
        let Some(driver) = driver else {
            let region = ForwardedCudaRegion::new(name, raw_handle, device_id, byte_size)?;
            return self.insert(name, byte_size, || Ok(Region::CudaForwarded(region)));
        };
        let device = usize::try_from(device_id).unwrap_or(usize::MAX);
        let region = self.insert(name, byte_size, || {
            driver
                .open(name, raw_handle, device, byte_size)
                .map(Region::Cuda)
                .map_err(Error::from)
        })?;
        tracing::info!(
            region = name,
            device_id,
            byte_size,
            "CUDA shared memory registered"
        );
        Ok(region)
    }

    /// Unregisters `name`, or every system region when `None`. Unknown names, and names of
    /// CUDA regions, are no-ops. A region requests are using goes when the last of them ends.
    pub fn unregister_system(&self, name: Option<&str>) -> Result<()> {
        self.unregister(Kind::System, name)
    }

    /// Unregisters `name`, or every CUDA region when `None`.
    pub fn unregister_cuda(&self, name: Option<&str>) -> Result<()> {
        self.unregister(Kind::Cuda, name)
    }

    fn unregister(&self, kind: Kind, name: Option<&str>) -> Result<()> {
        self.check_open()?;
        let mut regions = self.table.lock();
        self.table.unregister(&mut regions, |n, r| {
            r.region.kind() == kind && name.is_none_or(|wanted| wanted == n)
        });
        Ok(())
    }

    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<SystemStatus>> {
        let status = |r: &Region| match r {
            Region::System(r) => Some(SystemStatus {
                name: r.name.clone(),
                key: r.key.clone(),
                offset: r.offset,
                byte_size: r.byte_size,
            }),
            Region::Cuda(_) | Region::CudaForwarded(_) => None,
        };
        self.status(name, status, |n| {
            format!("Unable to find system shared memory region: '{n}'")
        }, |n| {
            format!("The region named '{n}' is registered as CUDA shared memory, not system shared memory")
        })
    }

    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaStatus>> {
        let status = |r: &Region| match r {
            Region::Cuda(r) => Some(CudaStatus {
                name: r.name.clone(),
                device_id: r.device as u64,
                byte_size: r.byte_size,
            }),
            Region::CudaForwarded(r) => Some(CudaStatus {
                name: r.name.clone(),
                device_id: r.device_id,
                byte_size: r.byte_size,
            }),
            Region::System(_) => None,
        };
        self.status(name, status, |n| {
            format!("Unable to find cuda shared memory region: '{n}'")
        }, |n| {
            format!("The region named '{n}' is registered as system shared memory, not CUDA shared memory")
        })
    }

    /// Status of every region of one kind, or of the one named (with Triton's two not-found texts).
    fn status<S>(
        &self,
        name: Option<&str>,
        of_kind: impl Fn(&Region) -> Option<S>,
        missing: impl Fn(&str) -> String,
        other_kind: impl Fn(&str) -> String,
    ) -> Result<Vec<S>> {
        self.check_caller()?;
        let regions = self.table.lock();
        match name {
            None => Ok(regions
                .values()
                .filter_map(|r| of_kind(&r.region))
                .collect()),
            Some(n) => match regions.get(n) {
                None => Err(Error::not_found(missing(n))),
                Some(r) => of_kind(&r.region)
                    .map(|s| vec![s])
                    .ok_or_else(|| Error::not_found(other_kind(n))),
            },
        }
    }

    /// The region an inference request names, with its offset and size checked. Requests hold
    /// it through [`Registry::target`]; a bare hold ending after the region was unregistered
    /// lets it go only at the next look at the table.
    pub fn resolve(&self, name: &str, offset: u64, byte_size: u64) -> Result<Arc<Region>> {
        self.check_caller()?;
        let region = self.table.lock().get(name).map(|r| r.region.clone());
        let region = region.ok_or_else(|| {
            Error::not_found(format!("Unable to find shared memory region: '{name}'"))
        })?;
        let size = region.byte_size();
        if offset >= size {
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
        if end > size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{name}'"
            )));
        }
        Ok(region)
    }

    /// The window of a region that an input or output names, checked as in `resolve`.
    pub fn target(&self, name: &str, offset: u64, byte_size: u64) -> Result<ShmTarget> {
        Ok(ShmTarget {
            region: self.resolve(name, offset, byte_size)?,
            offset,
            byte_size,
            table: self.table.clone(),
        })
    }
}

/// Triton's answer to a CUDA registration where no GPU can be used.
pub fn gpus_not_supported(name: &str) -> Error {
    Error::invalid_arg(format!(
        "failed to register CUDA shared memory region: '{name}', GPUs not supported"
    ))
}

/// A window of a registered region that a request reads an input from or writes an output to.
/// While it lives, the region is in use: unregistering it waits until it is dropped.
#[derive(Clone)]
pub struct ShmTarget {
    pub region: Arc<Region>,
    pub offset: u64,
    pub byte_size: u64,
    table: Arc<Table>,
}

impl std::fmt::Debug for ShmTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTarget")
            .field("region", &self.region)
            .field("offset", &self.offset)
            .field("byte_size", &self.byte_size)
            .finish()
    }
}

impl Drop for ShmTarget {
    fn drop(&mut self) {
        self.table.release(&self.region);
    }
}

impl ShmTarget {
    /// Copies the window's bytes out of the region (an input the client placed there).
    pub fn read(&self) -> Result<Bytes> {
        self.region.read(self.offset, self.byte_size)
    }

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

    fn no_gpu() -> Cuda {
        Cuda::unavailable("no GPU in unit tests")
    }

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
        let path = format!("/ig_registry_{tag}_{}_{n}", std::process::id());
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
            (0..OBJECT_SIZE / 4096 + 2).prop_map(|pages| pages * 4096),
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
            let registry = Registry::new(true, ShmLimits { max_regions: 3, max_total_bytes: 3 * OBJECT_SIZE }, no_gpu());
            let mut model: HashMap<u8, (u64, u64)> = HashMap::new();
            for op in ops {
                match op {
                    Op::Register { name, offset, size } => {
                        let fits = size > 0
                            && offset.is_multiple_of(4096)
                            && offset.checked_add(size).is_some_and(|e| e <= OBJECT_SIZE);
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
        let registry = Registry::new(false, ShmLimits::default(), no_gpu());
        let err = registry.register_system("a", "/x", 0, 1).unwrap_err();
        assert_eq!(err.message, DISABLED);
        assert!(registry.system_status(None).unwrap().is_empty());
    }

    #[test]
    fn a_reserved_object_is_refused_by_any_name_and_the_reserved_prefix_by_key() {
        let obj = object("reserved");
        let alias = format!("{}_alias", obj.0);
        std::fs::hard_link(format!("/dev/shm{}", obj.0), format!("/dev/shm{alias}")).unwrap();
        let alias = Object(alias);
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        let id = SystemRegion::open("probe", &obj.0, 0, 4096)
            .unwrap()
            .object_id()
            .unwrap();
        registry.reserve(id);
        for key in [&obj.0, &alias.0] {
            let refused = registry.register_system("mine", key, 0, 4096).unwrap_err();
            assert_eq!(
                refused.message,
                format!(
                    "cannot register shared memory region 'mine' with key '{key}' as the key names an object reserved by the server"
                )
            );
        }
        assert!(registry.system_status(None).unwrap().is_empty());
        let refused = registry
            .register_system("mine", "/infergate_staging_1_00", 0, 4096)
            .unwrap_err();
        assert_eq!(
            refused.message,
            "cannot register shared memory region 'mine' with key '/infergate_staging_1_00' as the key contains the reserved prefix 'infergate_'"
        );
        // Another object is registered as before.
        let other = object("free");
        registry.register_system("mine", &other.0, 0, 4096).unwrap();
    }

    /// Errors raised in the shared-memory crate reach the client with Triton's code and words.
    #[test]
    fn mapping_errors_keep_their_code_and_message() {
        use crate::error::Code;
        let obj = object("codes");
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        let unaligned = registry.register_system("r", &obj.0, 1, 8).unwrap_err();
        assert_eq!(unaligned.code, Code::InvalidArg);
        assert_eq!(unaligned.http_status(), http::StatusCode::BAD_REQUEST);
        assert_eq!(unaligned.grpc_code(), tonic::Code::InvalidArgument);
        assert_eq!(
            unaligned.message,
            "failed to register shared memory region 'r': unable to process address spaceInvalid argument"
        );
        assert!(!unaligned.from_model);
        let missing = registry
            .register_system("r", "/ig_registry_missing_object", 0, 8)
            .unwrap_err();
        assert_eq!(missing.code, Code::Internal);
        assert_eq!(
            missing.http_status(),
            http::StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(missing.grpc_code(), tonic::Code::Internal);
        assert_eq!(
            missing.message,
            "Unable to open shared memory region: '/ig_registry_missing_object'"
        );
        registry.register_system("r", &obj.0, 0, 64).unwrap();
        let region = registry.resolve("r", 0, 64).unwrap();
        let read = region.read(60, 8).unwrap_err();
        assert_eq!(read.code, Code::InvalidArg);
        assert_eq!(
            read.message,
            "Invalid offset + byte size for shared memory region: 'r'"
        );
        let write = region.write(u64::MAX, &[0; 2]).unwrap_err();
        assert_eq!(write.code, Code::InvalidArg);
        assert_eq!(
            write.message,
            format!(
                "Integer overflow detected: byte_size (2) + offset ({}) exceeds maximum value ({}) for region 'r'",
                u64::MAX,
                u64::MAX
            )
        );
    }

    #[test]
    fn unregistering_a_region_in_use_waits_for_its_last_request() {
        let obj = object("inflight");
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        registry.register_system("a", &obj.0, 0, 64).unwrap();
        registry.register_system("idle", &obj.0, 0, 64).unwrap();
        let first = registry.target("a", 0, 64).unwrap();
        let input = first.clone();
        // Triton: the unregistration succeeds, the region stays registered (listed, its name
        // taken, usable by new requests); an idle region goes at once, by name or all at once.
        registry.unregister_system(None).unwrap();
        let names = |r: &Registry| -> Vec<String> {
            r.system_status(None)
                .unwrap()
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(names(&registry), ["a"]);
        registry.unregister_system(Some("a")).unwrap();
        let again = registry.register_system("a", &obj.0, 0, 64).unwrap_err();
        assert_eq!(again.message, "shared memory region 'a' already in manager");
        let second = registry.target("a", 0, 64).unwrap();
        first.write("OUTPUT0", &[1, 2, 3]).unwrap();
        assert_eq!(&second.read().unwrap()[..3], &[1, 2, 3]);
        // The first request ends (both its windows): the second still uses the region.
        drop(first);
        drop(input);
        assert_eq!(names(&registry), ["a"]);
        assert_eq!(&second.read().unwrap()[..3], &[1, 2, 3]);
        // The last one ends: the region is gone without another call, and its name is free.
        drop(second);
        assert_eq!(registry.table.regions.lock().len(), 0);
        assert_eq!(registry.table.awaiting.load(Ordering::Relaxed), 0);
        assert!(names(&registry).is_empty());
        registry.register_system("a", &obj.0, 0, 64).unwrap();
        // A region nothing uses is unregistered at once.
        registry.unregister_system(Some("a")).unwrap();
        assert!(names(&registry).is_empty());
    }

    #[test]
    fn a_region_whose_last_user_raced_the_mark_goes_at_the_next_look() {
        let obj = object("raced");
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        registry.register_system("a", &obj.0, 0, 64).unwrap();
        // A hold that ends without telling the table (as a request whose end raced the
        // unregistration): the next call that looks at the table lets the region go.
        let held = registry.resolve("a", 0, 64).unwrap();
        registry.unregister_system(Some("a")).unwrap();
        drop(held);
        assert_eq!(registry.table.regions.lock().len(), 1);
        assert!(registry.system_status(None).unwrap().is_empty());
        assert_eq!(registry.table.awaiting.load(Ordering::Relaxed), 0);
        assert!(registry.resolve("a", 0, 1).is_err());
    }

    #[test]
    fn withdrawing_a_waiting_registration_forgets_the_wait() {
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        let region = registry.register_cuda("c", &[7; 64], 0, 64, true).unwrap();
        registry.unregister_cuda(Some("c")).unwrap();
        assert_eq!(registry.table.awaiting.load(Ordering::Relaxed), 1);
        registry.withdraw("c", &region);
        assert_eq!(registry.table.awaiting.load(Ordering::Relaxed), 0);
        assert!(registry.cuda_status(None).unwrap().is_empty());
    }

    #[test]
    fn cuda_without_a_gpu_is_refused_and_kinds_stay_apart() {
        let obj = object("kinds");
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        let err = registry
            .register_cuda("c", &[0; 64], 0, 64, false)
            .unwrap_err();
        assert_eq!(
            err.message,
            "failed to register CUDA shared memory region: 'c', GPUs not supported"
        );
        registry.register_system("s", &obj.0, 0, 64).unwrap();
        let err = registry.cuda_status(Some("s")).unwrap_err();
        assert_eq!(
            err.message,
            "The region named 's' is registered as system shared memory, not CUDA shared memory"
        );
        assert!(registry.cuda_status(None).unwrap().is_empty());
        // Unregistering CUDA regions never touches system ones, by name or all at once.
        registry.unregister_cuda(Some("s")).unwrap();
        registry.unregister_cuda(None).unwrap();
        assert_eq!(registry.system_status(None).unwrap().len(), 1);
        let err = registry
            .register_cuda("s", &[0; 64], 0, 64, false)
            .unwrap_err();
        assert!(err.message.contains("GPUs not supported"));
    }

    #[test]
    fn a_forwarded_cuda_region_is_registered_never_read_here_and_withdrawn_exactly() {
        let registry = Registry::new(true, ShmLimits::default(), no_gpu());
        let handle: Vec<u8> = (0..64).collect();
        let err = registry
            .register_cuda("c", &handle[..63], 1, 64, true)
            .unwrap_err();
        assert_eq!(
            err.message,
            "failed to register shared memory region: invalid args"
        );
        let region = registry.register_cuda("c", &handle, 1, 64, true).unwrap();
        assert!(region.is_forwarded());
        let (raw, device) = region.cuda_handle().unwrap();
        assert_eq!((&raw[..], device), (&handle[..], 1));
        assert_eq!(
            registry.cuda_status(None).unwrap(),
            vec![CudaStatus {
                name: "c".into(),
                device_id: 1,
                byte_size: 64
            }]
        );
        // Offsets are checked as for any region; the bytes are the model server's alone.
        assert!(registry.resolve("c", 64, 1).is_err());
        let target = registry.target("c", 0, 64).unwrap();
        assert!(
            target
                .read()
                .unwrap_err()
                .message
                .contains("only be used by the model server")
        );
        assert!(target.write("OUTPUT0", &[0; 4]).is_err());
        let empty = registry.target("c", 8, 0).unwrap();
        assert!(empty.read().unwrap().is_empty());
        empty.write("OUTPUT0", &[]).unwrap();
        let again = registry
            .register_cuda("c", &handle, 1, 64, true)
            .unwrap_err();
        assert!(
            again.message.contains("already in manager"),
            "{}",
            again.message
        );
        // Withdrawing takes back only the registration it names (not a later one of the name).
        drop((region, target, empty));
        registry.unregister_cuda(Some("c")).unwrap();
        let region = Arc::new(Region::CudaForwarded(
            ForwardedCudaRegion::new("c", &handle, 1, 64).unwrap(),
        ));
        let second = registry.register_cuda("c", &handle, 1, 64, true).unwrap();
        registry.withdraw("c", &region);
        assert_eq!(registry.cuda_status(None).unwrap().len(), 1);
        registry.withdraw("c", &second);
        assert!(registry.cuda_status(None).unwrap().is_empty());
        // Client shared memory off: refused before anything else.
        let off = Registry::new(false, ShmLimits::default(), no_gpu());
        assert_eq!(
            off.register_cuda("c", &handle, 0, 64, true)
                .unwrap_err()
                .message,
            DISABLED
        );
    }
}
