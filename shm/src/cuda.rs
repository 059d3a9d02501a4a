//! CUDA shared memory: device buffers another process exported with `cudaIpcGetMemHandle`.
//!
//! The CUDA driver (`libcuda.so`) is loaded at run time, so the sidecar builds and runs on
//! machines without CUDA; [`probe`] finds out once, at start, whether it can be used and why
//! not. Everything that calls into the driver is in this file, each `unsafe` block with its
//! reason. A region copies bytes between the device and host buffers (backends here take host
//! memory); every access is bounds-checked against the registered size first.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int};
use std::sync::Arc;

use bytes::Bytes;
use cudarc::driver::sys;
use parking_lot::Mutex;

use super::pinned::{HostMemory, PinnedPool};
use crate::error::{Error, Result};

/// Size of a `cudaIpcMemHandle_t`.
pub const HANDLE_BYTES: usize = 64;

/// Every driver entry point this module uses. They are looked up at probe time so a driver that
/// lacks one makes CUDA shared memory unavailable instead of failing a request later.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuMemGetAddressRange_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuStreamSynchronize",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuGetErrorString",
];

/// A CUDA device's primary context.
#[derive(Clone, Copy)]
struct Context(sys::CUcontext);

// SAFETY: a CUDA context is a driver handle, valid on any thread once made current there
// (every use below calls `cuCtxSetCurrent` first); the driver serialises access internally.
unsafe impl Send for Context {}
// SAFETY: see `Send`; the handle itself is never dereferenced by us.
unsafe impl Sync for Context {}

/// One GPU as the driver reports it.
#[derive(Clone, Debug)]
pub struct Device {
    pub id: usize,
    pub name: String,
}

/// A usable CUDA driver with at least one device.
pub struct Driver {
    pub version: i32,
    pub devices: Vec<Device>,
    /// Primary contexts, retained on first use of a device (retaining costs GPU memory).
    contexts: Mutex<Vec<Option<Context>>>,
    /// Page-locked buffers that reads from regions land in, shared by every device.
    pinned: Arc<PinnedPool<LockedMemory>>,
}

/// `cuMemHostAlloc`'s page-locked memory, portable: usable by every context, so one pool serves
/// regions on any device. Allocating needs a current context, which `CudaRegion::read` has made
/// current before it asks the pool; freeing finds the allocation by its address, on any thread.
/// The memory lives as long as the context it was allocated in: primary contexts are retained
/// for the life of the process and never released (`Driver::enter`), which keeps every buffer,
/// lent or free, valid until it is freed.
pub struct LockedMemory;

// SAFETY: `cuMemHostAlloc` returns `bytes` bytes of host memory of our own, valid until
// `cuMemFreeHost` (the contexts are never released, see above), and `free` may run on any thread.
unsafe impl HostMemory for LockedMemory {
    fn allocate(&self, bytes: usize) -> std::result::Result<std::ptr::NonNull<u8>, String> {
        let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the driver writes one host address into `ptr`, of `bytes` page-locked bytes,
        // or fails and writes nothing we use.
        check(unsafe { sys::cuMemHostAlloc(&mut ptr, bytes, sys::CU_MEMHOSTALLOC_PORTABLE) })?;
        std::ptr::NonNull::new(ptr.cast()).ok_or_else(|| "cuMemHostAlloc returned null".into())
    }

    unsafe fn free(&self, ptr: std::ptr::NonNull<u8>, _bytes: usize) {
        // SAFETY: the caller guarantees `ptr` came from `allocate` and is no longer used.
        if let Err(e) = check(unsafe { sys::cuMemFreeHost(ptr.as_ptr().cast()) }) {
            tracing::warn!(error = %e, "cuMemFreeHost failed");
        }
    }
}

/// What the probe found: a driver to use, or the reason CUDA shared memory is off.
#[derive(Clone)]
pub enum Cuda {
    Usable(Arc<Driver>),
    Unavailable(String),
}

