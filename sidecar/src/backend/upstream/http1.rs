//! HTTP/1.1 to the upstream's V2 REST endpoint: one request at a time on each kept-alive
//! connection, written and read by the task that makes the call.
//!
//! A pooled client that gives each connection a task of its own (hyper's) hands every request to
//! that task and the answer back: two task wake-ups per call, often across threads, which cost
//! more than the rest of a small call (docs/performance/archive.md, "A call without a connection
//! task").
//! Here the caller takes an idle connection, writes the request in one go, reads the answer, and
//! puts the connection back. A call whose future is dropped drops its connection with it.
//!
//! Connections idle for longer than the idle limit (`backend.rest_idle_ms`, 1 s by default) are
//! closed instead of reused: model servers' HTTP front ends close idle connections after a few
//! seconds (uvicorn's default, which MLServer keeps, is 5 s; gunicorn's 2 s), and a request sent
//! just as the server closes its end is lost with nothing to tell whether the model ran.
//! Retrying it could run the model twice, so the sidecar does not send on a connection that old
//! in the first place.

use std::io::{self, IoSlice};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer head (status line and headers) read before giving up on the answer.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Headers read from one answer; V2 servers send fewer than a dozen.
const MAX_HEADERS: usize = 64;
/// Idle connections kept for reuse; more than the calls in flight at once is never needed, and
/// the upstream's own concurrency limit (`backend.max_concurrency`) bounds those.
const MAX_IDLE: usize = 256;
/// The client's own idle limit, for callers that set none with
/// [`Http1Client::with_max_idle_age`]; the sidecar always passes `backend.rest_idle_ms`, whose
/// default is the same second (why a second: the module's comment).
const MAX_IDLE_AGE: Duration = Duration::from_secs(1);
/// Requests up to this size are copied into one buffer and sent with one write; larger ones are
/// written from their parts.
const GATHER_BYTES: usize = 64 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection could be made: nothing of the request reached the upstream.
    #[error("cannot connect to the upstream: {0}")]
    Connect(String),
    /// The connection broke, or the answer was not HTTP/1.1.
    #[error("{0}")]
    Broken(String),
    /// The answer's body is larger than the limit given.
    #[error("the upstream's answer is larger than {0} bytes")]
    TooLarge(usize),
}

/// An answer's status, the headers the REST client reads, and its whole body.
pub struct Response {
    pub status: http::StatusCode,
    /// `Inference-Header-Content-Length`, when present and a number.
    pub header_length: Option<usize>,
    pub body: Bytes,
}

/// A request: everything but the body is written by [`Http1Client::call`].
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// Extra headers, written as given (`Content-Type`, `Inference-Header-Content-Length`).
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [Bytes],
}

pub struct Http1Client {
    /// `host:port`, for connecting and for the `Host` header.
    authority: String,
    connect_timeout: Duration,
    max_idle_age: Duration,
    /// Most recently used last: the newest is taken first, so the oldest sit at the bottom.
    idle: Mutex<Vec<Connection>>,
}

struct Connection {
    stream: TcpStream,
    /// Bytes read past the last answer's end never happen with one request at a time; what is
    /// left here between calls is spare capacity, reused for the next answer.
    buffer: BytesMut,
    /// When it was last put back idle.
    idle_since: Instant,
}

