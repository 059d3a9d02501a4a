//! The result type of every call to the upstream, whichever transport carries it, and the
//! upstream's failures as the protocol's errors.

use crate::error::{Code, Error};

/// The upstream's answer, or its error in gRPC terms.
pub type Answer<T> = std::result::Result<T, tonic::Status>;

/// Maps an upstream failure to the protocol's error the client sees.
pub fn upstream_error(status: tonic::Status, url: &str) -> Error {
    // The client's own output region was too small (the upstream wrote to it directly): the
    // client gets the same answer the sidecar gives when it writes the region itself.
    if output_slot_too_small(&status) {
        return Error::internal(status.message().to_string());
    }
    // The connection itself failed (the upstream died or reset it in the middle of a call):
    // tonic makes such a status locally, with the transport error as its source, and whatever
    // code it picks, for the client the upstream is unavailable.
    if let Some(cause) = std::error::Error::source(&status) {
        return Error::unavailable(format!(
            "upstream model server {url} is unavailable: {}",
            error_chain(cause)
        ));
    }
    match status.code() {
        // The model server answered UNAVAILABLE itself (Triton: "Exceeds maximum queue size",
        // "Request timeout expired", a stopping server): its words, as its clients know them.
        tonic::Code::Unavailable => Error::unavailable(status.message().to_string()),
        tonic::Code::DeadlineExceeded => Error::unavailable(format!(
            "upstream model server {url} did not answer in time"
        )),
        tonic::Code::InvalidArgument => Error::invalid_arg(status.message().to_string()),
        tonic::Code::NotFound => Error::not_found(status.message().to_string()),
        tonic::Code::Unimplemented => Error::unsupported(status.message().to_string()),
        tonic::Code::AlreadyExists => Error::already_exists(status.message().to_string()),
        tonic::Code::Cancelled => Error::new(Code::Cancelled, status.message().to_string()),
        _ => Error::internal(format!("upstream model server {url}: {}", status.message())),
    }
}

/// An error and its causes, `outer: inner: innermost`, without repeating a cause whose text the
/// outer one already ends with.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Triton's answer when an output slot was smaller than the output.
pub(super) fn output_slot_too_small(status: &tonic::Status) -> bool {
    status.message().contains("should be at least")
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "grpc://127.0.0.1:8001";

    #[test]
    fn a_broken_connection_is_unavailable_whatever_code_tonic_picked() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = tonic::Status::from_error(Box::new(reset));
        assert!(std::error::Error::source(&status).is_some());
        let error = upstream_error(status, URL);
        assert_eq!(error.code, Code::Unavailable);
        assert!(
            error
                .message
                .starts_with("upstream model server grpc://127.0.0.1:8001 is unavailable: "),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("connection reset"),
            "{}",
            error.message
        );
    }

    #[test]
    fn statuses_the_upstream_sent_keep_their_meaning() {
        let sent = tonic::Status::internal("model crashed");
        assert_eq!(upstream_error(sent, URL).code, Code::Internal);
        let sent = tonic::Status::invalid_argument("bad shape");
        let error = upstream_error(sent, URL);
        assert_eq!(
            (error.code, error.message.as_str()),
            (Code::InvalidArg, "bad shape")
        );
        let sent = tonic::Status::unavailable("Request timeout expired");
        let error = upstream_error(sent, URL);
        assert_eq!(
            (error.code, error.message.as_str()),
            (Code::Unavailable, "Request timeout expired"),
            "the upstream's own UNAVAILABLE keeps its words"
        );
    }
}
