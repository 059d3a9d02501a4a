//! Tensor `data` arrays: decoded straight from their JSON text into little-endian bytes, and
//! encoded from bytes into a flat JSON array, with Triton's type rules.

use infergate_proto::DataType;

use super::reader::{JsonError, Number, Parser};
use super::writer::Writer;
use crate::tensor::{bytes_elements, le_elements};

/// Why a `data` array could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum DataError {
    /// An element of the wrong JSON type: the TritonJson accessor's message.
    WrongType(&'static str),
    /// More elements than the shape holds.
    TooMany,
    /// Fewer elements than the shape holds.
    TooFew,
    Json(JsonError),
}

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
    let capacity = match datatype.element_size() {
        // Never trust the shape for an allocation larger than the text could fill (a number
        // and its comma take two bytes at least).
        Some(size) => (expected as usize)
            .min(rest.len() / 2 + 1)
            .saturating_mul(size),
        None => rest.len(),
    };
    let mut out = Vec::with_capacity(capacity);
    let mut count = 0u64;
    walk(parser, 1, max_depth, &mut |p: &mut Parser<'_>| {
        if count == expected {
            return Err(DataError::TooMany);
        }
        count += 1;
        element(p, datatype, &mut out)
    })?;
    if count < expected {
        return Err(DataError::TooFew);
    }
    Ok(out)
}

/// Visits every scalar of a (possibly nested) array in row-major order.
fn walk<'a, F>(
    p: &mut Parser<'a>,
    depth: u32,
    max_depth: u32,
    visit: &mut F,
) -> Result<(), DataError>
where
    F: FnMut(&mut Parser<'a>) -> Result<(), DataError>,
{
    if depth > max_depth {
        return Err(DataError::Json(JsonError::TooDeep { limit: max_depth }));
    }
    p.skip_ws();
    if p.peek() != Some(b'[') {
        return visit(p);
    }
    p.pos += 1;
    p.skip_ws();
    if p.peek() == Some(b']') {
        p.pos += 1;
        return Ok(());
    }
    loop {
        p.skip_ws();
        if p.peek() == Some(b'[') {
            walk(p, depth + 1, max_depth, visit)?;
        } else {
            visit(p)?;
        }
        p.skip_ws();
        match p.peek() {
            Some(b',') => p.pos += 1,
            Some(b']') => {
                p.pos += 1;
                return Ok(());
            }
            _ => {
                return Err(DataError::Json(
                    p.err("Missing a comma or ']' after an array element."),
                ));
            }
        }
    }
}

const NOT_BOOL: &str = "attempt to access JSON non-boolean as boolean";
const NOT_INT: &str = "attempt to access JSON non-signed-integer as signed-integer";
const NOT_UINT: &str = "attempt to access JSON non-unsigned-integer as unsigned-integer";
const NOT_NUMBER: &str = "attempt to access JSON non-number as double";
const NOT_STRING: &str = "attempt to access JSON non-string as string";

pub(super) fn element(
    p: &mut Parser<'_>,
    datatype: DataType,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    let first = p.peek();
    match datatype {
        DataType::Bool => {
            let v = if p.buf[p.pos..].starts_with(b"true") {
                p.pos += 4;
                1u8
            } else if p.buf[p.pos..].starts_with(b"false") {
                p.pos += 5;
                0u8
            } else {
                return Err(DataError::WrongType(NOT_BOOL));
            };
            out.push(v);
        }
        DataType::Bytes => {
            if first != Some(b'"') {
                return Err(DataError::WrongType(NOT_STRING));
            }
            let s = p.string().map_err(DataError::Json)?;
            bytes_elements::push(out, &s);
        }
        _ => {
            if !matches!(first, Some(b'-' | b'0'..=b'9' | b'N' | b'I')) {
                return Err(DataError::WrongType(match datatype {
                    DataType::Fp32 | DataType::Fp64 | DataType::Fp16 | DataType::Bf16 => NOT_NUMBER,
                    DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
                        NOT_UINT
                    }
                    _ => NOT_INT,
                }));
            }
            let n = p.number().map_err(DataError::Json)?;
            number(n, datatype, out)?;
        }
    }
    Ok(())
}

