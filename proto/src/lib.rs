//! Contracts shared by every Infergate component: the Open Inference Protocol's gRPC messages
//! (field numbers identical to Triton's), tensor datatypes, the model-configuration JSON form, and
//! the sidecar configuration schema. No I/O lives here.

pub mod datatype;
pub mod model_config;
pub mod wire;

/// The `inference` package: `GRPCInferenceService` and the model-configuration messages.
pub mod inference {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("inference");
}

/// The standard `grpc.health.v1` service.
pub mod health {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("grpc.health.v1");
}

/// Encoded `FileDescriptorSet` of every compiled `.proto` file, for reflection (JSON and text
/// forms of `ModelConfig`).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));

pub use datatype::DataType;
