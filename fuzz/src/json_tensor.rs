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
    let Ok(decoded) = data::decode(text, datatype, expected, MAX_DEPTH) else {
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
