//! Reading the gRPC messages' typed fields into the core's forms: the typed `contents` of a tensor
//! and the bool parameters of a message. Here, on the shared floor below both, because the gRPC
//! front end reads clients' requests with them and the upstream backend reads the model server's
//! answers; not in the core, which knows no protocol, nor in the contracts crate, since it
//! answers with the sidecar's errors and tensor bytes.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use infergate_proto::DataType;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::{InferParameter, InferTensorContents};

use crate::error::{Error, Result};
use crate::tensor::bytes_elements;

/// A tensor's typed `contents` as little-endian bytes of `datatype`; contents of another type
/// than `datatype` are refused with Triton's message.
pub fn typed_contents(
    c: InferTensorContents,
    datatype: &str,
    name: &str,
    model: &str,
) -> Result<Bytes> {
    let dt = DataType::from_protocol(datatype);
    let filled: Vec<&str> = [
        (!c.bool_contents.is_empty(), "BOOL"),
        (!c.int_contents.is_empty(), "INT32"),
        (!c.int64_contents.is_empty(), "INT64"),
        (!c.uint_contents.is_empty(), "UINT32"),
        (!c.uint64_contents.is_empty(), "UINT64"),
        (!c.fp32_contents.is_empty(), "FP32"),
        (!c.fp64_contents.is_empty(), "FP64"),
        (!c.bytes_contents.is_empty(), "BYTES"),
    ]
    .into_iter()
    .filter_map(|(set, n)| set.then_some(n))
    .collect();
    let expected_field = match dt {
        Some(DataType::Bool) => Some("BOOL"),
        Some(DataType::Int8 | DataType::Int16 | DataType::Int32) => Some("INT32"),
        Some(DataType::Int64) => Some("INT64"),
        Some(DataType::Uint8 | DataType::Uint16 | DataType::Uint32) => Some("UINT32"),
        Some(DataType::Uint64) => Some("UINT64"),
        Some(DataType::Fp32) => Some("FP32"),
        Some(DataType::Fp64) => Some("FP64"),
        Some(DataType::Bytes) => Some("BYTES"),
        _ => None,
    };
    if let Some(wrong) = filled.iter().find(|f| Some(**f) != expected_field) {
        return Err(Error::invalid_arg(format!(
            "unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type '{wrong}', expected datatype '{datatype}'"
        )));
    }
    let mut out = BytesMut::new();
    match dt {
        Some(DataType::Bool) => c
            .bool_contents
            .iter()
            .for_each(|b| out.put_u8(u8::from(*b))),
        Some(DataType::Int8) => c.int_contents.iter().for_each(|v| out.put_i8(*v as i8)),
        Some(DataType::Int16) => c
            .int_contents
            .iter()
            .for_each(|v| out.put_i16_le(*v as i16)),
        Some(DataType::Int32) => c.int_contents.iter().for_each(|v| out.put_i32_le(*v)),
        Some(DataType::Int64) => c.int64_contents.iter().for_each(|v| out.put_i64_le(*v)),
        Some(DataType::Uint8) => c.uint_contents.iter().for_each(|v| out.put_u8(*v as u8)),
        Some(DataType::Uint16) => c
            .uint_contents
            .iter()
            .for_each(|v| out.put_u16_le(*v as u16)),
        Some(DataType::Uint32) => c.uint_contents.iter().for_each(|v| out.put_u32_le(*v)),
        Some(DataType::Uint64) => c.uint64_contents.iter().for_each(|v| out.put_u64_le(*v)),
        Some(DataType::Fp32) => c.fp32_contents.iter().for_each(|v| out.put_f32_le(*v)),
        Some(DataType::Fp64) => c.fp64_contents.iter().for_each(|v| out.put_f64_le(*v)),
        Some(DataType::Bytes) => {
            let mut v = Vec::new();
            c.bytes_contents
                .iter()
                .for_each(|b| bytes_elements::push(&mut v, b));
            return Ok(Bytes::from(v));
        }
        _ => {}
    }
    Ok(out.freeze())
}

/// Whether a message's parameter `key` is the bool `true` (`triton_final_response`,
/// `triton_enable_empty_final_response`); absent or of another type is false.
pub fn bool_parameter(parameters: &HashMap<String, InferParameter>, key: &str) -> bool {
    matches!(
        parameters
            .get(key)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}
