//! An inference request and response, independent of the wire protocol.

use bytes::Bytes;
use infergate_proto::DataType;

use super::params::Parameters;
use crate::tensor::Tensor;

/// An input as the client sent it. The datatype is kept as text until validation, because an
/// unknown datatype is reported against the model's expectation.
#[derive(Clone, Debug)]
pub struct InputTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

/// An output the client asked for, with its per-output options.
#[derive(Clone, Debug, Default)]
pub struct RequestedOutput {
    pub name: String,
    /// Top-k classification; 0 means the raw tensor.
    pub classification: u32,
    /// REST only: return this output as a binary chunk instead of JSON.
    pub binary: bool,
    /// Write this output into the client's shared-memory region instead of the response.
    pub shm: Option<crate::shm::registry::ShmTarget>,
}

impl RequestedOutput {
    pub fn named(name: impl Into<String>) -> Self {
        RequestedOutput {
            name: name.into(),
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct InferRequest {
    pub model_name: String,
    /// Empty means the latest ready version.
    pub model_version: String,
    pub id: String,
    pub parameters: Parameters,
    pub inputs: Vec<InputTensor>,
    /// Empty means every output of the model, each with `default_binary`.
    pub outputs: Vec<RequestedOutput>,
    /// REST `binary_data_output`: the kind of outputs returned when none are listed.
    pub default_binary: bool,
}

/// A successful inference. `outputs` is aligned with `requested`.
#[derive(Clone, Debug)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub parameters: Parameters,
    pub outputs: Vec<Tensor>,
    pub requested: Vec<RequestedOutput>,
}

impl InputTensor {
    pub fn parsed_datatype(&self) -> Option<DataType> {
        DataType::from_protocol(&self.datatype)
    }
}
