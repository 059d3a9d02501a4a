//! The REST codec: an inference request written as V2 JSON, its tensors as binary data after
//! the JSON header or as JSON values; the answer read back into the gRPC message, with one raw
//! entry per output; and an HTTP error answer as a `tonic::Status`, by its status code.

use std::collections::HashMap;

use bytes::Bytes;
use http::StatusCode;
use infergate_proto::DataType;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_infer_response::InferOutputTensor;
use infergate_proto::inference::{InferParameter, ModelInferRequest, ModelInferResponse};
use serde_json::Value as J;
use tonic::Status;

use crate::backend::upstream::answer::Answer;
use crate::json::{self, Value, Writer};
use crate::tensor::shape::element_count;

/// Nesting allowed in an upstream's answer (its `data` arrays are a tensor's dimensions).
const MAX_DEPTH: u32 = 100;

/// The request as JSON, followed by the inputs' bytes when they travel as binary data.
pub(super) fn encode_request(
    request: &ModelInferRequest,
    binary: bool,
) -> Answer<(Vec<Bytes>, Option<usize>)> {
    let mut w = Writer::with_capacity(256);
    let mut chunks = vec![Bytes::new()];
    let mut raw = request.raw_input_contents.iter();
    w.byte(b'{');
    if !request.id.is_empty() {
        w.key("id").string(request.id.as_bytes()).byte(b',');
    }
    if !request.parameters.is_empty() {
        w.key("parameters");
        write_parameters(&mut w, &request.parameters);
        w.byte(b',');
    }
    w.key("inputs").byte(b'[');
    for (i, input) in request.inputs.iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.tensor_head(&input.name, &input.datatype, &input.shape);
        // Inputs in a shared-memory region have no bytes here (the staging plan left them out
        // of the raw contents).
        let in_region = input.parameters.contains_key("shared_memory_region");
        let mut parameters = input.parameters.clone();
        let data = if in_region { None } else { raw.next() };
        match data {
            Some(data) if binary => {
                parameters.insert(
                    "binary_data_size".to_string(),
                    int_parameter(data.len() as i64),
                );
                chunks.push(data.clone());
            }
            Some(data) => {
                let datatype = DataType::from_protocol(&input.datatype).ok_or_else(|| {
                    Status::invalid_argument(format!("invalid datatype for input {}", input.name))
                })?;
                if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
                    return Err(Status::unimplemented(format!(
                        "input '{}' is {datatype}, which JSON cannot carry, and the upstream does not accept binary tensor data",
                        input.name
                    )));
                }
                w.byte(b',').key("data");
                json::data::encode(&mut w, datatype, data);
            }
            None => {}
        }
        if !parameters.is_empty() {
            w.byte(b',').key("parameters");
            write_parameters(&mut w, &parameters);
        }
        w.byte(b'}');
    }
    w.byte(b']');
    if !request.outputs.is_empty() {
        w.byte(b',').key("outputs").byte(b'[');
        for (i, output) in request.outputs.iter().enumerate() {
            if i > 0 {
                w.byte(b',');
            }
            w.byte(b'{').key("name").string(output.name.as_bytes());
            let mut parameters = output.parameters.clone();
            if binary && !parameters.contains_key("shared_memory_region") {
                parameters.insert(
                    "binary_data".to_string(),
                    InferParameter {
                        parameter_choice: Some(ParameterChoice::BoolParam(true)),
                    },
                );
            }
            if !parameters.is_empty() {
                w.byte(b',').key("parameters");
                write_parameters(&mut w, &parameters);
            }
            w.byte(b'}');
        }
        w.byte(b']');
    }
    w.byte(b'}');
    let header_length = w.buf.len();
    chunks[0] = Bytes::from(w.into_bytes());
    let has_binary = chunks.len() > 1;
    Ok((chunks, has_binary.then_some(header_length)))
}

fn int_parameter(v: i64) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(v)),
    }
}

/// Parameters in a stable order (sorted by name), so requests are reproducible.
fn write_parameters(w: &mut Writer, parameters: &HashMap<String, InferParameter>) {
    let mut entries: Vec<_> = parameters.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    w.byte(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.key(key);
        match &value.parameter_choice {
            Some(ParameterChoice::BoolParam(b)) => w.bool(*b),
            Some(ParameterChoice::Int64Param(v)) => w.i64(*v),
            Some(ParameterChoice::Uint64Param(v)) => w.u64(*v),
            Some(ParameterChoice::DoubleParam(v)) => w.f64(*v),
            Some(ParameterChoice::StringParam(s)) => w.string(s.as_bytes()),
            None => w.raw("null"),
        };
    }
    w.byte(b'}');
}

