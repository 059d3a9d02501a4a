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
    /// The bytes; empty while `shm` still holds them.
    pub data: Bytes,
    /// The client's shared-memory region that holds this input, not read yet: the pipeline reads
    /// it unless the backend can hand the region to its model server instead.
    pub shm: Option<crate::shm::registry::ShmTarget>,
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
    /// A REST body that was the one input's bytes, with no JSON: Triton names that input
    /// `raw_input` in its size and datatype errors.
    pub raw_input: bool,
    /// Where the request's spans go, when it is traced.
    pub trace: Option<crate::trace::Scope>,
    /// Every parameter is the model's own: none is read as a sequence or scheduling control.
    /// Triton's generate endpoint sets a request's parameters this way (`sequence_id` or
    /// `priority` there is a parameter like any other), where infer requests carry their
    /// sequence, priority and timeout in them.
    pub plain_parameters: bool,
    /// The caller's `Authorization`, kept only where the sidecar checks identities: a request
    /// forwarded to a peer (a sequence's holder, a canary) carries it, and the peer checks it
    /// again.
    pub credential: Option<String>,
}

impl InferRequest {
    /// The parameters that say which sequence the request belongs to, if they may.
    pub fn sequence_parameters(&self) -> Option<&Parameters> {
        (!self.plain_parameters).then_some(&self.parameters)
    }

    /// The parameters that give the request's priority and queue timeout, if they may.
    pub fn schedule_parameters(&self) -> Option<&Parameters> {
        self.sequence_parameters()
    }
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
    /// An input whose bytes came with the request.
    pub fn inline(name: String, datatype: String, shape: Vec<i64>, data: Bytes) -> Self {
        InputTensor {
            name,
            datatype,
            shape,
            data,
            shm: None,
        }
    }

    /// An input the client left in one of its shared-memory regions (already resolved, so the
    /// window lies inside the region).
    pub fn in_region(
        name: String,
        datatype: String,
        shape: Vec<i64>,
        region: crate::shm::registry::ShmTarget,
    ) -> Self {
        InputTensor {
            name,
            datatype,
            shape,
            data: Bytes::new(),
            shm: Some(region),
        }
    }

    pub fn parsed_datatype(&self) -> Option<DataType> {
        DataType::from_protocol(&self.datatype)
    }

    /// The input's size in bytes, read or not.
    pub fn byte_len(&self) -> u64 {
        match &self.shm {
            Some(region) => region.byte_size,
            None => self.data.len() as u64,
        }
    }

    /// Copies the bytes out of the client's region, if they are still there.
    pub fn read_region(&mut self) -> crate::error::Result<()> {
        if let Some(region) = self.shm.take() {
            self.data = region.read()?;
        }
        Ok(())
    }
}
