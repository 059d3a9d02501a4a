//! Keeps one cancelled call from closing every other call on its gRPC connection.
//!
//! gRPC's C core (the Python, C++ and Ruby clients) can cancel a call after giving it a stream
//! id but before writing its HEADERS, and still send RST_STREAM for that id: a deadline of a
//! millisecond or two on a call queued behind a large message does it. RFC 9113 §5.1 makes any
//! frame but HEADERS or PRIORITY on an idle stream a connection error, and the HTTP/2 server
//! below tonic answers with GOAWAY(PROTOCOL_ERROR): every call in flight on the connection fails
//! with UNAVAILABLE. gRPC's own servers (Triton's among them) ignore such a reset.
//!
//! [`IgnoreIdleResets`] wraps an accepted connection and removes, from the bytes read, each
//! RST_STREAM frame naming a client stream above every one the client has opened with HEADERS,
//! before the HTTP/2 server sees it. Every other byte reaches the server unchanged and in order;
//! writes pass straight through. Frames are filtered in the caller's buffer: a large DATA frame
//! costs a header parse, not a copy.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client connection preface, `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`, which precedes all frames.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
/// RST_STREAM's payload is one error code; a frame of another length is left for the server to
/// refuse.
const RST_STREAM_PAYLOAD_LEN: usize = 4;
/// A read into a buffer with no room for a whole frame header goes through a stack buffer of
/// this size.
const SMALL_READ_LEN: usize = 512;

/// The frame-level state of one connection's incoming bytes.
#[derive(Debug)]
struct ResetFilter {
    /// Bytes of the connection preface not yet passed.
    preface_left: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// Whether the current frame's payload is being removed.
    dropping_payload: bool,
    /// The highest client stream id seen in a HEADERS frame.
    highest_opened: u32,
    /// The start of a frame header that a read cut short; it goes in front of the next bytes.
    held: Held,
}

/// The start of a frame header kept back between reads.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    bytes: [u8; FRAME_HEADER_LEN],
    len: usize,
}

impl Held {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl ResetFilter {
    fn new() -> Self {
        Self {
            preface_left: PREFACE_LEN,
            payload_left: 0,
            dropping_payload: false,
            highest_opened: 0,
            held: Held::default(),
        }
    }

    /// Hands out the bytes kept back by the last [`filter`](Self::filter): the caller puts them
    /// in front of the next bytes it reads.
    fn take_held(&mut self) -> Held {
        std::mem::take(&mut self.held)
    }

    /// Puts back bytes from [`take_held`](Self::take_held) when the read they were for produced
    /// nothing.
    fn restore_held(&mut self, held: Held) {
        self.held = held;
    }

    /// Filters `bytes`, the connection's next bytes (after any held ones), in place. Returns how
    /// many bytes at the front are to be passed on; a trailing partial frame header is kept back.
    fn filter(&mut self, bytes: &mut [u8]) -> usize {
        let mut read = 0;
        let mut write = 0;
        while read < bytes.len() {
            let left = bytes.len() - read;
            if self.preface_left > 0 {
                let n = self.preface_left.min(left);
                keep(bytes, read, write, n);
                read += n;
                write += n;
                self.preface_left -= n;
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(left);
                if !self.dropping_payload {
                    keep(bytes, read, write, n);
                    write += n;
                }
                read += n;
                self.payload_left -= n;
            } else if left < FRAME_HEADER_LEN {
                self.held.bytes[..left].copy_from_slice(&bytes[read..]);
                self.held.len = left;
                read = bytes.len();
            } else {
                let header = FrameHeader::parse(&bytes[read..read + FRAME_HEADER_LEN]);
                if header.kind == HEADERS && is_client_stream(header.stream_id) {
                    self.highest_opened = self.highest_opened.max(header.stream_id);
                }
                let drop = header.resets_idle_client_stream(self.highest_opened);
                if drop {
                    tracing::debug!(
                        stream_id = header.stream_id,
                        "ignored RST_STREAM for a stream the client never opened"
                    );
                } else {
                    keep(bytes, read, write, FRAME_HEADER_LEN);
                    write += FRAME_HEADER_LEN;
                }
                read += FRAME_HEADER_LEN;
                self.payload_left = header.length;
                self.dropping_payload = drop;
            }
        }
        write
    }
}

/// Moves `len` bytes at `from` down to `to` (`to <= from`); bytes already in place are not
/// touched, so a connection with nothing to drop costs no copy.
fn keep(bytes: &mut [u8], from: usize, to: usize, len: usize) {
    if from != to {
        bytes.copy_within(from..from + len, to);
    }
}

/// Clients open odd-numbered streams; stream 0 is the connection.
fn is_client_stream(id: u32) -> bool {
    id % 2 == 1
}

/// The fields of a frame header this filter reads (RFC 9113 §4.1).
#[derive(Debug)]
struct FrameHeader {
    length: usize,
    kind: u8,
    stream_id: u32,
}

impl FrameHeader {
    fn parse(header: &[u8]) -> Self {
        let length =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let stream_id =
            u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        Self {
            length,
            kind: header[3],
            stream_id,
        }
    }