/// The upstream's answer as the gRPC message, with one raw entry per output (empty for an
/// output written to a shared-memory region), as Triton's gRPC answers are laid out.
pub(super) fn decode_response(
    body: &Bytes,
    header_length: Option<usize>,
) -> Answer<ModelInferResponse> {
    let json_len = header_length.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(Status::internal(format!(
            "the upstream's answer declares a {json_len}-byte header in a {}-byte body",
            body.len()
        )));
    }
    let doc = json::parse_lazy_data(&body[..json_len], MAX_DEPTH).map_err(|e| {
        Status::internal(format!(
            "the upstream answered with invalid JSON: {}",
            e.request_message()
        ))
    })?;
    let string = |v: Option<&Value<'_>>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let mut response = ModelInferResponse {
        model_name: string(doc.get("model_name")),
        model_version: string(doc.get("model_version")),
        id: string(doc.get("id")),
        ..Default::default()
    };
    let outputs = match doc.get("outputs") {
        Some(Value::Array(outputs)) => outputs.as_slice(),
        _ => &[],
    };
    let mut offset = json_len;
    for output in outputs {
        let name = string(output.get("name"));
        let datatype = string(output.get("datatype"));
        let shape: Vec<i64> = match output.get("shape") {
            Some(Value::Array(dims)) => dims.iter().filter_map(Value::as_i64).collect(),
            _ => Vec::new(),
        };
        let parameters = output.get("parameters");
        let binary_size = parameters
            .and_then(|p| p.get("binary_data_size"))
            .and_then(Value::as_u64);
        let data = match (binary_size, output.get("data")) {
            (Some(size), _) => {
                let end = usize::try_from(size)
                    .ok()
                    .and_then(|s| offset.checked_add(s))
                    .filter(|end| *end <= body.len())
                    .ok_or_else(|| {
                        Status::internal(format!(
                            "the upstream's output '{name}' declares {size} bytes beyond the end of its answer"
                        ))
                    })?;
                let data = body.slice(offset..end);
                offset = end;
                data
            }
            (None, Some(data)) => json_output(&name, &datatype, &shape, data)?,
            (None, None) => Bytes::new(),
        };
        response.outputs.push(InferOutputTensor {
            name,
            datatype,
            shape,
            ..Default::default()
        });
        response.raw_output_contents.push(data);
    }
    Ok(response)
}

fn json_output(name: &str, datatype: &str, shape: &[i64], data: &Value<'_>) -> Answer<Bytes> {
    let dt = DataType::from_protocol(datatype).ok_or_else(|| {
        Status::internal(format!(
            "the upstream's output '{name}' has datatype '{datatype}'"
        ))
    })?;
    let count = element_count(shape, name).map_err(|e| Status::internal(e.to_string()))?;
    if let Some(bytes) = data.decoded_as(dt, count) {
        return Ok(bytes);
    }
    let raw = data.raw_data().unwrap_or(b"[]");
    json::data::decode(raw, dt, count, MAX_DEPTH)
        .map(Bytes::from)
        .map_err(|e| Status::internal(format!("the upstream's output '{name}': {e:?}")))
}

/// An HTTP error answer in gRPC terms, keeping the upstream's message.
pub(super) fn error_status(status: StatusCode, body: &[u8]) -> Status {
    let message = serde_json::from_slice::<J>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(J::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let message = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        message
    };
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
            Status::invalid_argument(message)
        }
        StatusCode::NOT_FOUND => Status::not_found(message),
        StatusCode::CONFLICT => Status::already_exists(message),
        StatusCode::NOT_IMPLEMENTED | StatusCode::METHOD_NOT_ALLOWED => {
            Status::unimplemented(message)
        }
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => Status::unavailable(message),
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => {
            Status::deadline_exceeded(message)
        }
        StatusCode::PAYLOAD_TOO_LARGE => Status::resource_exhausted(message),
        _ => Status::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_proto::inference::model_infer_request::{
        InferInputTensor, InferRequestedOutputTensor,
    };
    use serde_json::json;

    fn request() -> ModelInferRequest {
        ModelInferRequest {
            model_name: "simple".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT0".into(),
                datatype: "INT32".into(),
                shape: vec![1, 2],
                ..Default::default()
            }],
            outputs: vec![InferRequestedOutputTensor {
                name: "OUTPUT0".into(),
                ..Default::default()
            }],
            raw_input_contents: vec![Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0])],
            ..Default::default()
        }
    }

    #[test]
    fn binary_requests_carry_the_bytes_after_the_header() {
        let (chunks, header_length) = encode_request(&request(), true).unwrap();
        let header: J = serde_json::from_slice(&chunks[0]).unwrap();
        assert_eq!(header_length, Some(chunks[0].len()));
        assert_eq!(header["inputs"][0]["parameters"]["binary_data_size"], 8);
        assert_eq!(header["outputs"][0]["parameters"]["binary_data"], true);
        assert_eq!(chunks[1].as_ref(), &[1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn json_requests_carry_the_values() {
        let (chunks, header_length) = encode_request(&request(), false).unwrap();
        assert_eq!((chunks.len(), header_length), (1, None));
        let header: J = serde_json::from_slice(&chunks[0]).unwrap();
        assert_eq!(header["inputs"][0]["data"], json!([1, 2]));
        assert!(header["outputs"][0].get("parameters").is_none());
    }

    #[test]
    fn answers_with_binary_and_json_outputs_become_raw_contents() {
        let header = br#"{"model_name":"simple","outputs":[{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"B","datatype":"INT32","shape":[2],"data":[3,4]}]}"#;
        let mut body = header.to_vec();
        body.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let response = decode_response(&Bytes::from(body), Some(header.len())).unwrap();
        assert_eq!(response.outputs.len(), 2);
        assert_eq!(
            response.raw_output_contents[0].as_ref(),
            &[1, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(
            response.raw_output_contents[1].as_ref(),
            &[3, 0, 0, 0, 4, 0, 0, 0]
        );
    }

    #[test]
    fn a_lying_binary_size_is_an_error_not_a_panic() {
        let header = br#"{"outputs":[{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":18446744073709551615}}]}"#;
        let err = decode_response(&Bytes::from_static(header), Some(header.len())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
        assert!(decode_response(&Bytes::from_static(header), Some(10_000)).is_err());
    }

    #[test]
    fn http_errors_keep_their_message_and_map_to_grpc_codes() {
        let s = error_status(StatusCode::BAD_REQUEST, br#"{"error":"bad shape"}"#);
        assert_eq!(
            (s.code(), s.message()),
            (tonic::Code::InvalidArgument, "bad shape")
        );
        let s = error_status(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(s.code(), tonic::Code::Unavailable);
    }
}
