//! Tensor `data` arrays: decoded straight from their JSON text into little-endian bytes, and
//! encoded from bytes into a flat JSON array, with Triton's type rules.

use infergate_proto::DataType;

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

/// [`decode_at`] as the reader calls it: an array that does not decode stays text, for
/// [`decode`] to report once the request is read.
fn decode_while_parsing(
    parser: &mut Parser<'_>,
    datatype: DataType,
    expected: u64,
    max_depth: u32,
) -> Option<Vec<u8>> {
    decode_at(parser, datatype, expected, max_depth).ok()
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
mod tests {
    use super::super::elements::{NOT_BOOL, NOT_INT, NOT_NUMBER, NOT_STRING, NOT_UINT};
    use super::super::reader::parse;
    use super::*;

    fn d(raw: &str, dt: DataType, n: u64) -> Result<Vec<u8>, DataError> {
        decode(raw.as_bytes(), dt, n, 100)
    }

    #[test]
    fn data_after_datatype_and_shape_is_decoded_while_parsing() {
        fn data(doc: &str) -> Value<'_> {
            let v = parse_lazy_data(doc.as_bytes(), 100).unwrap();
            v.get("data").cloned().unwrap()
        }
        let three: Vec<u8> = [1.5f32, -2.0, 0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let decoded =
            data(r#"{"name":"x","shape":[1,3],"datatype":"FP32","data":[[1.5,-2],[0.25]]}"#);
        assert!(matches!(decoded, Value::Decoded(raw, _) if raw == b"[[1.5,-2],[0.25]]"));
        assert_eq!(
            decoded.decoded_as(DataType::Fp32, 3).as_deref(),
            Some(&three[..])
        );
        assert_eq!(decoded.decoded_as(DataType::Fp32, 4), None);
        assert_eq!(decoded.decoded_as(DataType::Fp64, 3), None);
        // Anything that would not decode as described stays text, for the decoder to report.
        for doc in [
            r#"{"data":[1.5,-2,0.25],"shape":[3],"datatype":"FP32"}"#,
            r#"{"shape":[3],"data":[1.5,-2,0.25],"datatype":"FP32"}"#,
            r#"{"shape":[4],"datatype":"FP32","data":[1.5,-2,0.25]}"#,
            r#"{"shape":[3],"datatype":"INT32","data":[1.5,-2,0.25]}"#,
            r#"{"shape":[3],"datatype":"FP16","data":[1.5,-2,0.25]}"#,
            r#"{"shape":[-3],"datatype":"FP32","data":[1.5,-2,0.25]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,"-2",0.25]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2,{}]}"#,
        ] {
            assert!(matches!(data(doc), Value::Raw(_)), "{doc}");
        }
        // Syntax errors are the full parse's, at the same offsets.
        for doc in [
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2,0.25,]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2 0.25]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2,0.2e]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2,1e999]}"#,
            r#"{"shape":[3],"datatype":"FP32","data":[1.5,-2,0.25]"#,
        ] {
            assert_eq!(
                parse_lazy_data(doc.as_bytes(), 100).unwrap_err(),
                parse(doc.as_bytes(), 100).unwrap_err(),
                "{doc}"
            );
        }
        let deep = format!(
            r#"{{"shape":[1],"datatype":"FP32","data":{}1{}}}"#,
            "[".repeat(101),
            "]".repeat(101)
        );
        assert_eq!(
            parse_lazy_data(deep.as_bytes(), 100).unwrap_err(),
            JsonError::TooDeep { limit: 100 }
        );
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
    fn a_parsed_value_decodes_with_the_same_rules() {
        let v = |text: &'static str| parse(text.as_bytes(), 100).unwrap();
        let ints: Vec<u8> = [1i32, 2, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_value(&v("[1,[2,3]]"), DataType::Int32, 3), Ok(ints));
        assert_eq!(
            decode_value(&v("7"), DataType::Int64, 1),
            Ok(7i64.to_le_bytes().to_vec())
        );
        assert_eq!(decode_value(&v("[true]"), DataType::Bool, 1), Ok(vec![1]));
        let mut bytes = Vec::new();
        crate::tensor::bytes_elements::push(&mut bytes, b"ab");
        assert_eq!(decode_value(&v(r#"["ab"]"#), DataType::Bytes, 1), Ok(bytes));
        // The count is checked before each element's type, as the text decoder checks it.
        assert_eq!(
            decode_value(&v(r#"[1,"x"]"#), DataType::Int32, 1),
            Err(DataError::TooMany)
        );
        assert_eq!(
            decode_value(&v(r#"[1,"x"]"#), DataType::Int32, 2),
            Err(DataError::WrongType(NOT_INT))
        );
        assert_eq!(
            decode_value(&v("[[]]"), DataType::Fp32, 1),
            Err(DataError::TooFew)
        );
        assert_eq!(
            decode_value(&v("[1]"), DataType::Bool, 1),
            Err(DataError::WrongType(NOT_BOOL))
        );
        assert_eq!(
            decode_value(&v("[1]"), DataType::Bytes, 1),
            Err(DataError::WrongType(NOT_STRING))
        );
        assert_eq!(
            decode_value(&v("[null]"), DataType::Uint8, 1),
            Err(DataError::WrongType(NOT_UINT))
        );
        assert_eq!(
            decode_value(&v("[\"1\"]"), DataType::Fp64, 1),
            Err(DataError::WrongType(NOT_NUMBER))
        );
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