    /// A well-formed RST_STREAM for a client stream the client has not opened yet.
    fn resets_idle_client_stream(&self, highest_opened: u32) -> bool {
        self.kind == RST_STREAM
            && self.length == RST_STREAM_PAYLOAD_LEN
            && is_client_stream(self.stream_id)
            && self.stream_id > highest_opened
    }
}

/// An accepted HTTP/2 connection whose resets of never-opened streams are dropped.
#[derive(Debug)]
pub struct IgnoreIdleResets<T> {
    inner: T,
    filter: ResetFilter,
    /// Filtered bytes a small read had no room for; they go out first.
    ready: Vec<u8>,
}

impl<T> IgnoreIdleResets<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            filter: ResetFilter::new(),
            ready: Vec::new(),
        }
    }
}

impl<T: AsyncRead + Unpin> IgnoreIdleResets<T> {
    /// Gives out bytes left over from a small read.
    fn drain_ready(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.ready.len().min(buf.remaining());
        buf.put_slice(&self.ready[..n]);
        self.ready.drain(..n);
    }

    /// A read into a buffer of at most a frame header's length, where the held bytes might
    /// leave the inner read no room (and filtering may release more than fits): read into a
    /// stack buffer, filter there, and keep what does not fit.
    fn poll_read_small(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut local = [0u8; FRAME_HEADER_LEN + SMALL_READ_LEN];
        loop {
            let held = self.filter.take_held();
            local[..held.len].copy_from_slice(held.as_slice());
            let mut read = ReadBuf::new(&mut local[held.len..]);
            match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {}
                other => {
                    self.filter.restore_held(held);
                    return other;
                }
            }
            let n = read.filled().len();
            if n == 0 {
                // End of stream: held bytes go out as they are, for the server to report.
                self.ready.extend_from_slice(held.as_slice());
                break;
            }
            let kept = self.filter.filter(&mut local[..held.len + n]);
            if kept > 0 {
                self.ready.extend_from_slice(&local[..kept]);
                break;
            }
        }
        self.drain_ready(buf);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IgnoreIdleResets<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.ready.is_empty() {
            this.drain_ready(buf);
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() <= FRAME_HEADER_LEN {
            return this.poll_read_small(cx, buf);
        }
        loop {
            let start = buf.filled().len();
            let held = this.filter.take_held();
            buf.put_slice(held.as_slice());
            let after_held = buf.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                other => {
                    buf.set_filled(start);
                    this.filter.restore_held(held);
                    return other;
                }
            }
            if buf.filled().len() == after_held {
                // End of stream: held bytes go out as they are, for the server to report.
                return Poll::Ready(Ok(()));
            }
            let kept = this.filter.filter(&mut buf.filled_mut()[start..]);
            buf.set_filled(start + kept);
            if kept > 0 {
                return Poll::Ready(Ok(()));
            }
            // Everything read was dropped or held back: read again rather than report an end.
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IgnoreIdleResets<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
