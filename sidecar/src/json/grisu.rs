//! The digits rapidjson writes for a double: Grisu2 (Loitsch, "Printing Floating-Point Numbers
//! Quickly and Accurately with Integers", 2010), as rapidjson's `internal::dtoa` runs it.
//!
//! Grisu2 finds a short digit string inside the double's rounding interval, but not always the
//! shortest nor the closest one: for about a quarter of FP32 values (widened to double) its last
//! digit differs from the shortest-closest digits other libraries (ryu) print. Both read back to
//! the same number; Triton's JSON carries Grisu2's, and so does the sidecar's, byte for byte.
//! The steps, the rounding of the 64x64-bit products and the cached powers of ten are
//! rapidjson 1.1's; the table below is 10^k for k = -348, -340, …, 340, each as a 64-bit significand
//! rounded to nearest and a binary exponent (computed exactly, and equal to rapidjson's).

/// A value `f × 2^e` with a 64-bit significand ("do-it-yourself floating point").
#[derive(Clone, Copy)]
struct DiyFp {
    f: u64,
    e: i32,
}

impl DiyFp {
    fn of(value: f64) -> DiyFp {
        let bits = value.to_bits();
        let biased = ((bits >> 52) & 0x7ff) as i32;
        let significand = bits & ((1 << 52) - 1);
        if biased != 0 {
            DiyFp {
                f: significand | (1 << 52),
                e: biased - 1075,
            }
        } else {
            DiyFp {
                f: significand,
                e: -1074,
            }
        }
    }

    /// The product's upper 64 bits, rounded by the lower half's top bit.
    fn times(self, rhs: DiyFp) -> DiyFp {
        let p = u128::from(self.f) * u128::from(rhs.f);
        let mut h = (p >> 64) as u64;
        if (p as u64) & (1 << 63) != 0 {
            h += 1;
        }
        DiyFp {
            f: h,
            e: self.e + rhs.e + 64,
        }
    }

    fn normalize(self) -> DiyFp {
        let s = self.f.leading_zeros() as i32;
        DiyFp {
            f: self.f << s,
            e: self.e - s,
        }
    }

    /// The upper and lower boundaries of the double's rounding interval, on the same exponent.
    fn boundaries(self) -> (DiyFp, DiyFp) {
        let mut plus = DiyFp {
            f: (self.f << 1) + 1,
            e: self.e - 1,
        };
        while plus.f & (1 << 53) == 0 {
            plus.f <<= 1;
            plus.e -= 1;
        }
        plus.f <<= 10;
        plus.e -= 10;
        let mut minus = if self.f == 1 << 52 {
            DiyFp {
                f: (self.f << 2) - 1,
                e: self.e - 2,
            }
        } else {
            DiyFp {
                f: (self.f << 1) - 1,
                e: self.e - 1,
            }
        };
        minus.f <<= minus.e - plus.e;
        minus.e = plus.e;
        (minus, plus)
    }
}

