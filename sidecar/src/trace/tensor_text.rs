//! A tensor's data as Triton's trace file prints it: elements joined by commas, each as C++'s
//! `std::ostream` prints its type. So `BOOL` is `0`/`1`, `INT8` and `UINT8` are characters (the
//! stream prints `char`s), floats are `%g` with 6 significant digits, `BYTES` elements are quoted,
//! and `FP16`/`BF16` print nothing. Triton writes the text into its JSON unescaped; here it is
//! escaped, so the file stays JSON whatever the data (the same text where Triton's is valid JSON).

use infergate_proto::DataType;

use crate::tensor::{Tensor, le_elements};

/// The elements Triton prints: as many as the shape holds, at most what the data has.
pub fn data(tensor: &Tensor) -> String {
    let count = tensor
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .unwrap_or(0);
    let data = &tensor.data[..];
    let mut items: Vec<String> = match tensor.datatype {
        DataType::Bool => data.iter().map(|&b| u8::from(b != 0).to_string()).collect(),
        DataType::Uint8 | DataType::Int8 => {
            data.iter().map(|&b| char::from(b).to_string()).collect()
        }
        DataType::Uint16 => texts::<2>(data, |e| u16::from_le_bytes(e).to_string()),
        DataType::Int16 => texts::<2>(data, |e| i16::from_le_bytes(e).to_string()),
        DataType::Uint32 => texts::<4>(data, |e| u32::from_le_bytes(e).to_string()),
        DataType::Int32 => texts::<4>(data, |e| i32::from_le_bytes(e).to_string()),
        DataType::Uint64 => texts::<8>(data, |e| u64::from_le_bytes(e).to_string()),
        DataType::Int64 => texts::<8>(data, |e| i64::from_le_bytes(e).to_string()),
        DataType::Fp32 => texts::<4>(data, |e| general(f64::from(f32::from_le_bytes(e)))),
        DataType::Fp64 => texts::<8>(data, |e| general(f64::from_le_bytes(e))),
        DataType::Fp16 | DataType::Bf16 => Vec::new(),
        DataType::Bytes => strings(data),
    };
    items.truncate(count);
    items.join(",")
}

/// Fixed-size little-endian elements, each as `text` prints it.
fn texts<const N: usize>(data: &[u8], text: impl Fn([u8; N]) -> String) -> Vec<String> {
    le_elements::<N>(data).map(text).collect()
}

/// `BYTES` elements, each in double quotes; a cut element ends the list, as Triton stops there.
fn strings(mut data: &[u8]) -> Vec<String> {
    let mut items = Vec::new();
    while let Some((len, rest)) = data.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some(element) = rest.get(..len) else {
            break;
        };
        items.push(format!("\"{}\"", String::from_utf8_lossy(element)));
        data = &rest[len..];
    }
    items
}

/// A number as C++ streams print a floating-point value by default (`%g`, 6 significant
/// digits): `1`, `0.5`, `1.5e-05`, `1e+06`, `inf`, `-nan`.
pub fn general(value: f64) -> String {
    const DIGITS: i32 = 6;
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_string();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // The exponent after rounding to 6 digits decides between fixed and scientific notation.
    let scientific = format!("{:.*e}", (DIGITS - 1) as usize, value);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..DIGITS).contains(&exponent) {
        let fixed = format!("{:.*}", (DIGITS - 1 - exponent) as usize, value);
        trim_zeros(&fixed).to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exponent.abs())
    }
}

/// `%g` drops trailing zeros of the fraction, and the point when nothing is left after it.
fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn tensor(datatype: DataType, shape: Vec<i64>, data: Vec<u8>) -> Tensor {
        Tensor::new("T", datatype, shape, Bytes::from(data))
    }

    #[test]
    fn floats_print_as_cxx_streams_print_them() {
        for (value, text) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1.0 / 3.0, "0.333333"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.000015, "1.5e-05"),
            (1e100, "1e+100"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (0.0, "0"),
            (-0.0, "-0"),
        ] {
            assert_eq!(general(value), text, "{value}");
        }
        assert_eq!(general(f64::from(0.1f32)), "0.1");
    }

    #[test]
    fn each_datatype_as_triton_prints_it() {
        let ints: Vec<u8> = [1i32, -2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(data(&tensor(DataType::Int32, vec![1, 3], ints)), "1,-2,3");
        let floats: Vec<u8> = [1.5f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(data(&tensor(DataType::Fp32, vec![2], floats)), "1.5,2");
        assert_eq!(
            data(&tensor(DataType::Bool, vec![3], vec![1, 0, 7])),
            "1,0,1"
        );
        assert_eq!(
            data(&tensor(DataType::Uint8, vec![2], vec![b'h', b'i'])),
            "h,i"
        );
        assert_eq!(data(&tensor(DataType::Fp16, vec![1], vec![0, 60])), "");
        let mut strings = Vec::new();
        for s in [&b"ab"[..], b"c"] {
            strings.extend_from_slice(&(s.len() as u32).to_le_bytes());
            strings.extend_from_slice(s);
        }
        assert_eq!(
            data(&tensor(DataType::Bytes, vec![2], strings.clone())),
            r#""ab","c""#
        );
        // A cut element ends the list.
        strings.extend_from_slice(&9u32.to_le_bytes());
        assert_eq!(
            data(&tensor(DataType::Bytes, vec![3], strings)),
            r#""ab","c""#
        );
        // No more elements than the shape holds.
        assert_eq!(data(&tensor(DataType::Bool, vec![0], vec![1])), "");
    }
}
