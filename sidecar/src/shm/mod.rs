//! Client shared memory: regions other processes (in Kubernetes, other containers of the pod)
//! register by name, then name in inference requests instead of sending tensor bytes.
//!
//! A region is memory another process can write, shrink or unlink at any time. All access goes
//! through [`region::SystemRegion`] (POSIX shm, mapped under [`guard`], so a shrunk object is an
//! error rather than a SIGBUS) or [`cuda::CudaRegion`] (CUDA IPC): opened once at registration,
//! every access bounds-checked with checked arithmetic, bytes copied at the trust boundary. Those
//! modules, with the page-locked buffers of [`pinned`], are the `infergate-shm` crate, re-exported
//! here under their old paths: the workspace's only `unsafe` code, fenced off in a crate of its
//! own so that this one forbids it. Its errors become the protocol's (`From` in `crate::error`)
//! with the same code and message. The registry (Triton's register / status / unregister) and the
//! staging pool are here, in safe code.

pub use infergate_shm::{cuda, guard, pinned, region};

pub mod forwarded;
pub mod registry;
pub mod staging;

pub use registry::{Registry, ShmLimits};
