//! Large tensors in JSON, read and written on several cores. A flat array of numbers is cut at
//! commas into one part per core; each part is decoded on its own thread and the bytes are
//! joined in order. Writing cuts the tensor's elements the same way. Anything but a flat array
//! of numbers, and any error at all, is left to the one-pass path, so errors and their
//! messages are exactly those of a sequential read.
//!
//! A JSON round trip of a million FP32 values spends nearly all its time reading and writing
//! numbers (docs/performance/archive.md, "JSON tensors: reading and writing numbers"); with the
//! cores otherwise idle, parts divide that time.

use std::num::NonZeroUsize;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use infergate_proto::DataType;

use super::elements;
use super::reader::Parser;
use super::writer::Writer;

/// Bytes of JSON text below which a part is not worth a thread (about a millisecond of work).
const MIN_TEXT_PER_PART: usize = 256 * 1024;
/// Elements below which writing a part is not worth a thread.
const MIN_ELEMENTS_PER_PART: usize = 64 * 1024;

/// How many parts a large tensor may be cut into: the cores this process may use (cgroup
/// quotas included), at most 8.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        thread::available_parallelism()
            .map(NonZeroUsize::get)
            .unwrap_or(1)
            .min(8)
    })
}

/// Large tensors being read or written in parts right now, this one included.
static IN_PARTS: AtomicUsize = AtomicUsize::new(0);

/// One tensor's share of the cores while it is read or written: the cores divided among the
/// large tensors in progress. Under load every core already has a request of its own, and
/// threads of a tensor's own would only take turns with them (and add the copies that join
/// their parts): the share is then one core and the tensor takes the one-pass path.
struct CoreShare;

impl CoreShare {
    fn take() -> Self {
        IN_PARTS.fetch_add(1, Ordering::Relaxed);
        CoreShare
    }

    fn cores(&self) -> usize {
        cores() / IN_PARTS.load(Ordering::Relaxed).max(1)
    }
}

