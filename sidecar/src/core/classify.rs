//! The classification extension: replace an output by its top-k classes, per batch row for
//! batching models, as `"<value>:<index>[:<label>]"` BYTES elements, formatted the way Triton's
//! C++ (`std::to_string`) formats them.

use bytes::Bytes;
use infergate_proto::DataType;

use super::cxx_sort;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, bytes_elements, le_elements};

/// Rows longer than this are refused, as Triton refuses them.
const MAX_CLASSES: u64 = 1_000_000;

/// Top-`k` classes of `tensor`. `batching`: the first dimension is the batch.
pub fn classify(
    tensor: &Tensor,
    k: u32,
    batching: bool,
    labels: Option<&[String]>,
) -> Result<Tensor> {
    let values = values(tensor)?;
    let (rows, per_row) = if batching && !tensor.shape.is_empty() {
        let b = u64::try_from(tensor.shape[0].max(0)).unwrap_or(0);
        let n = (values.len() as u64).checked_div(b).unwrap_or(0);
        (b, n)
    } else {
        (1, values.len() as u64)
    };
    if per_row > MAX_CLASSES {
        return Err(Error::invalid_arg("classification output tensor too large"));
    }
    let take = u64::from(k).min(per_row) as usize;
    let per_row = per_row as usize;
    let mut out = Vec::new();
    let mut order: Vec<usize> = Vec::with_capacity(per_row);
    for row in 0..rows as usize {
        let row_values = &values[row * per_row..(row + 1) * per_row];
        order.clear();
        order.extend(0..per_row);
        // Triton's order: std::sort with `value[a] > value[b]`, which is not stable (equal
        // values and NaN end where its algorithm leaves them), so the same algorithm.
        cxx_sort::sort(&mut order, |&a, &b| row_values[a] > row_values[b]);
        for &index in &order[..take] {
            let mut text = row_values[index].to_string();
            text.push(':');
            text.push_str(&index.to_string());
            if let Some(label) = labels.and_then(|l| l.get(index)).filter(|l| !l.is_empty()) {
                text.push(':');
                text.push_str(label);
            }
            bytes_elements::push(&mut out, text.as_bytes());
        }
    }
    let shape = if batching && !tensor.shape.is_empty() {
        vec![rows as i64, take as i64]
    } else {
        vec![take as i64]
    };
    Ok(Tensor::new(
        tensor.name.clone(),
        DataType::Bytes,
        shape,
        Bytes::from(out),
    ))
}

/// A class value, kept in its own type so it compares and prints as Triton does.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Class {
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Class::Int(v) => write!(f, "{v}"),
            Class::Uint(v) => write!(f, "{v}"),
            // printf("%f"): fixed notation, six decimals; glibc spells NaN and infinity in
            // lower case, with a sign when negative.
            Class::Float(v) if v.is_nan() => {
                f.write_str(if v.is_sign_negative() { "-nan" } else { "nan" })
            }
            Class::Float(v) if v.is_infinite() => {
                f.write_str(if *v < 0.0 { "-inf" } else { "inf" })
            }
            Class::Float(v) => write!(f, "{v:.6}"),
        }
    }
}

fn values(t: &Tensor) -> Result<Vec<Class>> {
    let d = &t.data;
    Ok(match t.datatype {
        DataType::Int8 => d.iter().map(|&b| Class::Int(i64::from(b as i8))).collect(),
        DataType::Uint8 => d.iter().map(|&b| Class::Uint(u64::from(b))).collect(),
        DataType::Int16 => le_elements::<2>(d)
            .map(|a| Class::Int(i64::from(i16::from_le_bytes(a))))
            .collect(),
        DataType::Uint16 => le_elements::<2>(d)
            .map(|a| Class::Uint(u64::from(u16::from_le_bytes(a))))
            .collect(),
        DataType::Int32 => le_elements::<4>(d)
            .map(|a| Class::Int(i64::from(i32::from_le_bytes(a))))
            .collect(),
        DataType::Uint32 => le_elements::<4>(d)
            .map(|a| Class::Uint(u64::from(u32::from_le_bytes(a))))
            .collect(),
        DataType::Int64 => le_elements::<8>(d)
            .map(|a| Class::Int(i64::from_le_bytes(a)))
            .collect(),
        DataType::Uint64 => le_elements::<8>(d)
            .map(|a| Class::Uint(u64::from_le_bytes(a)))
            .collect(),
        DataType::Fp32 => le_elements::<4>(d)
            .map(|a| Class::Float(f64::from(f32::from_le_bytes(a))))
            .collect(),
        DataType::Fp64 => le_elements::<8>(d)
            .map(|a| Class::Float(f64::from_le_bytes(a)))
            .collect(),
        DataType::Bool | DataType::Fp16 | DataType::Bf16 | DataType::Bytes => {
            return Err(Error::invalid_arg(format!(
                "class result not available for output due to unsupported type '{}'",
                t.datatype
            )));
        }
    })
}

/// Parses a label file: one label per line, the 0-based line number is the class index.
pub fn parse_labels(text: &str) -> Vec<String> {
    let mut labels: Vec<String> = text.split('\n').map(str::to_string).collect();
    if labels.last().is_some_and(String::is_empty) {
        labels.pop();
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp32(shape: Vec<i64>, v: &[f32]) -> Tensor {
        Tensor::new(
            "OUTPUT0",
            DataType::Fp32,
            shape,
            Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()),
        )
    }

    fn strings(t: &Tensor) -> Vec<String> {
        bytes_elements::iter(&t.data)
            .map(|e| String::from_utf8(e.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn top_k_per_row_with_labels() {
        let labels = parse_labels("label0\nlabel1\n\nlabel3\n");
        let t = fp32(vec![2, 4], &[0.1, 3.3, 3.3, 0.5, 4.0, 3.0, 2.0, 1.0]);
        let out = classify(&t, 3, true, Some(&labels)).unwrap();
        assert_eq!(out.shape, vec![2, 3]);
        assert_eq!(out.datatype, DataType::Bytes);
        assert_eq!(
            strings(&out),
            [
                "3.300000:1:label1",
                "3.300000:2",
                "0.500000:3:label3",
                "4.000000:0:label0",
                "3.000000:1:label1",
                "2.000000:2"
            ]
        );
    }

    #[test]
    fn whole_tensor_when_not_batching_and_k_above_count() {
        let t = Tensor::new(
            "OUTPUT0",
            DataType::Int8,
            vec![3],
            Bytes::from(vec![0xfb, 7, 2]),
        );
        let out = classify(&t, 10, false, None).unwrap();
        assert_eq!(out.shape, vec![3]);
        assert_eq!(strings(&out), ["7:1", "2:2", "-5:0"]);
    }

    #[test]
    fn float_formatting_and_nan() {
        let t = fp32(vec![4], &[f32::NAN, 1e10, f32::NEG_INFINITY, 1e-7]);
        let out = classify(&t, 4, false, None).unwrap();
        // NaN compares false with everything, so the insertion sort leaves it first (Triton
        // 2.51 answers the same).
        assert_eq!(
            strings(&out),
            ["nan:0", "10000000000.000000:1", "0.000000:3", "-inf:2"]
        );
    }

    #[test]
    fn rejected_types() {
        let t = Tensor::new("OUTPUT0", DataType::Bool, vec![1], Bytes::from(vec![1]));
        let err = classify(&t, 1, false, None).unwrap_err();
        assert_eq!(
            err.message,
            "class result not available for output due to unsupported type 'BOOL'"
        );
    }
}
