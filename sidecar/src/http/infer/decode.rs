//! The infer request's body into a protocol-independent `InferRequest`: the JSON request, with
//! binary tensor data after it (`Inference-Header-Content-Length`), tensors in JSON `data` or in
//! shared memory, and raw single-input requests.

use bytes::Bytes;
use http::HeaderMap;
use infergate_proto::DataType;

use crate::caller::Caller;
use crate::core::model::Model;
use crate::core::request::{InferRequest, InputTensor, RequestedOutput};
use crate::cxx_number::{self, CxxParseError};
use crate::error::{Error, Result};
use crate::front_door::Target;
use crate::http::params::{parse_request_parameters, tensor_parameters};
use crate::http::request_body::body_json_error;
use crate::json::{self, Value, data::DataError};
use crate::shm::Registry;
use crate::state::AppState;
use crate::tensor::shape::element_count;

use infergate_proto::wire::HEADER_LENGTH;

/// Decodes a request body into a protocol-independent request.
pub fn request(
    state: &AppState,
    caller: Option<Caller>,
    target: &Target,
    model_name: &str,
    version: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<InferRequest> {
    let header_length = match headers.get(HEADER_LENGTH) {
        None => None,
        Some(v) => {
            let text = String::from_utf8_lossy(v.as_bytes());
            // Read with std::stoi, as Triton reads it.
            let n = match cxx_number::stoi(&text) {
                Ok(n) => i64::from(n),
                Err(CxxParseError::Invalid) => {
                    return Err(Error::invalid_arg(format!(
                        "Unable to parse Inference-Header-Content-Length, got: {text}"
                    )));
                }
                Err(CxxParseError::OutOfRange) => {
                    return Err(Error::invalid_arg(format!(
                        "Unable to parse Inference-Header-Content-Length, value is out of range [ {}, {} ], got: {text}",
                        i32::MIN,
                        i32::MAX
                    )));
                }
            };
            if n < 0 || n as u64 > body.len() as u64 {
                return Err(Error::invalid_arg(format!(
                    "inference header size should be in range (0, {}), got: {text}",
                    body.len()
                )));
            }
            Some(n as usize)
        }
    };
    let json_len = header_length.unwrap_or(body.len());
    if json_len == 0 {
        return decode_raw(target, model_name, version, body);
    }
    let max_depth = state.limits.max_json_depth;
    let doc = json::parse_lazy_data(&body[..json_len], max_depth).map_err(body_json_error)?;
    let binary = body.slice(json_len..);
    let limits = JsonLimits {
        max_depth,
        max_input_bytes: state.limits.max_http_body_bytes,
    };
    decode_json(
        state.shm_for(caller),
        model_name,
        version,
        &doc,
        binary,
        limits,
    )
}

/// What a JSON request may hold: nesting depth, and bytes per tensor given as JSON `data`.
#[derive(Clone, Copy)]
struct JsonLimits {
    max_depth: u32,
    max_input_bytes: u64,
}

/// A TritonJson accessor failure: JSON type errors are INTERNAL (HTTP 500) in Triton.
fn parse_err(field: &str, detail: &str) -> Error {
    Error::internal(format!("Unable to parse '{field}': {detail}"))
}

fn decode_json(
    shm: &Registry,
    model: &str,
    version: &str,
    doc: &Value<'_>,
    binary: Bytes,
    limits: JsonLimits,
) -> Result<InferRequest> {
    let mut request = InferRequest {
        model_name: model.to_string(),
        model_version: version.to_string(),
        ..Default::default()
    };
    if let Some(id) = doc.get("id") {
        request.id = string(id, "id")?;
    }
    if let Some(params) = doc.get("parameters") {
        let (parameters, binary_output) = parse_request_parameters(params)?;
        request.parameters = parameters;
        request.default_binary = binary_output;
    }
    let inputs = member_array(doc, "inputs")?;
    let mut offset = 0usize;
    for input in inputs {
        check_input_source(input)?;
        let name = member_string(input, "name")?;
        let datatype = member_string(input, "datatype")?;
        let shape = shape(member_array(input, "shape")?)?;
        let params = tensor_parameters(input.get("parameters"))?;
        let data = input.get("data");
        if let Some(region) = params.shm_region {
            let offset = params.shm_offset.unwrap_or(0);
            let byte_size = params.shm_byte_size.unwrap_or(0);
            let target = shm.target(&region, offset, byte_size)?;
            request
                .inputs
                .push(InputTensor::in_region(name, datatype, shape, target));
            continue;
        }
        let bytes = if let Some(size) = params.binary_data_size {
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            if binary.len() - offset < size {
                return Err(Error::invalid_arg(format!(
                    "unexpected size for input '{name}', expecting {} additional bytes for model '{model}'",
                    size - (binary.len() - offset)
                )));
            }
            let chunk = binary.slice(offset..offset + size);
            offset += size;
            chunk
        } else {
            json_data(&name, &datatype, &shape, data, limits)?
        };
        request
            .inputs
            .push(InputTensor::inline(name, datatype, shape, bytes));
    }
    if offset != binary.len() {
        return Err(Error::invalid_arg(format!(
            "unexpected additional input data for model '{model}'"
        )));
    }
    if doc.get("outputs").is_some() {
        for output in member_array(doc, "outputs")? {
            check_output_parameters(output)?;
            let name = member_string(output, "name")?;
            let params = tensor_parameters(output.get("parameters"))?;
            let target = match params.shm_region {
                Some(region) => {
                    let offset = params.shm_offset.unwrap_or(0);
                    let byte_size = params.shm_byte_size.unwrap_or(0);
                    Some(shm.target(&region, offset, byte_size)?)
                }
                None => None,
            };
            request.outputs.push(RequestedOutput {
                name,
                classification: params.classification.unwrap_or(0),
                binary: params.binary_data.unwrap_or(false),
                shm: target,
            });
        }
    }
    Ok(request)
}

fn string(v: &Value<'_>, field: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(String::from_utf8_lossy(s).into_owned()),
        _ => Err(parse_err(
            field,
            "attempt to access JSON non-string as string",
        )),
    }
}

