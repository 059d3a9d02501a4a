//! BYTES tensors in their wire form (4-byte little-endian length, then the element).
//!
//! Checked: counting and iterating agree on whether the buffer is well formed; a well-formed
//! buffer is rebuilt byte for byte from its elements; written as JSON strings and decoded again
//! it is unchanged when every element is UTF-8 text.

use infergate_proto::DataType;
use infergate_sidecar::json::{Writer, data};
use infergate_sidecar::tensor::bytes_elements;

pub fn run(input: &[u8]) {
    let counted = bytes_elements::count(input);
    let mut rebuilt = Vec::with_capacity(input.len());
    let mut elements = 0u64;
    let mut all_text = true;
    let mut malformed = false;
    for element in bytes_elements::iter(input) {
        match element {
            Ok(element) => {
                all_text &= std::str::from_utf8(element).is_ok();
                bytes_elements::push(&mut rebuilt, element);
                elements += 1;
            }
            Err(_) => {
                malformed = true;
                break;
            }
        }
    }
    match counted {
        Err(_) => assert!(malformed, "count fails where iteration succeeds"),
        Ok(n) => {
            assert!(!malformed, "iteration fails where count succeeds");
            assert_eq!(n, elements);
            assert_eq!(rebuilt, input, "rebuilt from its elements");
        }
    }
    if malformed || !all_text {
        return;
    }
    let mut writer = Writer::with_capacity(input.len() * 2);
    data::encode(&mut writer, DataType::Bytes, input);
    let written = writer.into_bytes();
    let again = data::decode(&written, DataType::Bytes, elements, 64).unwrap_or_else(|e| {
        panic!(
            "{} does not decode: {e:?}",
            String::from_utf8_lossy(&written)
        )
    });
    assert_eq!(again, input, "JSON round trip");
}