impl Cuda {
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Cuda::Unavailable(reason.into())
    }

    pub fn driver(&self) -> Option<&Arc<Driver>> {
        match self {
            Cuda::Usable(d) => Some(d),
            Cuda::Unavailable(_) => None,
        }
    }
}

/// Loads the driver and counts devices. Never panics: the loader's own lookup panics when the
/// library is absent, so presence and every symbol are checked before the first call.
///
/// `pinned_bytes` bounds the page-locked host memory kept for copies out of regions
/// (`limits.max_cuda_pinned_bytes`, 64 MiB by default: room for eight 4 MiB inputs in flight
/// twice over, in buffers of up to a quarter of it). Locked memory counts against the
/// container's memory like any other; beyond it, and for larger tensors, copies go through
/// pageable memory, only slower.
pub fn probe(pinned_bytes: usize) -> Cuda {
    // SAFETY: `is_culib_present` only tries to dlopen the library and closes it again.
    if !unsafe { sys::is_culib_present() } {
        return Cuda::unavailable("the CUDA driver library (libcuda.so) was not found");
    }
    for symbol in SYMBOLS {
        // SAFETY: `culib` is present (checked above), so it loads without panicking; looking a
        // symbol up does not call it.
        let found = unsafe { sys::culib().get::<*const ()>(symbol.as_bytes()).is_ok() };
        if !found {
            return Cuda::unavailable(format!("the CUDA driver has no '{symbol}'"));
        }
    }
    // SAFETY: the symbol exists; cuInit takes flags 0 and may be called more than once.
    if let Err(e) = check(unsafe { sys::cuInit(0) }) {
        return Cuda::unavailable(format!("the CUDA driver did not initialise: {e}"));
    }
    let mut version: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    if let Err(e) = check(unsafe { sys::cuDriverGetVersion(&mut version) }) {
        return Cuda::unavailable(format!("the CUDA driver version is unknown: {e}"));
    }
    let mut count: c_int = 0;
    // SAFETY: writes one int through a valid pointer; the driver is initialised.
    if let Err(e) = check(unsafe { sys::cuDeviceGetCount(&mut count) }) {
        return Cuda::unavailable(format!("no CUDA device could be counted: {e}"));
    }
    if count <= 0 {
        return Cuda::unavailable("the CUDA driver reports no device");
    }
    let devices: Vec<Device> = (0..count)
        .map(|ordinal| Device {
            id: ordinal as usize,
            name: device_name(ordinal).unwrap_or_else(|e| format!("unknown ({e})")),
        })
        .collect();
    let contexts = Mutex::new(vec![None; devices.len()]);
    Cuda::Usable(Arc::new(Driver {
        version,
        devices,
        contexts,
        pinned: PinnedPool::new(LockedMemory, pinned_bytes),
    }))
}

fn device_name(ordinal: c_int) -> std::result::Result<String, String> {
    let mut device: sys::CUdevice = 0;
    // SAFETY: writes one device handle; `ordinal` is below the device count.
    check(unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
    let mut buf = [0 as c_char; 128];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated, into our buffer.
    check(unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device) })?;
    // SAFETY: the buffer is NUL-terminated (zero-initialised and written by the driver with a NUL).
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Ok(name.to_string_lossy().into_owned())
}

/// Turns a driver status into a readable error.
fn check(status: sys::CUresult) -> std::result::Result<(), String> {
    if status == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: the driver stores a pointer to a static string (or leaves it null).
    let described = unsafe { sys::cuGetErrorString(status, &mut text) };
    if described == sys::CUresult::CUDA_SUCCESS && !text.is_null() {
        // SAFETY: a non-null result points at a static NUL-terminated string owned by the driver.
        let text = unsafe { CStr::from_ptr(text) };
        Err(format!("{status:?}: {}", text.to_string_lossy()))
    } else {
        Err(format!("{status:?}"))
    }
}

