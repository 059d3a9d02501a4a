//! Tensors as the server carries them: a datatype, a shape and the raw little-endian bytes
//! (BYTES elements serialized with 4-byte length prefixes), held as a reference-counted slice so
//! request bodies and gRPC raw contents are never re-buffered.

pub mod bytes_elements;
pub mod shape;

use bytes::Bytes;
use infergate_proto::DataType;

/// A named tensor with its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

impl Tensor {
    pub fn new(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: Bytes) -> Self {
        Tensor {
            name: name.into(),
            datatype,
            shape,
            data,
        }
    }
}

/// Reads fixed-size little-endian elements out of a byte slice.
pub fn le_elements<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    data.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}
