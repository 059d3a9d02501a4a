//! The crate's error: which of Triton's error codes it carries and the message a client sees.
//!
//! The sidecar converts it into its protocol error (`infergate_sidecar::error::Error`, `From`),
//! which maps the code to Triton's HTTP and gRPC status codes; the message passes unchanged.

/// Triton's error codes this crate raises (a subset of `TRITONSERVER_Error_Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client's request or registration is wrong: HTTP 400, gRPC `INVALID_ARGUMENT`.
    InvalidArg,
    /// The server could not do what was asked: HTTP 500, gRPC `INTERNAL`.
    Internal,
}

/// A failure to map, open or copy shared memory: its kind and Triton's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Error::new(Kind::InvalidArg, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(Kind::Internal, message)
    }
}
