//! Infergate's sidecar: the Open Inference Protocol (KServe V2) with Triton's extensions over
//! REST and gRPC, in front of built-in models or a model server.

pub mod accept;
pub mod admin;
pub mod allocator;
pub mod backend;
pub mod cli;
pub mod core;
pub mod drain;
pub mod error;
pub mod grpc;
pub mod host_metrics;
pub mod http;
pub mod json;
pub mod log_update;
pub mod metrics;
pub mod server;
pub mod shm;
pub mod state;
pub mod telemetry;
pub mod tensor;
