//! Reading a request body: within the size limit, the stall timeout and the deadline, against
//! the process's budget of request bytes in flight; and the errors of a body too large or not
//! JSON, in Triton's words.

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use infergate_config::Limits;

use crate::error::{Error, Result};
use crate::json::JsonError;

/// A body of `length` bytes, all JSON, over the input limit: current Triton's words (its JSON
/// reader's check).
pub(super) fn json_too_large(length: u64, limit: u64) -> Error {
    Error::invalid_arg(format!(
        "request JSON size of {length} bytes exceeds the maximum allowed input size of {limit} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// A body of `length` bytes that is one raw input, over the input limit: current Triton's words.
pub(super) fn raw_input_too_large(length: u64, limit: u64) -> Error {
    Error::invalid_arg(format!(
        "Raw input has a byte_size ({length} bytes) that exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// A request body that is not JSON: syntax errors are INTERNAL in Triton (500); nesting beyond
/// the sidecar's limit is the client's error (400).
pub(crate) fn body_json_error(e: JsonError) -> Error {
    match e {
        JsonError::TooDeep { .. } => Error::invalid_arg(e.request_message()),
        JsonError::Syntax { .. } => Error::internal(e.request_message()),
    }
}

/// Reads a request body, refusing more than `limit` bytes before buffering them, one that goes
/// `limits.http_body_timeout_seconds` without sending a byte, and one still arriving after
/// `limits.http_body_deadline_seconds`. Bytes past the process's budget of request bytes in
/// flight are refused with 503 `server is busy` (`crate::inflight`).
pub async fn read_body(
    body: Body,
    limit: u64,
    content_length: Option<u64>,
    limits: &Limits,
) -> Result<Bytes> {
    let too_large = || {
        Error::invalid_arg(format!(
            "request body size exceeds the maximum allowed input size of {limit} bytes"
        ))
    };
    if content_length.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let stall = limits.http_body_timeout();
    let deadline = limits.http_body_deadline();
    let mut body = body;
    let stalled = || {
        Error::invalid_arg(format!(
            "timed out reading the request body: no data for {} s",
            stall.as_secs()
        ))
    };
    let late = || {
        Error::invalid_arg(format!(
            "timed out reading the request body: not complete after {} s",
            deadline.as_secs()
        ))
    };
    let give_up_at = tokio::time::Instant::now() + deadline;
    // The frames copied into one buffer as they come, so that the copy overlaps the wait for
    // the next frame. The buffer is never sized from the declared length alone (a client could
    // declare much and send little): it at most doubles what has arrived, up to the declared
    // length, so it holds at most twice the bytes received. Most bodies arrive as one frame,
    // kept without a copy.
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    let declared = content_length.unwrap_or(limit);
    let mut len = 0u64;
    loop {
        // One timer a frame: the nearer of the stall's end and the whole body's deadline.
        let stall_ends = tokio::time::Instant::now() + stall;
        let until = stall_ends.min(give_up_at);
        let Some(frame) = tokio::time::timeout_at(until, body.frame())
            .await
            .map_err(|_| {
                if until == give_up_at {
                    late()
                } else {
                    stalled()
                }
            })?
        else {
            break;
        };
        let frame = frame.map_err(|e| {
            if crate::inflight::is_busy(&e) {
                Error::unavailable(crate::inflight::BUSY)
            } else {
                Error::invalid_arg(format!("failed to read the request body: {e}"))
            }
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len += data.len() as u64;
        if len > limit {
            return Err(too_large());
        }
        if data.is_empty() {
            continue;
        }
        if first.is_none() && joined.is_empty() {
            first = Some(data);
            continue;
        }
        if joined.capacity() - joined.len() < data.len() {
            let wanted = (len.saturating_mul(2)).min(declared.max(len));
            let wanted = usize::try_from(wanted).unwrap_or(usize::MAX);
            joined.reserve(wanted.saturating_sub(joined.len()));
        }
        if let Some(first) = first.take() {
            joined.extend_from_slice(&first);
        }
        joined.extend_from_slice(&data);
    }
    Ok(match first {
        Some(only) => only,
        None => joined.freeze(),
    })
}
