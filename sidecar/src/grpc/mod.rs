//! The gRPC front end (tonic): `inference.GRPCInferenceService` and `grpc.health.v1.Health`.

pub(crate) mod convert;
mod deadline;
pub(crate) use deadline::parse_timeout;
mod dispatch;
mod idle_resets;
mod oversized;
mod restricted;
mod serve;
mod service;
mod stream;

pub use deadline::DeadlineLayer;
pub use dispatch::Services;
pub use idle_resets::IgnoreIdleResets;
pub use oversized::as_resource_exhausted;
pub use restricted::Restricted;
pub use serve::serve;

pub use service::{health_service, inference_service};