impl Http1Client {
    pub fn new(authority: &str, connect_timeout: Duration) -> Self {
        Http1Client {
            authority: authority.to_string(),
            connect_timeout,
            max_idle_age: MAX_IDLE_AGE,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Closes connections idle for longer than `age` instead of reusing them; zero keeps none
    /// (a connection for every call).
    pub fn with_max_idle_age(mut self, age: Duration) -> Self {
        self.max_idle_age = age;
        self
    }

    /// Sends `request` and reads its whole answer, whose body may be at most `max_body` bytes.
    pub async fn call(&self, request: &Request<'_>, max_body: usize) -> Result<Response, Error> {
        let head = self.head(request);
        let (mut connection, reused) = match self.take_idle() {
            Some(c) => (c, true),
            None => (self.connect().await?, false),
        };
        if let Err(e) = connection.write(&head, request.body).await {
            if !reused {
                return Err(Error::Broken(format!("cannot send to the upstream: {e}")));
            }
            // The upstream closed the idle connection as the request went out. It did not have
            // the whole request, so it cannot have acted on it: send it again on a new one.
            connection = self.connect().await?;
            connection
                .write(&head, request.body)
                .await
                .map_err(|e| Error::Broken(format!("cannot send to the upstream: {e}")))?;
        }
        let (response, keep) = connection.read_response(max_body).await?;
        if keep && !self.max_idle_age.is_zero() {
            self.put_idle(connection);
        }
        Ok(response)
    }

    fn head(&self, request: &Request<'_>) -> Vec<u8> {
        let length: usize = request.body.iter().map(Bytes::len).sum();
        let mut head = Vec::with_capacity(160 + request.path.len());
        head.extend_from_slice(request.method.as_bytes());
        head.push(b' ');
        head.extend_from_slice(request.path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        head.extend_from_slice(self.authority.as_bytes());
        head.extend_from_slice(b"\r\n");
        for (name, value) in request.headers {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        if length > 0 || request.method == "POST" {
            head.extend_from_slice(b"Content-Length: ");
            head.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        head
    }

    async fn connect(&self) -> Result<Connection, Error> {
        let stream =
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.authority))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(Error::Connect(format!("{}: {e}", self.authority))),
                Err(_) => {
                    return Err(Error::Connect(format!(
                        "{}: no connection within {} s",
                        self.authority,
                        self.connect_timeout.as_secs()
                    )));
                }
            };
        // Requests and answers are written whole; waiting to fill a segment only adds latency.
        stream
            .set_nodelay(true)
            .map_err(|e| Error::Connect(format!("{}: {e}", self.authority)))?;
        Ok(Connection {
            stream,
            buffer: BytesMut::new(),
            idle_since: Instant::now(),
        })
    }

    /// An idle connection the upstream has not closed (as far as can be told without waiting),
    /// and that has not been idle long enough for the upstream to be closing it.
    fn take_idle(&self) -> Option<Connection> {
        loop {
            let connection = self.idle.lock().ok()?.pop()?;
            if connection.idle_since.elapsed() > self.max_idle_age {
                // The ones below it have been idle longer still (unless put back meanwhile):
                // close them too, outside the lock, as they drop.
                let stale: Vec<Connection> = self
                    .idle
                    .lock()
                    .ok()?
                    .extract_if(.., |c| c.idle_since.elapsed() > self.max_idle_age)
                    .collect();
                drop(stale);
                return None;
            }
            // Readable while idle means closed (end of stream) or broken; the upstream sends
            // nothing unasked.
            let mut probe = [0u8; 1];
            match connection.stream.try_read(&mut probe) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(connection),
                _ => continue,
            }
        }
    }

    fn put_idle(&self, mut connection: Connection) {
        connection.idle_since = Instant::now();
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(connection);
        }
    }
}

impl Connection {
    async fn write(&mut self, head: &[u8], body: &[Bytes]) -> io::Result<()> {
        let length: usize = head.len() + body.iter().map(Bytes::len).sum::<usize>();
        if length <= GATHER_BYTES {
            let mut whole = Vec::with_capacity(length);
            whole.extend_from_slice(head);
            for chunk in body {
                whole.extend_from_slice(chunk);
            }
            return self.stream.write_all(&whole).await;
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(body.len() + 1);
        parts.push(head);
        parts.extend(body.iter().map(|b| b.as_ref()).filter(|b| !b.is_empty()));
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        while !rest.is_empty() {
            let written = self.stream.write_vectored(rest).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut rest, written);
        }
        Ok(())
    }

    /// Reads more of the answer into the buffer, with room for at least 4 KiB; the end of the
    /// stream here is an error.
    async fn fill(&mut self) -> Result<(), Error> {
        if self.buffer.capacity() - self.buffer.len() < 4096 {
            self.buffer.reserve(8192);
        }
        self.read_more().await
    }