const CACHED_POWERS: [(u64, i32); 87] = [
    (0xfa8fd5a0081c0288, -1220),
    (0xbaaee17fa23ebf76, -1193),
    (0x8b16fb203055ac76, -1166),
    (0xcf42894a5dce35ea, -1140),
    (0x9a6bb0aa55653b2d, -1113),
    (0xe61acf033d1a45df, -1087),
    (0xab70fe17c79ac6ca, -1060),
    (0xff77b1fcbebcdc4f, -1034),
    (0xbe5691ef416bd60c, -1007),
    (0x8dd01fad907ffc3c, -980),
    (0xd3515c2831559a83, -954),
    (0x9d71ac8fada6c9b5, -927),
    (0xea9c227723ee8bcb, -901),
    (0xaecc49914078536d, -874),
    (0x823c12795db6ce57, -847),
    (0xc21094364dfb5637, -821),
    (0x9096ea6f3848984f, -794),
    (0xd77485cb25823ac7, -768),
    (0xa086cfcd97bf97f4, -741),
    (0xef340a98172aace5, -715),
    (0xb23867fb2a35b28e, -688),
    (0x84c8d4dfd2c63f3b, -661),
    (0xc5dd44271ad3cdba, -635),
    (0x936b9fcebb25c996, -608),
    (0xdbac6c247d62a584, -582),
    (0xa3ab66580d5fdaf6, -555),
    (0xf3e2f893dec3f126, -529),
    (0xb5b5ada8aaff80b8, -502),
    (0x87625f056c7c4a8b, -475),
    (0xc9bcff6034c13053, -449),
    (0x964e858c91ba2655, -422),
    (0xdff9772470297ebd, -396),
    (0xa6dfbd9fb8e5b88f, -369),
    (0xf8a95fcf88747d94, -343),
    (0xb94470938fa89bcf, -316),
    (0x8a08f0f8bf0f156b, -289),
    (0xcdb02555653131b6, -263),
    (0x993fe2c6d07b7fac, -236),
    (0xe45c10c42a2b3b06, -210),
    (0xaa242499697392d3, -183),
    (0xfd87b5f28300ca0e, -157),
    (0xbce5086492111aeb, -130),
    (0x8cbccc096f5088cc, -103),
    (0xd1b71758e219652c, -77),
    (0x9c40000000000000, -50),
    (0xe8d4a51000000000, -24),
    (0xad78ebc5ac620000, 3),
    (0x813f3978f8940984, 30),
    (0xc097ce7bc90715b3, 56),
    (0x8f7e32ce7bea5c70, 83),
    (0xd5d238a4abe98068, 109),
    (0x9f4f2726179a2245, 136),
    (0xed63a231d4c4fb27, 162),
    (0xb0de65388cc8ada8, 189),
    (0x83c7088e1aab65db, 216),
    (0xc45d1df942711d9a, 242),
    (0x924d692ca61be758, 269),
    (0xda01ee641a708dea, 295),
    (0xa26da3999aef774a, 322),
    (0xf209787bb47d6b85, 348),
    (0xb454e4a179dd1877, 375),
    (0x865b86925b9bc5c2, 402),
    (0xc83553c5c8965d3d, 428),
    (0x952ab45cfa97a0b3, 455),
    (0xde469fbd99a05fe3, 481),
    (0xa59bc234db398c25, 508),
    (0xf6c69a72a3989f5c, 534),
    (0xb7dcbf5354e9bece, 561),
    (0x88fcf317f22241e2, 588),
    (0xcc20ce9bd35c78a5, 614),
    (0x98165af37b2153df, 641),
    (0xe2a0b5dc971f303a, 667),
    (0xa8d9d1535ce3b396, 694),
    (0xfb9b7cd9a4a7443c, 720),
    (0xbb764c4ca7a44410, 747),
    (0x8bab8eefb6409c1a, 774),
    (0xd01fef10a657842c, 800),
    (0x9b10a4e5e9913129, 827),
    (0xe7109bfba19c0c9d, 853),
    (0xac2820d9623bf429, 880),
    (0x80444b5e7aa7cf85, 907),
    (0xbf21e44003acdd2d, 933),
    (0x8e679c2f5e44ff8f, 960),
    (0xd433179d9c8cb841, 986),
    (0x9e19db92b4e31ba9, 1013),
    (0xeb96bf6ebadf77d9, 1039),
    (0xaf87023b9bf0ee6b, 1066),
];

const POW10: [u64; 20] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
    10_000_000_000_000_000_000,
];

/// The cached power of ten that brings a value with binary exponent `e` into range, and the
/// decimal exponent K it stands for (the digits then mean digits × 10^K).
fn cached_power(e: i32) -> (DiyFp, i32) {
    let k = ceil_log10_pow2(-61 - e) + 347;
    let index = ((k >> 3) + 1) as usize;
    let (f, e) = CACHED_POWERS[index];
    (DiyFp { f, e }, -(-348 + ((index as i32) << 3)))
}

/// ⌈x·log10(2)⌉, as rapidjson computes it in floating point, with integers: 315653 / 2^20
/// is log10(2) closely enough that the floor is exact for |x| < 2,600, and x·log10(2) is an
/// integer only at x = 0 (the tests compare the two over every exponent a double has).
fn ceil_log10_pow2(x: i32) -> i32 {
    let floor = (x * 315_653) >> 20;
    if x == 0 { 0 } else { floor + 1 }
}

/// Steps the last digit down while that brings the digits closer to the value and keeps them
/// inside the interval.
fn round_weed(digits: &mut [u8], delta: u64, mut rest: u64, ten_kappa: u64, wp_w: u64) {
    // rapidjson's unsigned arithmetic wraps; so does this.
    while rest < wp_w
        && delta.wrapping_sub(rest) >= ten_kappa
        && (rest.wrapping_add(ten_kappa) < wp_w
            || wp_w.wrapping_sub(rest) > rest.wrapping_add(ten_kappa).wrapping_sub(wp_w))
    {
        if let Some(last) = digits.last_mut() {
            *last -= 1;
        }
        rest += ten_kappa;
    }
}

fn decimal_digits(n: u32) -> u32 {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1_000..=9_999 => 4,
        10_000..=99_999 => 5,
        100_000..=999_999 => 6,
        1_000_000..=9_999_999 => 7,
        10_000_000..=99_999_999 => 8,
        _ => 9,
    }
}