/// A member Triton reads with `MemberAs*`: a missing one (or a holder that is not an object) is
/// "non-existing", one of the wrong type a type error.
fn member<'v, 'a>(holder: &'v Value<'a>, field: &str) -> Result<&'v Value<'a>> {
    holder.get(field).ok_or_else(|| {
        parse_err(
            field,
            &format!("attempt to access non-existing object member '{field}'"),
        )
    })
}

fn member_string(holder: &Value<'_>, field: &str) -> Result<String> {
    string(member(holder, field)?, field)
}

fn member_array<'v, 'a>(holder: &'v Value<'a>, field: &str) -> Result<&'v [Value<'a>]> {
    match member(holder, field)? {
        Value::Array(items) => Ok(items),
        _ => Err(parse_err(
            field,
            "attempt to access JSON non-array as array",
        )),
    }
}

/// Exactly one of `data`, `binary_data_size` and `shared_memory_region` (Triton checks this
/// before anything else of an input, on whatever the input is).
fn check_input_source(input: &Value<'_>) -> Result<()> {
    let params = input.get("parameters");
    let has = |key: &str| params.is_some_and(|p| p.get(key).is_some());
    let set: Vec<&str> = [
        (input.get("data").is_some(), "'data'"),
        (has("binary_data_size"), "'binary_data_size'"),
        (has("shared_memory_region"), "'shared_memory_region'"),
    ]
    .into_iter()
    .filter_map(|(present, name)| present.then_some(name))
    .collect();
    if set.len() == 1 {
        return Ok(());
    }
    let which = if set.is_empty() {
        "But no field is set".to_string()
    } else {
        format!("But set {}", set.join(" "))
    };
    Err(Error::invalid_arg(format!(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. {which}"
    )))
}

