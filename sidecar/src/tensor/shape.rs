//! Element counts and byte sizes, computed with checked arithmetic.

use infergate_proto::DataType;

use crate::error::{Error, Result};

/// Why a shape has no element count, as Triton's `GetElementCount` tells them apart.
#[derive(Debug, PartialEq, Eq)]
pub enum CountError {
    /// A dimension below zero.
    InvalidDimension,
    /// A product beyond `i64::MAX`.
    Overflow,
}

/// Number of elements of `shape` (an empty shape holds one).
pub fn count_elements(shape: &[i64]) -> std::result::Result<u64, CountError> {
    let mut count: i64 = 1;
    for &dim in shape {
        if dim < 0 {
            return Err(CountError::InvalidDimension);
        }
        count = count.checked_mul(dim).ok_or(CountError::Overflow)?;
    }
    Ok(count as u64)
}

/// Number of elements of input `name`'s `shape`, refused in the words of Triton's HTTP front
/// end (which counts the elements a JSON `data` must hold before reading it).
pub fn element_count(shape: &[i64], name: &str) -> Result<u64> {
    count_elements(shape).map_err(|e| {
        let why = match e {
            CountError::InvalidDimension => "contains one or more invalid dimensions".to_string(),
            CountError::Overflow => format!(
                "causes total element count to exceed maximum size of {}",
                i64::MAX
            ),
        };
        Error::invalid_arg(format!(
            "invalid shape for input '{name}': shape {} {why}",
            format_shape(shape)
        ))
    })
}

/// Bytes of `count` elements of `element_size` bytes; `None` beyond `i64::MAX`, the most Triton
/// sizes.
pub fn checked_byte_size(count: u64, element_size: usize) -> Option<u64> {
    count
        .checked_mul(element_size as u64)
        .filter(|b| *b <= i64::MAX as u64)
}

/// Byte size of `count` fixed-size elements of input `name`; `None` for BYTES.
pub fn byte_size(datatype: DataType, count: u64, name: &str) -> Result<Option<u64>> {
    match datatype.element_size() {
        None => Ok(None),
        Some(size) => checked_byte_size(count, size).map(Some).ok_or_else(|| {
            Error::invalid_arg(format!(
                "byte size overflow for input '{name}': element count ({count}) * data type size ({size}) exceeds maximum allowed size ({})",
                i64::MAX
            ))
        }),
    }
}

/// Bytes of a fixed-size tensor of `shape`, for sizing buffers: `None` for BYTES, a negative
/// dimension or an overflow (callers that must explain why use the two functions above).
pub fn fixed_byte_size(datatype: DataType, shape: &[i64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(datatype.element_size()? as u64, |acc, &d| {
            acc.checked_mul(u64::try_from(d).ok()?)
        })
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
        let err = element_count(&[1 << 40, 1 << 40], "a").unwrap_err();
        assert!(
            err.message.contains(
                "causes total element count to exceed maximum size of 9223372036854775807"
            )
        );
        assert!(element_count(&[-1], "x").is_err());
    }

    #[test]
    fn fixed_byte_sizes() {
        assert_eq!(fixed_byte_size(DataType::Fp32, &[2, 8]), Some(64));
        assert_eq!(fixed_byte_size(DataType::Fp32, &[]), Some(4));
        assert_eq!(fixed_byte_size(DataType::Bytes, &[2]), None);
        assert_eq!(fixed_byte_size(DataType::Int8, &[-1, 4]), None);
        assert_eq!(fixed_byte_size(DataType::Fp64, &[1 << 62, 4]), None);
    }

    #[test]
    fn bytes() {
        assert_eq!(byte_size(DataType::Fp32, 4, "x").unwrap(), Some(16));
        assert_eq!(byte_size(DataType::Bytes, 4, "x").unwrap(), None);
        let err = byte_size(DataType::Fp64, 1 << 61, "INPUT0").unwrap_err();
        assert_eq!(
            err.message,
            "byte size overflow for input 'INPUT0': element count (2305843009213693952) * data type size (8) exceeds maximum allowed size (9223372036854775807)"
        );
    }
}
