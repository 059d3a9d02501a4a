//! Client shared memory: regions other processes (in Kubernetes, other containers of the pod)
//! register by name, then name in inference requests instead of sending tensor bytes.
//!
//! A region is memory another process can write, shrink or unlink at any time. All access goes
//! through [`region::SystemRegion`] (POSIX shm, mapped under [`guard`], so a shrunk object is an
//! error rather than a SIGBUS) or [`cuda::CudaRegion`] (CUDA IPC): opened once at registration,
//! every access bounds-checked with checked arithmetic, bytes copied at the trust boundary. This
//! module holds the only `unsafe` code of the crate.

pub mod cuda;
pub mod forwarded;
pub mod guard;
pub mod pinned;
pub mod region;
pub mod registry;
pub mod staging;

pub use registry::{Registry, ShmLimits};