/// An output may not go to shared memory and also be classified or sent as binary data
/// (checked, as Triton does, before the output's name).
fn check_output_parameters(output: &Value<'_>) -> Result<()> {
    let Some(params) = output.get("parameters") else {
        return Ok(());
    };
    if params.get("shared_memory_region").is_none() {
        return Ok(());
    }
    if params.get("classification").is_some() {
        return Err(Error::invalid_arg(
            "Output can't set both 'shared_memory_region' and 'classification'",
        ));
    }
    match params.get("binary_data") {
        Some(Value::Bool(true)) => Err(Error::invalid_arg(
            "Output can't set both 'shared_memory_region' and 'binary_data'",
        )),
        Some(Value::Bool(false)) | None => Ok(()),
        Some(_) => Err(Error::internal(
            "Unable to set 'binary_data': attempt to access JSON non-boolean as boolean",
        )),
    }
}

/// The shape, read as Triton reads it: unsigned JSON integers kept in signed 64 bits, so one
/// beyond `i64::MAX` becomes negative and is refused where the shape is checked or sized.
fn shape(dims: &[Value<'_>]) -> Result<Vec<i64>> {
    dims.iter()
        .map(|d| match d.as_u64() {
            Some(u) => Ok(u as i64),
            None => Err(parse_err(
                "shape",
                "attempt to access JSON non-unsigned-integer as unsigned-integer",
            )),
        })
        .collect()
}

fn json_data(
    name: &str,
    datatype: &str,
    shape: &[i64],
    data: Option<&Value<'_>>,
    limits: JsonLimits,
) -> Result<Bytes> {
    // Triton's front end counts the elements first (`GetElementCount`): a shape without
    // dimensions, or one that reaches a 0 before any negative dimension, holds none, and then
    // nothing else of the input is read (its datatype and `data` included); validation judges
    // the empty tensor.
    let zero_first = shape.iter().take_while(|&&d| d >= 0).any(|&d| d == 0);
    if shape.is_empty() || zero_first {
        return Ok(Bytes::new());
    }
    let count = element_count(shape, name)?;
    if !matches!(
        data,
        None | Some(Value::Array(_) | Value::Raw(_) | Value::Decoded(..))
    ) {
        return Err(parse_err(
            "data",
            "attempt to access JSON non-array as array",
        ));
    }
    let dt = DataType::from_protocol(datatype);
    // The shape's size is checked before any element is read (Triton's order): a huge shape is
    // refused for what it claims, whatever `data` holds.
    if let Some(dt) = dt
        && let Some(size) = crate::tensor::shape::byte_size(dt, count, name)?
        && size > limits.max_input_bytes
    {
        return Err(Error::invalid_arg(format!(
            "JSON input '{name}' has a byte_size ({size} bytes) that exceeds the maximum allowed value of {} bytes. Use --http-max-input-size to increase the limit.",
            limits.max_input_bytes
        )));
    }
    let Some(dt) = dt else {
        return Err(Error::invalid_arg(format!(
            "invalid datatype for input {name}"
        )));
    };
    if matches!(dt, DataType::Fp16 | DataType::Bf16) {
        return Err(Error::invalid_arg(format!(
            "receiving {dt} data via JSON is not supported. Please use the binary data format for input {name}"
        )));
    }
    if let Some(bytes) = data.and_then(|d| d.decoded_as(dt, count)) {
        return Ok(bytes);
    }
    let raw: &[u8] = match data {
        Some(Value::Raw(raw) | Value::Decoded(raw, _)) => raw,
        // Only an empty array is held as a parsed one (see the check above).
        Some(_) | None => b"[]",
    };
    json::data::decode(raw, dt, count, limits.max_depth)
        .map(Bytes::from)
        .map_err(|e| match e {
            DataError::WrongType(msg) if dt == DataType::Bytes => {
                Error::internal(format!("Unable to parse JSON bytes array: {msg}"))
            }
            DataError::WrongType(msg) => parse_err("data", msg),
            DataError::TooMany => Error::internal(
                "Unable to parse 'data': Shape does not match true shape of 'data' field",
            ),
            DataError::TooFew => {
                Error::internal("Failed to parse 'data' field: shape does not match true shape")
            }
            DataError::Json(e) => body_json_error(e),
        })
}

/// A request whose whole body is the single input of a one-input model.
fn decode_raw(
    target: &Target,
    model_name: &str,
    version: &str,
    body: Bytes,
) -> Result<InferRequest> {
    let model = target.model()?;
    let input = raw_input(model, body)?;
    let outputs = model
        .outputs
        .iter()
        .map(|o| RequestedOutput {
            name: o.name.clone(),
            binary: true,
            ..Default::default()
        })
        .collect();
    Ok(InferRequest {
        model_name: model_name.to_string(),
        model_version: version.to_string(),
        inputs: vec![input],
        outputs,
        default_binary: true,
        raw_input: true,
        ..Default::default()
    })
}

fn raw_input(model: &Model, body: Bytes) -> Result<InputTensor> {
    if model.inputs.len() != 1 {
        return Err(Error::invalid_arg(format!(
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{}' model configuration",
            model.inputs.len(),
            model.name
        )));
    }
    let spec = &model.inputs[0];
    let mut shape = Vec::with_capacity(spec.dims.len() + 1);
    if model.max_batch_size > 0 {
        shape.push(1);
    }
    match spec.datatype.element_size() {
        None => {
            if spec.dims != [1] {
                return Err(Error::invalid_arg(format!(
                    "[request id: <id_unknown>] For BYTE datatype raw input '{}', the model must have input shape [1]",
                    spec.name
                )));
            }
            shape.push(1);
        }
        Some(size) => {
            let variable = spec.dims.iter().filter(|d| **d < 0).count();
            if variable > 1 {
                return Err(Error::invalid_arg(format!(
                    "[request id: <id_unknown>] The shape of the raw input '{}' can not be deduced because there are more than one variable-sized dimension",
                    spec.name
                )));
            }
            let fixed: i64 = spec.dims.iter().filter(|d| **d >= 0).product();
            for &d in &spec.dims {
                if d >= 0 {
                    shape.push(d);
                } else {
                    let per = (fixed as u64).saturating_mul(size as u64).max(1);
                    shape.push(i64::try_from(body.len() as u64 / per).unwrap_or(i64::MAX));
                }
            }
        }
    }
    Ok(InputTensor::inline(
        spec.name.clone(),
        spec.datatype.as_protocol().to_string(),
        shape,
        body,
    ))
}

/// Bytes of JSON in a request body of `body_len` bytes: all of it, or what its
/// `Inference-Header-Content-Length` says (checked by [`request`]).
pub fn json_bytes(headers: &HeaderMap, body_len: usize) -> usize {
    match headers.get(HEADER_LENGTH) {
        None => body_len,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse::<usize>().ok())
            .map_or(0, |n| n.min(body_len)),
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn the_json_part_of_a_body_is_all_of_it_or_what_the_header_says() {
        let mut headers = HeaderMap::new();
        assert_eq!(json_bytes(&headers, 1000), 1000);
        headers.insert(HEADER_LENGTH, HeaderValue::from_static("40"));
        assert_eq!(json_bytes(&headers, 1000), 40);
        // Larger than the body or unreadable: decode refuses it; nothing heavy to parse.
        headers.insert(HEADER_LENGTH, HeaderValue::from_static("4000"));
        assert_eq!(json_bytes(&headers, 1000), 1000);
        headers.insert(HEADER_LENGTH, HeaderValue::from_static("x"));
        assert_eq!(json_bytes(&headers, 1000), 0);
    }
}