/// The fraction part of rapidjson's digit generation: what is left of the upper boundary
/// (p2, below 2^e) and the interval's width (delta), both scaled by 2^e, and the digits
/// written so far.
struct Fraction {
    p2: u64,
    delta: u64,
    one_e: i32,
    len: usize,
    kappa: i32,
}

impl Fraction {
    /// Writes the next N digits (N up to 8) when none of them can end the search, and says
    /// whether it did. After j more digits the one-at-a-time loop stops when
    /// p2·10^j mod 2^e < delta·10^j; scaled by 10^(N-j) that is
    /// (the last N-j of the N digits)·2^e + (p2·10^N mod 2^e) < delta·10^N, whose left side
    /// only shrinks as j grows. So if the remainder after all N digits is not below
    /// delta·10^N, no j ends the search, and the N digits are the ones the loop would write.
    #[inline(always)]
    fn block<const N: usize>(&mut self, buf: &mut [u8; 24]) -> bool {
        let Some(out) = buf.get_mut(self.len..self.len + N) else {
            return false;
        };
        let scale = u128::from(POW10[N]);
        let product = u128::from(self.p2) * scale;
        let remainder = (product as u64) & ((1u64 << self.one_e) - 1);
        if u128::from(remainder) < u128::from(self.delta) * scale {
            return false;
        }
        out.copy_from_slice(&eight_digits((product >> self.one_e) as u32)[8 - N..]);
        self.len += N;
        self.kappa -= N as i32;
        self.p2 = remainder;
        // Below the remainder, which is below 2^e: no overflow.
        self.delta *= POW10[N];
        true
    }
}

