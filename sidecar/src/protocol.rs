//! The wire protocol a request came in by. Triton's behaviour differs between its two front ends
//! in small ways that the sidecar keeps (trace event names, how a log or trace setting of `null`
//! is read, the words of some refusals), and every module that needs to know asks this one enum.

/// REST (HTTP/1.1 or h2c, Triton's HTTP front end) or gRPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Grpc,
}