    /// Reads into the buffer's spare room (grown only when there is none).
    async fn read_more(&mut self) -> Result<(), Error> {
        match self.stream.read_buf(&mut self.buffer).await {
            Ok(0) => Err(Error::Broken(
                "the upstream closed the connection before its answer was complete".into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(Error::Broken(format!(
                "reading the upstream's answer failed: {e}"
            ))),
        }
    }

    /// The answer, and whether the connection can carry another request.
    async fn read_response(&mut self, max_body: usize) -> Result<(Response, bool), Error> {
        let head = loop {
            match parse_head(&self.buffer)? {
                Some(head) if head.informational => self.buffer.advance(head.length),
                Some(head) => break head,
                None if self.buffer.len() >= MAX_HEAD_BYTES => {
                    return Err(Error::Broken(format!(
                        "the upstream's answer head is longer than {MAX_HEAD_BYTES} bytes"
                    )));
                }
                None => self.fill().await?,
            }
        };
        self.buffer.advance(head.length);
        let mut keep = head.keep_alive;
        let body = if head.status == 204 || head.status == 304 {
            Bytes::new()
        } else if head.chunked {
            self.read_chunked(max_body).await?
        } else if let Some(length) = head.content_length {
            if length > max_body {
                return Err(Error::TooLarge(max_body));
            }
            // Room for the whole body at once: growing it in steps would copy it again each time.
            self.buffer
                .reserve(length.saturating_sub(self.buffer.len()));
            while self.buffer.len() < length {
                self.read_more().await?;
            }
            self.buffer.split_to(length).freeze()
        } else {
            // Neither a length nor chunks: the body ends with the connection.
            keep = false;
            self.read_to_end(max_body).await?
        };
        // One request at a time: anything after the answer is not HTTP we can follow.
        if !self.buffer.is_empty() {
            keep = false;
        }
        let status = http::StatusCode::from_u16(head.status).map_err(|_| {
            Error::Broken(format!(
                "the upstream's answer has an invalid status {}",
                head.status
            ))
        })?;
        Ok((
            Response {
                status,
                header_length: head.header_length,
                body,
            },
            keep,
        ))
    }

    async fn read_chunked(&mut self, max_body: usize) -> Result<Bytes, Error> {
        let mut body = BytesMut::new();
        loop {
            let (size_length, size) = loop {
                match httparse::parse_chunk_size(&self.buffer) {
                    Ok(httparse::Status::Complete((n, size))) => break (n, size),
                    Ok(httparse::Status::Partial) if self.buffer.len() < MAX_HEAD_BYTES => {
                        self.fill().await?
                    }
                    _ => {
                        return Err(Error::Broken(
                            "the upstream's answer has an invalid chunk size".into(),
                        ));
                    }
                }
            };
            self.buffer.advance(size_length);
            if size == 0 {
                return self.skip_trailers().await.map(|()| body.freeze());
            }
            let size = usize::try_from(size)
                .ok()
                .filter(|s| body.len().saturating_add(*s) <= max_body)
                .ok_or(Error::TooLarge(max_body))?;
            while self.buffer.len() < size + 2 {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buffer[..size]);
            if &self.buffer[size..size + 2] != b"\r\n" {
                return Err(Error::Broken(
                    "the upstream's answer has a chunk without its line end".into(),
                ));
            }
            self.buffer.advance(size + 2);
        }
    }

    /// Trailer lines after the last chunk, up to the empty line.
    async fn skip_trailers(&mut self) -> Result<(), Error> {
        loop {
            match self.buffer.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.buffer.advance(2);
                    return Ok(());
                }
                Some(end) => self.buffer.advance(end + 2),
                None if self.buffer.len() >= MAX_HEAD_BYTES => {
                    return Err(Error::Broken(
                        "the upstream's answer has trailers longer than allowed".into(),
                    ));
                }
                None => self.fill().await?,
            }
        }
    }

    async fn read_to_end(&mut self, max_body: usize) -> Result<Bytes, Error> {
        loop {
            if self.buffer.len() > max_body {
                return Err(Error::TooLarge(max_body));
            }
            self.buffer.reserve(8192);
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) => return Ok(self.buffer.split().freeze()),
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::Broken(format!(
                        "reading the upstream's answer failed: {e}"
                    )));
                }
            }
        }
    }
}

/// What the client needs from an answer's head.
#[derive(Debug, PartialEq)]
struct Head {
    /// Bytes of the status line and headers, blank line included.
    length: usize,
    status: u16,
    /// 1xx (other than 101): another head follows.
    informational: bool,
    content_length: Option<usize>,
    chunked: bool,
    keep_alive: bool,
    header_length: Option<usize>,
}

/// The head at the start of `buffer`, or `None` while it is incomplete.
fn parse_head(buffer: &[u8]) -> Result<Option<Head>, Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(Error::Broken(format!(
                "the upstream's answer is not HTTP/1.1: {e}"
            )));
        }
    };
    let status = response.code.unwrap_or(0);
    let mut head = Head {
        length,
        status,
        informational: (100..200).contains(&status) && status != 101,
        content_length: None,
        chunked: false,
        // HTTP/1.0 closes unless asked to keep the connection; 1.1 keeps it unless told not to.
        keep_alive: response.version == Some(1),
        header_length: None,
    };
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).unwrap_or("").trim();
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let length = value.parse::<usize>().map_err(|_| {
                Error::Broken(format!(
                    "the upstream's answer has an invalid Content-Length '{value}'"
                ))
            })?;
            if head.content_length.is_some_and(|l| l != length) {
                return Err(Error::Broken(
                    "the upstream's answer has two different Content-Length headers".into(),
                ));
            }
            head.content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            if !head.chunked {
                // Any other coding leaves the body's end to the connection's.
                head.keep_alive = false;
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && response.version == Some(0) {
                    head.keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(infergate_proto::wire::HEADER_LENGTH) {
            head.header_length = value.parse().ok();
        }
    }
    if head.chunked {
        // Chunks define the end; a length beside them is ignored (RFC 9112, 6.3).
        head.content_length = None;
    }
    Ok(Some(head))
}

#[cfg(test)]
mod tests;
