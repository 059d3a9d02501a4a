//! V2 over REST to the upstream (`--upstream http://HOST:PORT`), for model servers without a
//! gRPC endpoint. Requests carry tensors as binary data (`Inference-Header-Content-Length`)
//! when the upstream lists `binary_tensor_data`, as JSON otherwise; answers are turned into the
//! gRPC messages the rest of the upstream backend reads, and HTTP errors into `tonic::Status`
//! by their status code, so `grpc://` and `http://` upstreams behave alike.
//!
//! `client` makes the calls, one method per route; `codec` writes an inference request and
//! reads its answer, and turns the upstream's HTTP errors into `tonic::Status`.

mod client;
mod codec;

pub use client::{RestClient, is_unreachable};