/// Stores one number. Integers narrower than 64 bits are truncated as a C cast would.
fn number(n: Number, datatype: DataType, out: &mut Vec<u8>) -> Result<(), DataError> {
    let signed = || match n {
        Number::Int(i) => Ok(i),
        Number::Uint(u) if u <= i64::MAX as u64 => Ok(u as i64),
        _ => Err(DataError::WrongType(NOT_INT)),
    };
    let unsigned = || match n {
        Number::Uint(u) => Ok(u),
        _ => Err(DataError::WrongType(NOT_UINT)),
    };
    match datatype {
        DataType::Int8 => out.push(signed()? as i8 as u8),
        DataType::Int16 => out.extend_from_slice(&(signed()? as i16).to_le_bytes()),
        DataType::Int32 => out.extend_from_slice(&(signed()? as i32).to_le_bytes()),
        DataType::Int64 => out.extend_from_slice(&signed()?.to_le_bytes()),
        DataType::Uint8 => out.push(unsigned()? as u8),
        DataType::Uint16 => out.extend_from_slice(&(unsigned()? as u16).to_le_bytes()),
        DataType::Uint32 => out.extend_from_slice(&(unsigned()? as u32).to_le_bytes()),
        DataType::Uint64 => out.extend_from_slice(&unsigned()?.to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(n.as_f64() as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&n.as_f64().to_le_bytes()),
        DataType::Bool | DataType::Bytes | DataType::Fp16 | DataType::Bf16 => {
            return Err(DataError::WrongType(NOT_NUMBER));
        }
    }
    Ok(())
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

/// Writes the elements of `data` separated by commas, with a comma before the first unless
/// `first`. The text of a large tensor is sized from the text of its first elements and
/// reserved once, where the buffer would otherwise double its way up to tens of megabytes,
/// copying itself each time (a million random FP32 values write about 20 MB).
pub(super) fn write_elements(w: &mut Writer, datatype: DataType, data: &[u8], first: bool) {
    const SAMPLE: usize = 1024;
    match datatype.element_size() {
        Some(size) if data.len() / size > 8 * SAMPLE => {
            let (head, rest) = data.split_at(SAMPLE * size);
            let before = w.buf.len();
            write_each(w, datatype, head, first);
            // One byte more per element than the sample's average: room for the spread.
            let per_element = (w.buf.len() - before) / SAMPLE + 1;
            w.buf.reserve(rest.len() / size * per_element);
            write_each(w, datatype, rest, false);
        }
        _ => write_each(w, datatype, data, first),
    }
}

fn write_each(w: &mut Writer, datatype: DataType, data: &[u8], first: bool) {
    let mut first = first;
    let mut sep = |w: &mut Writer| {
        if !std::mem::take(&mut first) {
            w.byte(b',');
        }
    };
    match datatype {
        DataType::Bool => data.iter().for_each(|&b| {
            sep(w);
            w.bool(b != 0);
        }),
        DataType::Uint8 => data.iter().for_each(|&b| {
            sep(w);
            w.u64(u64::from(b));
        }),
        DataType::Int8 => data.iter().for_each(|&b| {
            sep(w);
            w.i64(i64::from(b as i8));
        }),
        DataType::Uint16 => le_elements::<2>(data).for_each(|a| {
            sep(w);
            w.u64(u64::from(u16::from_le_bytes(a)));
        }),
        DataType::Int16 => le_elements::<2>(data).for_each(|a| {
            sep(w);
            w.i64(i64::from(i16::from_le_bytes(a)));
        }),
        DataType::Uint32 => le_elements::<4>(data).for_each(|a| {
            sep(w);
            w.u64(u64::from(u32::from_le_bytes(a)));
        }),
        DataType::Int32 => le_elements::<4>(data).for_each(|a| {
            sep(w);
            w.i64(i64::from(i32::from_le_bytes(a)));
        }),
        DataType::Uint64 => le_elements::<8>(data).for_each(|a| {
            sep(w);
            w.u64(u64::from_le_bytes(a));
        }),
        DataType::Int64 => le_elements::<8>(data).for_each(|a| {
            sep(w);
            w.i64(i64::from_le_bytes(a));
        }),
        DataType::Fp32 => le_elements::<4>(data).for_each(|a| {
            sep(w);
            w.f64(f64::from(f32::from_le_bytes(a)));
        }),
        DataType::Fp64 => le_elements::<8>(data).for_each(|a| {
            sep(w);
            w.f64(f64::from_le_bytes(a));
        }),
        DataType::Bytes => bytes_elements::iter(data)
            .map_while(Result::ok)
            .for_each(|s| {
                sep(w);
                w.string(s);
            }),
        DataType::Fp16 | DataType::Bf16 => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(raw: &str, dt: DataType, n: u64) -> Result<Vec<u8>, DataError> {
        decode(raw.as_bytes(), dt, n, 100)
    }

    #[test]
    fn decodes_nested_and_flat() {
        let flat = d("[1,2,3,4]", DataType::Int32, 4).unwrap();
        let nested = d("[[1,2],[3,4]]", DataType::Int32, 4).unwrap();
        assert_eq!(flat, nested);
        assert_eq!(flat, [1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]);
        assert_eq!(d("[true,false]", DataType::Bool, 2).unwrap(), [1, 0]);
        assert_eq!(
            d("[1.5, NaN]", DataType::Fp32, 2).unwrap()[..4],
            1.5f32.to_le_bytes()
        );
        assert_eq!(
            d("[\"a\\u0000\"]", DataType::Bytes, 1).unwrap(),
            [2, 0, 0, 0, b'a', 0]
        );
        assert_eq!(d("[300]", DataType::Uint8, 1).unwrap(), [44]);
        assert_eq!(d("[]", DataType::Fp32, 0).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn type_and_count_errors() {
        assert_eq!(
            d("[1.0]", DataType::Int32, 1),
            Err(DataError::WrongType(NOT_INT))
        );
        assert_eq!(
            d("[-1]", DataType::Uint32, 1),
            Err(DataError::WrongType(NOT_UINT))
        );
        assert_eq!(
            d("[1]", DataType::Bool, 1),
            Err(DataError::WrongType(NOT_BOOL))
        );
        assert_eq!(
            d("[1]", DataType::Bytes, 1),
            Err(DataError::WrongType(NOT_STRING))
        );
        assert_eq!(
            d("[\"1\"]", DataType::Fp32, 1),
            Err(DataError::WrongType(NOT_NUMBER))
        );
        assert_eq!(d("[1,2,3]", DataType::Int32, 2), Err(DataError::TooMany));
        assert_eq!(d("[1]", DataType::Int32, 2), Err(DataError::TooFew));
    }

    #[test]
    fn encodes_flat() {
        let mut w = Writer::default();
        encode(
            &mut w,
            DataType::Fp32,
            &[0.1f32.to_le_bytes(), 1.0f32.to_le_bytes()].concat(),
        );
        assert_eq!(
            String::from_utf8(w.buf).unwrap(),
            "[0.10000000149011612,1.0]"
        );
        let mut w = Writer::default();
        encode(&mut w, DataType::Int8, &[0xff, 1]);
        assert_eq!(String::from_utf8(w.buf).unwrap(), "[-1,1]");
    }
}
