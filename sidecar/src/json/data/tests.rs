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
    let decoded = data(r#"{"name":"x","shape":[1,3],"datatype":"FP32","data":[[1.5,-2],[0.25]]}"#);
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
