//! The result type of every call to the upstream, whichever transport carries it.

/// The upstream's answer, or its error in gRPC terms.
pub type Answer<T> = std::result::Result<T, tonic::Status>;
