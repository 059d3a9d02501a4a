//! The upstream backend: a model server in the same pod (Triton, KServe's ModelServer,
//! MLServer, ...) spoken to over V2 gRPC or REST on loopback. The sidecar discovers its models, keeps
//! their readiness, and forwards plain inference to it; everything the protocol offers on top
//! (binary data and compression toward the client, classification, client shared memory) is done
//! by the sidecar's own front ends and pipeline, so it works whatever the upstream supports.
//! Where the upstream offers it, classification is left to the upstream, which knows its labels.

mod answer;
mod connection;
mod discovery;
mod h2_channel;
mod http1;
pub mod listening;
mod model;
pub mod passthrough;
mod rest;
pub mod shared_pool;
mod transport;

pub use answer::upstream_error;
pub use connection::{CallCounters, Upstream};
pub use discovery::{UpstreamInfo, UpstreamLoader, run_discovery};
pub use h2_channel::{H2Channel, Settings as H2Settings};
pub use model::UpstreamModel;
pub use transport::Transport;
