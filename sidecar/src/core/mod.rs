//! The protocol-independent heart of the server: models and their registry, inference requests
//! and responses, validation against the model configuration, statistics, and the pipeline that
//! ties them together. The HTTP and gRPC front ends translate their wire forms into these types.

pub mod batch;
mod batch_input;
pub mod batcher;
pub mod classify;
pub mod cxx_sort;
pub mod input_order;
pub mod model;
pub mod params;
pub mod pipeline;
pub mod repository;
pub mod request;
mod run_batch;
pub mod schedule;
pub mod sequence;
pub mod stats;
mod traced;
pub mod validate;
