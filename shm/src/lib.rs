//! Shared memory for Infergate's sidecar: the only crate of the workspace with `unsafe` code, kept
//! here so that every other crate can say `#![forbid(unsafe_code)]`.
//!
//! It needs `unsafe` for three things the standard library does not wrap:
//!
//! - [`region`]: a client's POSIX shared-memory object mapped into this process, which its owner
//!   may write, shrink or unlink at any time; every access is bounds-checked and copied, and runs
//!   under [`guard`], a SIGBUS handler that turns a fault on a shrunk object into an error
//!   instead of the end of the process.
//! - [`pinned`]: page-locked host memory, lent out again and again for copies to and from the
//!   device.
//! - [`cuda`]: the CUDA driver API, loaded at run time (so the sidecar builds and runs on
//!   machines without CUDA), and the client buffers it opens through their IPC handles.
//!
//! Each file that holds `unsafe` says `#![allow(unsafe_code)]` (the workspace denies it), and each
//! block carries its `SAFETY:` reason. Errors are this crate's own [`Error`]: a [`Kind`] and
//! Triton's message, which the sidecar turns into its protocol error with the same status code
//! and the same words. The region registry, which speaks the rest of Triton's shared-memory
//! protocol, and the staging pool stay in the sidecar (`infergate_sidecar::shm`).

pub mod cuda;
pub mod error;
pub mod guard;
pub mod pinned;
pub mod region;

pub use error::{Error, Kind, Result};
