//! The gRPC front end (tonic): `inference.GRPCInferenceService` and `grpc.health.v1.Health`.

pub(crate) mod convert;
mod idle_resets;
mod oversized;
mod service;
mod stream;

pub use idle_resets::IgnoreIdleResets;
pub use oversized::as_resource_exhausted;

pub use service::{health_service, inference_service};
