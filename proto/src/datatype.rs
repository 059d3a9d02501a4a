//! Tensor datatypes as the protocol names them (`"FP32"`) and as model configurations name them
//! (`TYPE_FP32`).

use std::fmt;

/// A tensor element type of the Open Inference Protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bf16,
    /// Variable-length byte strings, serialized as a 4-byte little-endian length and the bytes.
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bf16,
        DataType::Bytes,
    ];

    /// Parses the protocol spelling (`"INT32"`). Case-sensitive, as Triton is.
    pub fn from_protocol(name: &str) -> Option<DataType> {
        Some(match name {
            "BOOL" => DataType::Bool,
            "UINT8" => DataType::Uint8,
            "UINT16" => DataType::Uint16,
            "UINT32" => DataType::Uint32,
            "UINT64" => DataType::Uint64,
            "INT8" => DataType::Int8,
            "INT16" => DataType::Int16,
            "INT32" => DataType::Int32,
            "INT64" => DataType::Int64,
            "FP16" => DataType::Fp16,
            "FP32" => DataType::Fp32,
            "FP64" => DataType::Fp64,
            "BF16" => DataType::Bf16,
            "BYTES" => DataType::Bytes,
            _ => return None,
        })
    }

    /// The protocol spelling (`"INT32"`).
    pub fn as_protocol(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bf16 => "BF16",
            DataType::Bytes => "BYTES",
        }
    }

    /// The model-configuration enum value (`inference.DataType`), e.g. `TYPE_STRING` for BYTES.
    pub fn to_config(self) -> crate::inference::DataType {
        use crate::inference::DataType as C;
        match self {
            DataType::Bool => C::TypeBool,
            DataType::Uint8 => C::TypeUint8,
            DataType::Uint16 => C::TypeUint16,
            DataType::Uint32 => C::TypeUint32,
            DataType::Uint64 => C::TypeUint64,
            DataType::Int8 => C::TypeInt8,
            DataType::Int16 => C::TypeInt16,
            DataType::Int32 => C::TypeInt32,
            DataType::Int64 => C::TypeInt64,
            DataType::Fp16 => C::TypeFp16,
            DataType::Fp32 => C::TypeFp32,
            DataType::Fp64 => C::TypeFp64,
            DataType::Bf16 => C::TypeBf16,
            DataType::Bytes => C::TypeString,
        }
    }

    /// Maps a model-configuration enum value; `None` for `TYPE_INVALID` or unknown numbers.
    pub fn from_config(value: i32) -> Option<DataType> {
        use crate::inference::DataType as C;
        Some(match C::try_from(value).ok()? {
            C::TypeInvalid => return None,
            C::TypeBool => DataType::Bool,
            C::TypeUint8 => DataType::Uint8,
            C::TypeUint16 => DataType::Uint16,
            C::TypeUint32 => DataType::Uint32,
            C::TypeUint64 => DataType::Uint64,
            C::TypeInt8 => DataType::Int8,
            C::TypeInt16 => DataType::Int16,
            C::TypeInt32 => DataType::Int32,
            C::TypeInt64 => DataType::Int64,
            C::TypeFp16 => DataType::Fp16,
            C::TypeFp32 => DataType::Fp32,
            C::TypeFp64 => DataType::Fp64,
            C::TypeString => DataType::Bytes,
            C::TypeBf16 => DataType::Bf16,
        })
    }

    /// Bytes per element, or `None` for variable-length BYTES.
    pub fn element_size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_protocol())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_round_trip() {
        for dt in DataType::ALL {
            assert_eq!(DataType::from_protocol(dt.as_protocol()), Some(dt));
            assert_eq!(DataType::from_config(dt.to_config() as i32), Some(dt));
        }
        assert_eq!(DataType::from_protocol("fp32"), None);
        assert_eq!(DataType::from_protocol("STRING"), None);
        assert_eq!(DataType::from_config(0), None);
    }
}
