use super::*;

fn f(v: f64) -> String {
    let mut out = Vec::new();
    write_f64(&mut out, v);
    String::from_utf8(out).unwrap()
}

#[test]
fn rapidjson_layout() {
    assert_eq!(f(1.0), "1.0");
    assert_eq!(f(-2.5), "-2.5");
    assert_eq!(f(0.0), "0.0");
    assert_eq!(f(f64::from(0.1f32)), "0.10000000149011612");
    assert_eq!(f(100.0), "100.0");
    assert_eq!(f(1e20), "100000000000000000000.0");
    assert_eq!(f(1e21), "1e21");
    assert_eq!(f(1.5e22), "1.5e22");
    assert_eq!(f(0.0001), "0.0001");
    assert_eq!(f(1e-7), "1e-7");
    assert_eq!(f(1.25e-7), "1.25e-7");
    assert_eq!(f(123.456), "123.456");
    assert_eq!(f(-7.0), "-7.0");
    assert_eq!(f(999_999_999_999_999.0), "999999999999999.0");
    assert_eq!(f(1e15), "1000000000000000.0");
    assert_eq!(f(f64::NAN), "NaN");
    assert_eq!(f(f64::NEG_INFINITY), "-Infinity");
}

/// Grisu2's digits and rapidjson's layout alone, for comparison with the shortcuts.
fn searched(v: f64) -> String {
    let mut buf = [0u8; 24];
    let (len, k) = super::super::grisu::digits(v.abs(), &mut buf);
    let mut out = Vec::new();
    if v.is_sign_negative() {
        out.push(b'-');
    }
    prettify(&mut out, &buf, len, k);
    String::from_utf8(out).unwrap()
}

#[test]
fn shortcuts_write_what_the_search_finds() {
    assert_eq!(f(12.5), "12.5");
    assert_eq!(f(-0.375), "-0.375");
    assert_eq!(f(0.5e-6), "5e-7");
    assert_eq!(f(2.0f64.powi(-20)), "9.5367431640625e-7");
    // Every FP32 value in a spread over all exponents, as an FP32 tensor is written, and
    // halves, quarters, … of every size, each checked against Grisu2.
    let mut shortcut = 0;
    for bits in (0..u32::MAX).step_by(4093) {
        let v = f64::from(f32::from_bits(bits));
        if !v.is_finite() || v == 0.0 {
            continue;
        }
        let mut buf = [0u8; 24];
        if dyadic_digits(v.abs(), binary_fraction_digits(v.abs()), &mut buf).is_some() {
            shortcut += 1;
        }
        assert_eq!(f(v), searched(v), "{v:e} ({bits:#x})");
    }
    assert!(
        shortcut > 10_000,
        "the shortcut took only {shortcut} values"
    );
    // Either side of the plain-decimal range's edges (rapidjson writes no exponent from
    // 10^-6 up to 10^21).
    for (v, text) in [
        (1e-5, "0.00001"),
        (1.2345e-5, "0.000012345"),
        (-1.2345e-6, "-0.0000012345"),
        (1.2345e-7, "1.2345e-7"),
        (0.1, "0.1"),
        (1.2345e15, "1234500000000000.0"),
        (9_999_999_999_999_998.0, "9999999999999998.0"),
        (1.2345e16, "12345000000000000.0"),
        (1.2345e20, "123450000000000000000.0"),
        // Grisu2 as rapidjson 1.1 runs it stops short of the shortest digits here; Triton
        // writes the same.
        (1.2345e21, "1.2344999999999999e21"),
        (1e16, "10000000000000000.0"),
    ] {
        assert_eq!(f(v), text);
        assert_eq!(f(v), searched(v), "{v:e}");
    }
    for edge in [1e-5f64, 1e16] {
        for v in [edge.next_down(), edge, edge.next_up()] {
            assert_eq!(f(v), searched(v), "{v:e}");
        }
    }
    for whole in [1u64, 3, 999, 123_456_789, 999_999_999_999_999] {
        for f in 1..=22 {
            let v = whole as f64 / 2f64.powi(f);
            assert_eq!(self::f(v), searched(v), "{v:e}");
            assert_eq!(self::f(-v), searched(-v), "{v:e}");
        }
    }
}

#[test]
fn the_point_goes_after_the_integer_digits() {
    for len in 2..=18usize {
        for integer_digits in 1..len.min(8) {
            let digits: Vec<u8> = (0..len).map(|i| b'1' + (i % 9) as u8).collect();
            let mut buf = [0u8; 24];
            buf[..len].copy_from_slice(&digits);
            // Text already in the buffer stays as it is.
            let mut moved = b"[7,".to_vec();
            write_with_point(&mut moved, &buf, len, integer_digits);
            let laid_out = [
                &b"[7,"[..],
                &digits[..integer_digits],
                b".",
                &digits[integer_digits..],
            ]
            .concat();
            assert_eq!(
                moved, laid_out,
                "{len} digits, {integer_digits} before the point"
            );
        }
    }
}

#[test]
fn writes_what_triton_writes() {
    // Doubles and the text Triton 2.51's JSON gave each (tests/data/rapidjson_doubles.py).
    let table = include_str!("../../../tests/data/rapidjson_doubles.txt");
    let mut checked = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let (bits, text) = line.split_once(" | ").expect("a line of the table");
        let v = f64::from_bits(u64::from_str_radix(bits, 16).expect("hex bits"));
        assert_eq!(f(v), text, "{v:e} ({bits})");
        checked += 1;
    }
    assert!(checked > 3000, "the table has {checked} rows");
}

#[test]
fn round_trips() {
    for v in [
        3.3f64,
        1.0 / 3.0,
        6.02214076e23,
        -1.7976931348623157e308,
        5e-324,
        2.2250738585072014e-308,
    ] {
        assert_eq!(f(v).parse::<f64>().unwrap(), v, "{v}");
    }
}
