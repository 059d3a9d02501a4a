//! Element counts and byte sizes, computed with checked arithmetic.

use infergate_proto::DataType;

use crate::error::{Error, Result};

/// Number of elements of `shape`. Negative dimensions and products beyond `i64::MAX` are errors.
pub fn element_count(shape: &[i64], what: &str) -> Result<u64> {
    let mut count: i64 = 1;
    for &dim in shape {
        if dim < 0 {
            return Err(Error::invalid_arg(format!(
                "{what} has a negative dimension {dim} in shape {}",
                format_shape(shape)
            )));
        }
        count = count.checked_mul(dim).ok_or_else(|| {
            Error::invalid_arg(format!(
                "{what} with shape {} causes total element count to exceed maximum size of {}",
                format_shape(shape),
                i64::MAX
            ))
        })?;
    }
    Ok(count as u64)
}

/// Byte size of `count` fixed-size elements; `None` for BYTES.
pub fn byte_size(datatype: DataType, count: u64, what: &str) -> Result<Option<u64>> {
    match datatype.element_size() {
        None => Ok(None),
        Some(size) => count
            .checked_mul(size as u64)
            .filter(|b| *b <= i64::MAX as u64)
            .map(Some)
            .ok_or_else(|| Error::invalid_arg(format!("byte size overflow for {what}"))),
    }
}

/// `[1,16]`, as Triton prints shapes in messages.
pub fn format_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(element_count(&[], "x").unwrap(), 1);
        assert_eq!(element_count(&[2, 3], "x").unwrap(), 6);
        assert_eq!(element_count(&[0, 3], "x").unwrap(), 0);
        let err = element_count(&[1 << 40, 1 << 40], "input 'a'").unwrap_err();
        assert!(
            err.message.contains(
                "causes total element count to exceed maximum size of 9223372036854775807"
            )
        );
        assert!(element_count(&[-1], "x").is_err());
    }

    #[test]
    fn bytes() {
        assert_eq!(byte_size(DataType::Fp32, 4, "x").unwrap(), Some(16));
        assert_eq!(byte_size(DataType::Bytes, 4, "x").unwrap(), None);
        assert!(byte_size(DataType::Fp64, i64::MAX as u64, "x").is_err());
    }
}
