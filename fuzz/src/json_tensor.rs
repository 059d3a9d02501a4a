//! JSON tensor data (`"data": [...]`, any nesting) decoded into the wire encoding for every
//! datatype JSON can carry.
//!
//! Input: one byte choosing the datatype, two bytes (little-endian) giving the element count the
//! shape declares, then the JSON text.
//!
//! Checked: a success holds exactly the declared elements; writing them back as JSON and decoding
//! again gives the same bytes (floats: when every value is finite).

use infergate_proto::DataType;
use infergate_sidecar::json::{self, Writer, data};
use infergate_sidecar::tensor::bytes_elements;

const MAX_DEPTH: u32 = 64;

pub fn run(input: &[u8]) {
    let [kind, lo, hi, text @ ..] = input else {
        return;
    };
    let datatype = DataType::ALL[usize::from(*kind) % DataType::ALL.len()];
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return; // refused before decoding: JSON cannot carry them
    }
    let expected = u64::from(u16::from_le_bytes([*lo, *hi]));
    let _ = json::parse(text, MAX_DEPTH);
    let decoded = data::decode(text, datatype, expected, MAX_DEPTH);
    in_a_request(text, datatype, expected, decoded.as_ref().ok());
    let Ok(decoded) = decoded else {
        return;
    };
    match datatype.element_size() {
        Some(size) => assert_eq!(decoded.len() as u64, expected * size as u64),
        None => assert_eq!(bytes_elements::count(&decoded), Ok(expected)),
    }
    if !finite(datatype, &decoded) {
        return;
    }
    let mut writer = Writer::with_capacity(decoded.len() * 2);
    data::encode(&mut writer, datatype, &decoded);
    let written = writer.into_bytes();
    let again = data::decode(&written, datatype, expected, MAX_DEPTH).unwrap_or_else(|e| {
        panic!(
            "{datatype:?} written as {} does not decode: {e:?}",
            String::from_utf8_lossy(&written)
        )
    });
    assert_eq!(again, decoded, "{datatype:?} round trip");
}

/// The same text as the `data` of a request's tensor, after its datatype and shape: the parser
/// decodes it while parsing. It must fail exactly as the same document fails without a `shape`
/// (a key of the same length instead, so offsets agree), where the array is only checked; and
/// what it decodes must be what the decoder makes of the text alone.
fn in_a_request(text: &[u8], datatype: DataType, expected: u64, decoded: Option<&Vec<u8>>) {
    let doc = |shape_key: &str| {
        [
            format!(r#"{{"{shape_key}":[{expected}],"datatype":"{datatype}","data":"#).as_bytes(),
            text,
            b"}",
        ]
        .concat()
    };
    let (with_shape, without) = (doc("shape"), doc("shapf"));
    let decoding = json::parse_lazy_data(&with_shape, MAX_DEPTH);
    let checking = json::parse_lazy_data(&without, MAX_DEPTH);
    match (&decoding, &checking) {
        (Err(a), Err(b)) => assert_eq!(a, b, "errors differ"),
        (Ok(_), Ok(_)) => {}
        _ => panic!("decoding while parsing gave {decoding:?}, checking gave {checking:?}"),
    }
    let Ok(value) = decoding else {
        return;
    };
    if let Some(bytes) = value
        .get("data")
        .and_then(|d| d.decoded_as(datatype, expected))
    {
        assert_eq!(Some(&bytes.to_vec()), decoded, "decoded while parsing");
    }
}

fn finite(datatype: DataType, bytes: &[u8]) -> bool {
    match datatype {
        DataType::Fp32 => bytes
            .chunks_exact(4)
            .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
        DataType::Fp64 => bytes.chunks_exact(8).all(|c| {
            f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]).is_finite()
        }),
        _ => true,
    }
}