impl Drop for CoreShare {
    fn drop(&mut self) {
        IN_PARTS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The array at the start of `text` (`[` to its `]`) when it is large enough to be cut into
/// parts and flat: no nested array and no string before the first `]`. `None` otherwise.
pub(super) fn flat_array(text: &[u8]) -> Option<&[u8]> {
    if cores() < 2 || !text.starts_with(b"[") {
        return None;
    }
    let end = 1 + memchr::memchr3(b'[', b']', b'"', &text[1..])?;
    (text[end] == b']' && end >= 2 * MIN_TEXT_PER_PART).then(|| &text[..=end])
}

/// Decodes `flat` (a flat JSON array, from [`flat_array`]) in parts when it holds exactly
/// `expected` numbers of a fixed-size `datatype`. `None` leaves it to the sequential decoder:
/// a count that differs, or anything the sequential decoder would refuse or report. A `Some`
/// means the text was valid JSON too: every element was a number, with commas between them.
pub(super) fn decode(flat: &[u8], datatype: DataType, expected: u64) -> Option<Vec<u8>> {
    let share = CoreShare::take();
    decode_in(
        share.cores().min(flat.len() / MIN_TEXT_PER_PART),
        flat,
        datatype,
        expected,
    )
}

fn decode_in(parts: usize, flat: &[u8], datatype: DataType, expected: u64) -> Option<Vec<u8>> {
    let size = datatype.element_size()?;
    if parts < 2 || datatype == DataType::Bool {
        return None;
    }
    let interior = flat.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let spans = cut_at_commas(interior, parts)?;
    let decoded: Vec<Option<(Vec<u8>, u64)>> = thread::scope(|scope| {
        let helpers: Vec<_> = spans[1..]
            .iter()
            .map(|span| helper(scope, move || decode_part(span, datatype, size)))
            .collect();
        let mut all = vec![decode_part(spans[0], datatype, size)];
        all.extend(
            helpers
                .into_iter()
                .map(|h| h.and_then(|h| h.join().ok()).flatten()),
        );
        all
    });
    let decoded: Vec<(Vec<u8>, u64)> = decoded.into_iter().collect::<Option<_>>()?;
    if decoded.iter().map(|(_, n)| n).sum::<u64>() != expected {
        return None;
    }
    let mut out = Vec::with_capacity(decoded.iter().map(|(bytes, _)| bytes.len()).sum());
    for (bytes, _) in decoded {
        out.extend_from_slice(&bytes);
    }
    Some(out)
}

/// A thread for one part, or `None` where the system refuses one (the caller then takes the
/// one-pass path; `thread::Scope::spawn` would panic instead).
fn helper<'scope, T: Send + 'scope>(
    scope: &'scope thread::Scope<'scope, '_>,
    work: impl FnOnce() -> T + Send + 'scope,
) -> Option<thread::ScopedJoinHandle<'scope, T>> {
    thread::Builder::new()
        .name("infergate-json".into())
        .spawn_scoped(scope, work)
        .ok()
}

/// `interior` cut into `parts` spans at commas (each span without its comma), or `None` where
/// there are too few commas.
fn cut_at_commas(interior: &[u8], parts: usize) -> Option<Vec<&[u8]>> {
    let mut spans = Vec::with_capacity(parts);
    let mut start = 0;
    for i in 1..parts {
        let target = (interior.len() * i / parts).max(start);
        let comma = target + memchr::memchr(b',', &interior[target..])?;
        spans.push(&interior[start..comma]);
        start = comma + 1;
    }
    spans.push(&interior[start..]);
    Some(spans)
}

/// The elements of one span (`1.5, 2, -3e2`): their bytes and count, or `None` at anything
/// that is not a number the datatype takes.
fn decode_part(span: &[u8], datatype: DataType, size: usize) -> Option<(Vec<u8>, u64)> {
    // A number is at least one character and a comma.
    let mut out = Vec::with_capacity((span.len() / 2 + 1) * size);
    let mut count = 0u64;
    let mut p = Parser::new(span, 1, false);
    loop {
        p.skip_ws();
        if !matches!(p.peek(), Some(b'-' | b'0'..=b'9' | b'N' | b'I')) {
            return None;
        }
        elements::element(&mut p, datatype, &mut out).ok()?;
        count += 1;
        p.skip_ws();
        match p.peek() {
            None => return Some((out, count)),
            Some(b',') => p.pos += 1,
            Some(_) => return None,
        }
    }
}

/// Writes the elements of `data` (fixed-size `datatype`, JSON-writable) in parts when there
/// are enough of them; `false` leaves them all to the caller.
pub(super) fn encode(w: &mut Writer, datatype: DataType, data: &[u8]) -> bool {
    let elements = data.len() / datatype.element_size().unwrap_or(1).max(1);
    let share = CoreShare::take();
    encode_in(
        share.cores().min(elements / MIN_ELEMENTS_PER_PART),
        w,
        datatype,
        data,
    )
}

fn encode_in(parts: usize, w: &mut Writer, datatype: DataType, data: &[u8]) -> bool {
    let Some(size) = datatype.element_size() else {
        return false;
    };
    if parts < 2 || matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return false;
    }
    let elements = data.len() / size.max(1);
    let per_part = elements.div_ceil(parts) * size;
    if per_part == 0 {
        return false;
    }
    let chunks: Vec<&[u8]> = data.chunks(per_part).collect();
    let written: Vec<Option<Vec<u8>>> = thread::scope(|scope| {
        let helpers: Vec<_> = chunks[1..]
            .iter()
            .map(|chunk| {
                helper(scope, move || {
                    let mut part = Writer::with_capacity(0);
                    elements::write_elements(&mut part, datatype, chunk, false);
                    part.buf
                })
            })
            .collect();
        let mut first = Writer::with_capacity(0);
        elements::write_elements(&mut first, datatype, chunks[0], true);
        let mut all = vec![Some(first.buf)];
        all.extend(helpers.into_iter().map(|h| h.and_then(|h| h.join().ok())));
        all
    });
    if written.iter().any(Option::is_none) {
        return false;
    }
    w.buf
        .reserve(written.iter().flatten().map(Vec::len).sum::<usize>() + 16);
    for part in written.into_iter().flatten() {
        w.buf.extend_from_slice(&part);
    }
    true
}

#[cfg(test)]
mod tests;
