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
