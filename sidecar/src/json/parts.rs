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
mod tests {
    use super::*;

    fn sequential(raw: &[u8], datatype: DataType, expected: u64) -> Option<Vec<u8>> {
        let mut p = Parser::new(raw, 100, false);
        elements::decode_serial(&mut p, datatype, expected, 100, raw.len()).ok()
    }

    /// `[v0, v1, …]` with the numbers clients write: signs, fractions, exponents, NaN,
    /// whitespace here and there.
    fn array(n: usize) -> String {
        let items: Vec<String> = (0..n)
            .map(|i| match i % 7 {
                0 => format!("{i}"),
                1 => format!("-{i}.25"),
                2 => format!(" {i}e-3"),
                3 => "NaN".to_string(),
                4 => format!("{}.5\n", i % 1000),
                5 => "-0".to_string(),
                _ => format!("{i}E+2 "),
            })
            .collect();
        format!("[{}]", items.join(","))
    }

    #[test]
    fn parts_decode_what_one_pass_decodes() {
        let text = array(10_000);
        for dt in [DataType::Fp32, DataType::Fp64] {
            for parts in [2, 3, 8] {
                let expected = sequential(text.as_bytes(), dt, 10_000).unwrap();
                assert_eq!(
                    decode_in(parts, text.as_bytes(), dt, 10_000),
                    Some(expected),
                    "{dt} in {parts}"
                );
            }
        }
        let ints = format!(
            "[{}]",
            (0..5000)
                .map(|i| (i * 7 - 9000).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for dt in [DataType::Int32, DataType::Int64, DataType::Int8] {
            assert_eq!(
                decode_in(4, ints.as_bytes(), dt, 5000),
                sequential(ints.as_bytes(), dt, 5000)
            );
        }
    }

    #[test]
    fn anything_else_is_left_to_one_pass() {
        let good = array(1000);
        // A count that differs, either way.
        assert_eq!(decode_in(4, good.as_bytes(), DataType::Fp32, 999), None);
        assert_eq!(decode_in(4, good.as_bytes(), DataType::Fp32, 1001), None);
        // Integers refuse fractions; strings, literals, objects and syntax errors anywhere.
        assert_eq!(decode_in(4, good.as_bytes(), DataType::Int32, 1000), None);
        for bad in ["\"x\"", "true", "{}", "1 2", "", "1.", "--1", "1e"] {
            for at in [0, 500, 999] {
                let mut items: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
                items[at] = bad.to_string();
                let text = format!("[{}]", items.join(","));
                assert_eq!(
                    decode_in(4, text.as_bytes(), DataType::Fp32, 1000),
                    None,
                    "{bad:?} at {at}"
                );
            }
        }
        // A trailing comma, an empty array.
        assert_eq!(decode_in(2, b"[1,2,3,]", DataType::Fp32, 3), None);
        assert_eq!(decode_in(2, b"[]", DataType::Fp32, 0), None);
    }

    #[test]
    fn only_flat_arrays_are_cut() {
        if cores() < 2 {
            return; // flat_array declines on one core, whatever the text
        }
        let big = array(200_000);
        let flat = flat_array(big.as_bytes()).expect("a large flat array");
        assert_eq!(flat.len(), big.len());
        let followed = format!("{big},\"next\":[1]}}");
        assert_eq!(
            flat_array(followed.as_bytes()).map(<[u8]>::len),
            Some(big.len())
        );
        assert_eq!(flat_array(format!("[{big}]").as_bytes()), None);
        assert_eq!(flat_array(b"[1,2,3]"), None);
        let with_string = format!("[\"a\",{}", &big[1..]);
        assert_eq!(flat_array(with_string.as_bytes()), None);
    }

    #[test]
    fn parts_write_what_one_pass_writes() {
        let values: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (f32::from_bits(i.wrapping_mul(2_654_435_761))).to_le_bytes())
            .collect();
        for dt in [
            DataType::Fp32,
            DataType::Int32,
            DataType::Uint8,
            DataType::Bool,
        ] {
            let mut one = Writer::default();
            elements::write_elements(&mut one, dt, &values, true);
            for parts in [2, 3, 7] {
                let mut cut = Writer::default();
                assert!(encode_in(parts, &mut cut, dt, &values));
                assert_eq!(cut.buf, one.buf, "{dt} in {parts}");
            }
        }
        let mut w = Writer::default();
        assert!(!encode_in(4, &mut w, DataType::Bytes, b"\x01\0\0\0a"));
        assert!(!encode_in(4, &mut w, DataType::Fp16, &[0; 64]));
    }
}