/// `n` (below 10^8) as eight ASCII digits, with leading zeros: the four halves' digits
/// computed side by side in the lanes of one 64-bit integer instead of one division after
/// another. Each multiply-and-shift is an exact division for the lane's range (x·10486 >> 20
/// is x / 100 below 10^4, x·103 >> 10 is x / 10 below 100), and no lane's product reaches into
/// the next.
#[inline(always)]
fn eight_digits(n: u32) -> [u8; 8] {
    // Lanes of 32 bits: the first four digits in the low lane (the first byte in memory).
    let fours = u64::from(n / 10_000) | (u64::from(n % 10_000) << 32);
    let hundreds_high = ((fours * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let hundreds_low = fours - 100 * hundreds_high;
    // Lanes of 16 bits, each below 100, in the order of the digits.
    let pairs = hundreds_high | (hundreds_low << 16);
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    let ones = pairs - 10 * tens;
    (tens | (ones << 8) | 0x3030_3030_3030_3030).to_le_bytes()
}

/// The leading digit of `p` for `unit` (a power of ten); `p` keeps the rest.
#[inline(always)]
fn split(p: &mut u32, unit: u32) -> u32 {
    let d = *p / unit;
    *p %= unit;
    d
}

/// The Grisu2 digits of a positive finite `value` into `buf` (at most 18 of them), and the
/// decimal exponent K: value ≈ digits × 10^K.
pub fn digits(value: f64, buf: &mut [u8; 24]) -> (usize, i32) {
    generate(value, buf, true)
}

/// Grisu2 as rapidjson runs it, digit by digit, or with `in_blocks` the same digits in fewer
/// steps where they cannot end the search: the integer part's at once, the fraction's eight
/// at a time, then four and two (the tests compare the two ways).
#[inline(always)]
fn generate(value: f64, buf: &mut [u8; 24], in_blocks: bool) -> (usize, i32) {
    let v = DiyFp::of(value);
    let (w_minus, w_plus) = v.boundaries();
    let (c_mk, mut k) = cached_power(w_plus.e);
    let w = v.normalize().times(c_mk);
    let mut wp = w_plus.times(c_mk);
    let mut wm = w_minus.times(c_mk);
    wm.f += 1;
    wp.f -= 1;
    let delta = wp.f - wm.f;

    // Digit generation from the upper boundary.
    let one_e = -wp.e;
    let one_f = 1u64 << one_e;
    let wp_w = wp.f - w.f;
    let mut p1 = (wp.f >> one_e) as u32;
    let mut p2 = wp.f & (one_f - 1);
    let mut len = 0usize;
    // What is left after any integer digit is at least p2: when p2 alone is above delta no
    // integer digit can end the search, and p1's digits are written at once (p1 is below 10^9
    // with rapidjson's cached powers, and not 0 since the boundary is normalized).
    let mut kappa = if in_blocks && p2 > delta && p1 != 0 {
        len = decimal_digits(p1) as usize;
        if len == 9 {
            buf[0] = b'0' + (p1 / 100_000_000) as u8;
            buf[1..9].copy_from_slice(&eight_digits(p1 % 100_000_000));
        } else {
            // The eight digits less the leading zeros, and zeros after them (which the digits
            // that follow overwrite).
            let digits = u64::from_le_bytes(eight_digits(p1)) >> (8 * (8 - len));
            buf[..8].copy_from_slice(&digits.to_le_bytes());
        }
        0
    } else {
        decimal_digits(p1)
    };
    while kappa > 0 {
        // Constant divisors, so that each is a multiply and a shift.
        let d = match kappa {
            9 => split(&mut p1, 100_000_000),
            8 => split(&mut p1, 10_000_000),
            7 => split(&mut p1, 1_000_000),
            6 => split(&mut p1, 100_000),
            5 => split(&mut p1, 10_000),
            4 => split(&mut p1, 1_000),
            3 => split(&mut p1, 100),
            2 => split(&mut p1, 10),
            _ => split(&mut p1, 1),
        };
        if d != 0 || len != 0 {
            buf[len] = b'0' + d as u8;
            len += 1;
        }
        kappa -= 1;
        let rest = (u64::from(p1) << one_e) + p2;
        if rest <= delta {
            k += kappa as i32;
            round_weed(
                &mut buf[..len],
                delta,
                rest,
                POW10[kappa as usize] << one_e,
                wp_w,
            );
            return (len, k);
        }
    }
    let mut delta = delta;
    let mut kappa = 0i32;
    if in_blocks && len != 0 {
        let mut fraction = Fraction {
            p2,
            delta,
            one_e,
            len,
            kappa,
        };
        while fraction.block::<8>(buf) {}
        fraction.block::<4>(buf);
        fraction.block::<2>(buf);
        (p2, delta, len, kappa) = (fraction.p2, fraction.delta, fraction.len, fraction.kappa);
    }
    loop {
        p2 *= 10;
        delta *= 10;
        let d = (p2 >> one_e) as u8;
        if d != 0 || len != 0 {
            buf[len] = b'0' + d;
            len += 1;
        }
        p2 &= one_f - 1;
        kappa -= 1;
        if p2 < delta {
            k += kappa;
            // rapidjson 1.1 (the release Triton builds with) weeds only while fewer than 9
            // fraction digits were generated: past that it multiplies by 0, and the digits stay
            // as generated from the upper boundary (later rapidjson uses 20).
            let index = (-kappa) as usize;
            let unit = if index < 9 { POW10[index] } else { 0 };
            round_weed(&mut buf[..len], delta, p2, one_f, wp_w.wrapping_mul(unit));
            return (len, k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(value: f64) {
        let (mut fast, mut slow) = ([0u8; 24], [0u8; 24]);
        let (fast_len, fast_k) = generate(value, &mut fast, true);
        let (slow_len, slow_k) = generate(value, &mut slow, false);
        assert_eq!(
            (&fast[..fast_len], fast_k),
            (&slow[..slow_len], slow_k),
            "{value:e} ({:#x})",
            value.to_bits()
        );
    }

    #[test]
    fn digits_in_blocks_are_the_loops_digits() {
        // Every binary exponent, at its edges and in between; FP32 values over all exponents;
        // pseudo-random doubles and floats; and FP32 values with 7 significant digits, as a
        // client prints them.
        for exponent in 1..2047u64 {
            for significand in [0, 1, 2, 0x8_0000_0000_0000, (1 << 52) - 2, (1 << 52) - 1] {
                both(f64::from_bits((exponent << 52) | significand));
            }
        }
        for bits in (1..0x7f80_0000u32).step_by(997) {
            both(f64::from(f32::from_bits(bits)));
        }
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..300_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let double = f64::from_bits(state & 0x7fef_ffff_ffff_ffff);
            let float = f64::from(f32::from_bits((state >> 32) as u32 & 0x7f7f_ffff));
            let printed = format!("{:.6e}", (state >> 11) as f64 / (1u64 << 53) as f64 * 20.0);
            let printed = f64::from(printed.parse::<f32>().unwrap_or(1.0));
            for value in [double, float, printed] {
                if value > 0.0 {
                    both(value);
                }
            }
        }
    }

    #[test]
    fn integer_log_is_rapidjsons_floating_point_one() {
        // Every binary exponent a boundary of a double can have, and more.
        for e in -1200..=1100 {
            let dk = f64::from(-61 - e) * 0.301_029_995_663_981_14 + 347.0;
            let mut k = dk as i32;
            if dk - f64::from(k) > 0.0 {
                k += 1;
            }
            assert_eq!(ceil_log10_pow2(-61 - e) + 347, k, "e = {e}");
        }
    }

    #[test]
    fn eight_digits_writes_every_group() {
        for n in (0..100_000_000u32)
            .step_by(9_973)
            .chain([0, 1, 9_999, 10_000, 99_999_999])
        {
            assert_eq!(eight_digits(n), *format!("{n:08}").as_bytes(), "{n}");
        }
    }
}
