//! The elements of tensor `data` arrays, one at a time: JSON numbers, booleans and strings read
//! into little-endian bytes with Triton's type rules, and written back. `data` decodes whole
//! arrays with these (and `parts` decodes pieces of large ones on several cores).

use infergate_proto::DataType;

use super::reader::{JsonError, Number, Parser, Value};
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

/// Decodes the array at the parser's position element by element into `expected` elements of
/// `datatype`, leaving the position after it. `text_len` (the text left) bounds the first
/// allocation.
pub(super) fn decode_serial(
    parser: &mut Parser<'_>,
    datatype: DataType,
    expected: u64,
    max_depth: u32,
    text_len: usize,
) -> Result<Vec<u8>, DataError> {
    let capacity = match datatype.element_size() {
        // Never trust the shape for an allocation larger than the text could fill (a number
        // and its comma take two bytes at least).
        Some(size) => (expected as usize)
            .min(text_len / 2 + 1)
            .saturating_mul(size),
        None => text_len,
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

pub(super) const NOT_BOOL: &str = "attempt to access JSON non-boolean as boolean";
pub(super) const NOT_INT: &str = "attempt to access JSON non-signed-integer as signed-integer";
pub(super) const NOT_UINT: &str = "attempt to access JSON non-unsigned-integer as unsigned-integer";
pub(super) const NOT_NUMBER: &str = "attempt to access JSON non-number as double";
pub(super) const NOT_STRING: &str = "attempt to access JSON non-string as string";

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
                return Err(DataError::WrongType(not_a_number(datatype)));
            }
            let n = p.number().map_err(DataError::Json)?;
            number(n, datatype, out)?;
        }
    }
    Ok(())
}

/// The accessor's message for a non-number where `datatype` wants a number.
fn not_a_number(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Fp32 | DataType::Fp64 | DataType::Fp16 | DataType::Bf16 => NOT_NUMBER,
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => NOT_UINT,
        _ => NOT_INT,
    }
}

/// [`element`] for a value already parsed: the same type rules, element by element.
pub(super) fn value_element(
    value: &Value<'_>,
    datatype: DataType,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    match (datatype, value) {
        (DataType::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (DataType::Bool, _) => return Err(DataError::WrongType(NOT_BOOL)),
        (DataType::Bytes, Value::String(s)) => bytes_elements::push(out, s),
        (DataType::Bytes, _) => return Err(DataError::WrongType(NOT_STRING)),
        (_, Value::Number(n)) => number(*n, datatype, out)?,
        _ => return Err(DataError::WrongType(not_a_number(datatype))),
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
