//! Floating-point text the way rapidjson's `Writer` produces it: Grisu2's digits (see
//! [`super::grisu`]; whole numbers and short binary fractions, whose digits are exact, without
//! running it), laid out by rapidjson's rules (`1.0`, `0.0001`, `1e21`, `1.5e-7`), and `NaN` /
//! `Infinity` / `-Infinity` literals.

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
    if value.is_sign_negative() {
        out.push(b'-');
    }
    let magnitude = value.abs();
    let fraction_bits = binary_fraction_digits(magnitude);
    // Whole numbers below 10^15 are exact as integers and laid out as `digits.0` either way;
    // itoa is several times cheaper than Grisu2.
    if fraction_bits <= 0 && magnitude < 1e15 {
        let mut buffer = itoa::Buffer::new();
        out.extend_from_slice(buffer.format(magnitude as u64).as_bytes());
        out.extend_from_slice(b".0");
        return;
    }
    let mut buf = [0u8; 24];
    let (len, k) = match dyadic_digits(magnitude, fraction_bits, &mut buf) {
        Some(found) => found,
        None => super::grisu::digits(magnitude, &mut buf),
    };
    prettify(out, &buf, len, k);
}

/// The `len` digits at the start of `digits` with a point after the first `integer_digits`
/// (1 to 7, fewer than `len`), the layout of most values in an FP32 tensor, with moves of a
/// fixed size in place of a small copy for each piece: the integer digits move one place to
/// the left as one 64-bit word, the point goes in behind them, and the text goes out as one
/// 32-byte copy cut to its length.
fn write_with_point(out: &mut Vec<u8>, digits: &[u8; 24], len: usize, integer_digits: usize) {
    let mut text = [0u8; 48];
    text[8..32].copy_from_slice(digits);
    let mut word = [0u8; 8];
    word.copy_from_slice(&text[7..15]);
    let word = u64::from_le_bytes(word);
    let shift = 8 * integer_digits as u32;
    let integer = (1u64 << shift) - 1;
    let point = 0xffu64 << shift;
    let moved = ((word >> 8) & integer) | (u64::from(b'.') << shift) | (word & !(integer | point));
    text[7..15].copy_from_slice(&moved.to_le_bytes());
    let end = out.len() + len + 1;
    out.extend_from_slice(&text[7..39]);
    out.truncate(end);
}

/// How many binary digits a positive finite `value` has after the point: 0 or fewer for a
/// whole number (from its bits, without a float conversion), `i32::MAX` for a subnormal.
fn binary_fraction_digits(value: f64) -> i32 {
    let bits = value.to_bits();
    let biased_exponent = ((bits >> 52) & 0x7ff) as i32;
    if biased_exponent == 0 {
        return i32::MAX;
    }
    let significand = (bits & ((1 << 52) - 1)) | (1 << 52);
    // value = significand × 2^(biased_exponent - 1075)
    1075 - biased_exponent - significand.trailing_zeros() as i32
}

/// Powers of ten that are exact doubles (also the reader's).
pub(crate) const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The digits of a positive `value` with `f` binary fraction digits (12.5, 0.375) whose exact
/// decimal form has at most 15 significant digits, and the decimal exponent k (value = digits ×
/// 10^k). A value with `f` binary fraction digits has exactly `f` decimal ones (2^-f = 5^f ×
/// 10^-f); no other decimal of 15 digits or fewer rounds to the same double (their spacing is
/// wider than a double's rounding interval), so this is the shortest round-trip form, and Grisu2
/// finds it too (the tests check): a bit test and one exact multiply instead of running it.
/// Covers the values an FP32 tensor often holds (halves, quarters, …); `None` for the rest.
fn dyadic_digits(value: f64, fraction_bits: i32, buf: &mut [u8; 24]) -> Option<(usize, i32)> {
    if !(1..POW10.len() as i32).contains(&fraction_bits) {
        return None;
    }
    // value × 10^f is an integer; below 2^53 the multiply is exact.
    let scaled = value * POW10[fraction_bits as usize];
    if scaled >= 1e15 {
        return None;
    }
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(scaled as u64).as_bytes();
    // The last digit is odd (an odd number times 5^f): no trailing zeros to strip.
    buf[..digits.len()].copy_from_slice(digits);
    Some((digits.len(), -fraction_bits))
}

/// rapidjson's `Prettify` for `digits × 10^k`, the `len` digits at the start of `buf`.
fn prettify(out: &mut Vec<u8>, buf: &[u8; 24], len: usize, k: i32) {
    let digits = &buf[..len];
    let length = len as i32;
    let kk = length + k; // 10^(kk-1) <= v < 10^kk
    if 0 <= k && kk <= 21 {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', k as usize));
        out.extend_from_slice(b".0");
    } else if 0 < kk && kk <= 7 {
        // (k < 0 here, so there are digits after the point.)
        write_with_point(out, buf, len, kk as usize);
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
mod tests;