impl Driver {
    /// Makes `device`'s primary context current on this thread, retaining it on first use.
    fn enter(&self, device: usize) -> std::result::Result<Context, String> {
        let ctx = {
            let mut contexts = self.contexts.lock();
            let slot = contexts
                .get_mut(device)
                .ok_or_else(|| format!("no CUDA device {device}"))?;
            match slot {
                Some(ctx) => *ctx,
                None => {
                    let mut handle: sys::CUdevice = 0;
                    // SAFETY: writes one device handle; `device` is below the device count.
                    check(unsafe { sys::cuDeviceGet(&mut handle, device as c_int) })?;
                    let mut raw: sys::CUcontext = std::ptr::null_mut();
                    // SAFETY: writes one context handle for a valid device. Retained for the
                    // life of the process: primary contexts are shared and cheap to keep.
                    check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, handle) })?;
                    *slot = Some(Context(raw));
                    Context(raw)
                }
            }
        };
        // SAFETY: `ctx` is a retained, live primary context.
        check(unsafe { sys::cuCtxSetCurrent(ctx.0) })?;
        Ok(ctx)
    }

    /// Opens a client's IPC handle on `device` and checks the allocation holds `byte_size` bytes.
    /// Errors carry the driver's reason for the log; the client gets Triton's short texts.
    pub fn open(
        self: &Arc<Self>,
        name: &str,
        handle: &[u8],
        device: usize,
        byte_size: u64,
    ) -> Result<CudaRegion> {
        let invalid =
            || Error::invalid_arg("failed to register shared memory region: invalid args");
        // A handle of another length cannot be opened: Triton's answer to a failed open.
        let raw: [u8; HANDLE_BYTES] = handle.try_into().map_err(|_| invalid())?;
        if device >= self.devices.len() {
            tracing::warn!(region = name, device, "CUDA device does not exist");
            return Err(invalid());
        }
        let ctx = self.enter(device).map_err(|e| {
            tracing::warn!(region = name, device, error = %e, "CUDA context unavailable");
            invalid()
        })?;
        let mut ipc = sys::CUipcMemHandle {
            reserved: [0; HANDLE_BYTES],
        };
        for (dst, src) in ipc.reserved.iter_mut().zip(raw) {
            *dst = src as c_char;
        }
        let mut ptr: sys::CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags_enum::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: `ipc` is a 64-byte handle by value; the driver validates it and writes the
        // mapped device address into `ptr`. A bogus handle yields an error, not a mapping.
        check(unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, ipc, flags) }).map_err(|e| {
            tracing::warn!(region = name, device, error = %e, "cuIpcOpenMemHandle failed");
            invalid()
        })?;
        let region = CudaRegion {
            name: name.to_string(),
            device,
            byte_size,
            raw_handle: raw,
            ptr,
            ctx,
            pinned: self.pinned.clone(),
        };
        // Keep `region` alive from here: dropping it closes the handle on every error below.
        let mut base: sys::CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: `ptr` is a live device address in the current context; the driver writes the
        // allocation's base and size.
        check(unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }).map_err(|e| {
            tracing::warn!(region = name, error = %e, "cuMemGetAddressRange failed");
            invalid()
        })?;
        let available = (base as u128 + size as u128).saturating_sub(ptr as u128);
        if u128::from(byte_size) > available {
            tracing::warn!(region = name, byte_size, available = %available, "CUDA allocation is smaller than the registered size");
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': invalid args"
            )));
        }
        Ok(region)
    }
}

/// A client's device buffer, opened through its IPC handle.
pub struct CudaRegion {
    pub name: String,
    pub device: usize,
    pub byte_size: u64,
    /// The client's handle, kept to hand the same buffer to a model server that can open it.
    pub raw_handle: [u8; HANDLE_BYTES],
    ptr: sys::CUdeviceptr,
    ctx: Context,
    pinned: Arc<PinnedPool<LockedMemory>>,
}

impl std::fmt::Debug for CudaRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaRegion")
            .field("name", &self.name)
            .field("device", &self.device)
            .field("byte_size", &self.byte_size)
            .finish()
    }
}

