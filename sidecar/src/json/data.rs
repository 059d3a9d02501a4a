//! Tensor `data` arrays: decoded straight from their JSON text into little-endian bytes, and
//! encoded from bytes into a flat JSON array, with Triton's type rules.

use std::borrow::Cow;

use bytes::Bytes;
use infergate_proto::DataType;

use super::decoded::Decoded;
use super::elements::{decode_serial, value_element, write_elements};
use super::reader::{self, JsonError, Parser, Value};
use super::writer::Writer;

pub use super::elements::DataError;

/// Decodes `raw` (the text of a JSON array, any nesting, row-major) holding exactly
/// `expected` elements of `datatype` into the wire encoding. FP16/BF16 are the caller's to
/// reject: JSON cannot carry them.
pub fn decode(
    raw: &[u8],
    datatype: DataType,
    expected: u64,
    max_depth: u32,
) -> Result<Vec<u8>, DataError> {
    decode_at(
        &mut Parser::new(raw, max_depth, false),
        datatype,
        expected,
        max_depth,
    )
}

/// Parses a whole document, keeping every array under a `data` key as [`Value::Raw`], or as
/// [`Value::Decoded`] where the object's `datatype` and `shape` came before it (as clients write
/// tensors) and it decodes as they describe: the tensor is then read once, while parsing.
pub fn parse_lazy_data(buf: &[u8], max_depth: u32) -> Result<Value<'_>, JsonError> {
    reader::parse_lazy_data(buf, max_depth, Some(decode_while_parsing))
}

/// The reader's decoder ([`reader::DataDecoder`]): decodes the `data` array at the parser's
/// position when the object's `datatype` and `shape` (`members`, parsed so far) came before it,
/// as clients write tensors, leaving the position after it. `None`, with the position anywhere,
/// when they did not or the array does not decode as they describe: it stays text, for
/// [`decode`] to report once the request is read.
fn decode_while_parsing<'a>(
    parser: &mut Parser<'a>,
    members: &[(Cow<'a, [u8]>, Value<'a>)],
    max_depth: u32,
) -> Option<Decoded> {
    let member = |name: &[u8]| {
        members
            .iter()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v)
    };
    let datatype = DataType::from_protocol(member(b"datatype")?.as_str()?)?;
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return None;
    }
    let Value::Array(dims) = member(b"shape")? else {
        return None;
    };
    let count = dims
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(d.as_u64()?))?;
    let bytes = decode_at(parser, datatype, count, max_depth).ok()?;
    Some(Decoded {
        datatype,
        count,
        bytes: Bytes::from(bytes),
    })
}

/// What the reader decoded while parsing, read here rather than in the reader, which knows no
/// tensor types.
impl Value<'_> {
    /// The elements of a `data` array decoded while parsing, if they were decoded as
    /// `datatype` with `count` elements.
    pub fn decoded_as(&self, datatype: DataType, count: u64) -> Option<Bytes> {
        match self {
            Value::Decoded(_, d) if d.datatype == datatype && d.count == count => {
                Some(d.bytes.clone())
            }
            _ => None,
        }
    }
}

/// [`decode`] for the array at the parser's position, which it leaves after the array.
pub(super) fn decode_at(
    parser: &mut Parser<'_>,
    datatype: DataType,
    expected: u64,
    max_depth: u32,
) -> Result<Vec<u8>, DataError> {
    let rest = &parser.buf[parser.pos..];
    if max_depth >= 1
        && let Some(flat) = super::parts::flat_array(rest)
        && let Some(bytes) = super::parts::decode(flat, datatype, expected)
    {
        parser.pos += flat.len();
        return Ok(bytes);
    }
    decode_serial(parser, datatype, expected, max_depth, rest.len())
}

/// Decodes a value already parsed (one scalar, or an array of any nesting, row-major) into
/// exactly `expected` elements of `datatype`, with the type rules and errors of [`decode`]:
/// how a generate request's inputs are read, where the value is the tensor itself.
pub fn decode_value(
    value: &Value<'_>,
    datatype: DataType,
    expected: u64,
) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    let mut count = 0u64;
    for_each_scalar(value, &mut |scalar| {
        if count == expected {
            return Err(DataError::TooMany);
        }
        count += 1;
        value_element(scalar, datatype, &mut out)
    })?;
    if count < expected {
        return Err(DataError::TooFew);
    }
    Ok(out)
}

/// Visits the scalars of a parsed value in row-major order: the value itself when it is not an
/// array. (The parser has already bounded the nesting.)
pub fn for_each_scalar<'v, 'a, E>(
    value: &'v Value<'a>,
    visit: &mut impl FnMut(&'v Value<'a>) -> Result<(), E>,
) -> Result<(), E> {
    match value {
        Value::Array(items) => items
            .iter()
            .try_for_each(|item| for_each_scalar(item, visit)),
        scalar => visit(scalar),
    }
}

/// Writes `data` (wire encoding of `datatype`) as a flat JSON array. FP16/BF16 are the caller's
/// to reject. A malformed BYTES buffer writes the elements that parse.
pub fn encode(w: &mut Writer, datatype: DataType, data: &[u8]) {
    w.byte(b'[');
    if !super::parts::encode(w, datatype, data) {
        write_elements(w, datatype, data, true);
    }
    w.byte(b']');
}

#[cfg(test)]
mod tests;
