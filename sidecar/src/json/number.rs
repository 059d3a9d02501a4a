//! Floating-point text the way rapidjson's `Writer` produces it: the shortest digits that round
//! trip (as ryu computes them), laid out by rapidjson's rules (`1.0`, `0.0001`, `1e21`,
//! `1.5e-7`), and `NaN` / `Infinity` / `-Infinity` literals.

/// Appends `value` to `out`.
pub fn write_f64(out: &mut Vec<u8>, value: f64) {
    if value.is_nan() {
        out.extend_from_slice(b"NaN");
        return;
    }
    if value.is_infinite() {
        out.extend_from_slice(if value > 0.0 {
            b"Infinity"
        } else {
            b"-Infinity"
        });
        return;
    }
    if value == 0.0 {
        out.extend_from_slice(if value.is_sign_negative() {
            b"-0.0"
        } else {
            b"0.0"
        });
        return;
    }
    // Whole numbers below 10^15 are exact as integers and laid out as `digits.0` either way;
    // itoa is several times cheaper than the shortest-digits search.
    if value.fract() == 0.0 && value.abs() < 1e15 {
        let mut buffer = itoa::Buffer::new();
        out.extend_from_slice(buffer.format(value as i64).as_bytes());
        out.extend_from_slice(b".0");
        return;
    }
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value).as_bytes();
    // Split ryu's output into sign, significant digits and a decimal exponent k such that
    // value = digits × 10^k.
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, exp10) = match text.iter().position(|&c| c == b'e') {
        Some(i) => (&text[..i], parse_exp(&text[i + 1..])),
        None => (text, 0),
    };
    // At most 17 significant digits: a stack buffer, as this runs once per element of a tensor.
    let mut buf = [0u8; 24];
    let mut len = 0;
    let mut k = exp10;
    let mut push = |d: &[u8]| {
        let end = (len + d.len()).min(buf.len());
        buf[len..end].copy_from_slice(&d[..end - len]);
        len = end;
    };
    match mantissa.iter().position(|&c| c == b'.') {
        Some(dot) => {
            push(&mantissa[..dot]);
            push(&mantissa[dot + 1..]);
            k -= (mantissa.len() - dot - 1) as i32;
        }
        None => push(mantissa),
    }
    // Normalize: no leading zeros, no trailing zeros.
    let lead = buf[..len].iter().take_while(|&&d| d == b'0').count();
    let mut digits = &buf[lead..len];
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits = &digits[..digits.len() - 1];
        k += 1;
    }
    if negative {
        out.push(b'-');
    }
    prettify(out, digits, k);
}

fn parse_exp(text: &[u8]) -> i32 {
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let mut v: i32 = 0;
    for &d in digits {
        v = v * 10 + i32::from(d - b'0');
    }
    if neg { -v } else { v }
}

/// rapidjson's `Prettify` for `digits × 10^k`.
fn prettify(out: &mut Vec<u8>, digits: &[u8], k: i32) {
    let length = digits.len() as i32;
    let kk = length + k; // 10^(kk-1) <= v < 10^kk
    if 0 <= k && kk <= 21 {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', k as usize));
        out.extend_from_slice(b".0");
    } else if 0 < kk && kk <= 21 {
        out.extend_from_slice(&digits[..kk as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[kk as usize..]);
    } else if -6 < kk && kk <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-kk) as usize));
        out.extend_from_slice(digits);
    } else if length == 1 {
        out.push(digits[0]);
        write_exponent(out, kk - 1);
    } else {
        out.push(digits[0]);
        out.push(b'.');
        out.extend_from_slice(&digits[1..]);
        write_exponent(out, kk - 1);
    }
}

fn write_exponent(out: &mut Vec<u8>, exp: i32) {
    out.push(b'e');
    if exp < 0 {
        out.push(b'-');
    }
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(exp.unsigned_abs()).as_bytes());
}

#[cfg(test)]
mod tests {
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
}
