//! A client's CUDA buffer this sidecar cannot open — its container sees no usable GPU — but its
//! model server can: the registration keeps the IPC handle and hands it to the model server,
//! which reads inputs from and writes outputs to the buffer itself. The sidecar never touches
//! those bytes, so reading or writing the region here is an error that says why.

use super::cuda::HANDLE_BYTES;
use crate::error::{Error, Result};

#[derive(Debug)]
pub struct ForwardedCudaRegion {
    pub name: String,
    pub raw_handle: [u8; HANDLE_BYTES],
    pub device_id: u64,
    pub byte_size: u64,
}

impl ForwardedCudaRegion {
    /// Checks what can be checked without a GPU: the handle's length. REST checked it already;
    /// over gRPC, Triton's answer is its failed open's (see `Registry::register_cuda`).
    pub fn new(name: &str, raw_handle: &[u8], device_id: u64, byte_size: u64) -> Result<Self> {
        let raw_handle = raw_handle.try_into().map_err(|_| {
            Error::invalid_arg("failed to register shared memory region: invalid args")
        })?;
        Ok(ForwardedCudaRegion {
            name: name.to_string(),
            raw_handle,
            device_id,
            byte_size,
        })
    }

    /// Reached only when the model server could not take the buffer for a request (it lost the
    /// registration and refused it again): the sidecar has no GPU to copy it with.
    pub fn unusable(&self) -> Error {
        Error::internal(format!(
            "CUDA shared memory region '{}' can only be used by the model server, which could not open it for this request",
            self.name
        ))
    }
}
