//! In-process reference models with the names, tensors and semantics of Triton's example
//! catalog, so the sidecar runs standalone and Triton's own client examples work unmodified.

mod catalog;
mod compute;

pub use catalog::Catalog;