impl CudaRegion {
    /// `ptr + offset` for `len` bytes, checked to lie inside the registered size.
    fn window(&self, offset: u64, len: u64) -> Result<(sys::CUdeviceptr, usize)> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::invalid_arg("shared memory window overflows"))?;
        if end > self.byte_size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                self.name
            )));
        }
        let len = usize::try_from(len).map_err(|_| Error::invalid_arg("byte size too large"))?;
        Ok((self.ptr + offset, len))
    }

    fn enter(&self) -> Result<()> {
        // SAFETY: the context was retained when the region was opened and is never released.
        check(unsafe { sys::cuCtxSetCurrent(self.ctx.0) })
            .map_err(|e| Error::internal(format!("CUDA context for region '{}': {e}", self.name)))
    }

    /// Copies `len` bytes at `offset` from the device into host memory: a page-locked buffer
    /// from the pool when one is free (the device copies into it directly, and writes of the
    /// same bytes back to a region go from it too), else a new pageable buffer.
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let (src, len) = self.window(offset, len)?;
        self.enter()?;
        let failed = |e: String| {
            Error::internal(format!(
                "failed to read CUDA shared memory region '{}': {e}",
                self.name
            ))
        };
        if let Some(mut buffer) = self.pinned.take(len) {
            // SAFETY: `src..src+len` lies inside the opened allocation (see below); the
            // destination is a lent page-locked buffer with room for at least `len` bytes, ours
            // alone. A copy from the device returns once it has finished.
            check(unsafe { sys::cuMemcpyDtoH_v2(buffer.as_mut_ptr().cast(), src, len) })
                .map_err(failed)?;
            // SAFETY: the successful copy above wrote all `len` bytes of the buffer.
            return Ok(Bytes::from_owner(unsafe { buffer.filled() }));
        }
        // Not zero-filled first: the copy below writes every byte, and zeroing a large tensor
        // costs as much as the copy itself (see `ShmRegion::read`).
        let mut out = Vec::<u8>::with_capacity(len);
        // SAFETY: `src..src+len` lies inside the opened allocation (checked by `window` against
        // a size verified with cuMemGetAddressRange at registration); the destination is our
        // buffer with room for exactly `len` bytes. The copy is synchronous for pageable host
        // memory, so it has finished when the call returns.
        check(unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, len) })
            .map_err(failed)?;
        // SAFETY: the successful copy above initialised all `len` bytes of the capacity.
        unsafe { out.set_len(len) };
        Ok(Bytes::from(out))
    }

    /// Copies `data` to the device at `offset`, finished when this returns.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let (dst, len) = self.window(offset, data.len() as u64)?;
        self.enter()?;
        let failed = |e: String| {
            Error::internal(format!(
                "failed to write CUDA shared memory region '{}': {e}",
                self.name
            ))
        };
        // SAFETY: as in `read`, the destination range is inside the allocation; the source is
        // our own buffer of `len` bytes, alive until the stream is synchronised below.
        check(unsafe { sys::cuMemcpyHtoD_v2(dst, data.as_ptr().cast(), len) }).map_err(failed)?;
        // From pageable memory the copy returns once the bytes are staged, before the device
        // has them; the client reads the region from another process as soon as the answer
        // arrives, which nothing would order after the copy. From page-locked memory (a
        // pooled read's bytes) this waits for nothing. The copy went on the legacy default
        // stream (the null stream), so waiting for that stream is enough.
        // SAFETY: the null stream is always valid in the current context.
        check(unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }).map_err(failed)
    }
}

impl Drop for CudaRegion {
    fn drop(&mut self) {
        // SAFETY: the context is retained for the process's life; `ptr` came from
        // cuIpcOpenMemHandle and nothing uses it once the last owner drops the region.
        let closed = unsafe {
            check(sys::cuCtxSetCurrent(self.ctx.0))
                .and_then(|()| check(sys::cuIpcCloseMemHandle(self.ptr)))
        };
        if let Err(e) = closed {
            tracing::warn!(region = %self.name, error = %e, "cuIpcCloseMemHandle failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_explains_itself() {
        match probe(64 << 20) {
            Cuda::Usable(driver) => assert!(!driver.devices.is_empty()),
            Cuda::Unavailable(reason) => assert!(!reason.is_empty()),
        }
    }
}
