//! Names on the wire that more than one part of the sidecar uses: the REST front that reads them
//! and the upstream client that writes them.

/// The header that splits a REST body into its JSON header and its binary tensor data (Triton's
/// binary tensor data extension), lower-case as HTTP/2 and the `http` crate want it.
pub const HEADER_LENGTH: &str = "inference-header-content-length";
