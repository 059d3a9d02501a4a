//! `ModelInferRequest` → [`InferRequest`] and [`InferResponse`] → `ModelInferResponse`, with
//! Triton's rules for typed `contents`, `raw_input_contents` and parameters.

use bytes::Bytes;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_infer_response::InferOutputTensor;
use infergate_proto::inference::{InferParameter, ModelInferRequest, ModelInferResponse};

use crate::core::params::{ParamValue, Parameters};
use crate::core::request::{InferRequest, InferResponse, InputTensor, RequestedOutput};
use crate::error::{Error, Result};
pub use crate::grpc_message::{bool_parameter, typed_contents};
use crate::shm::Registry;
use std::collections::HashMap;

pub fn request(req: ModelInferRequest, shm: &Registry) -> Result<InferRequest> {
    let model = req.model_name;
    let mut out = InferRequest {
        model_version: req.model_version,
        id: req.id,
        parameters: request_parameters(&req.parameters)?,
        ..Default::default()
    };
    let mut raw = req.raw_input_contents.into_iter();
    let using_raw = raw.len() > 0;
    for input in req.inputs {
        let shm_params = tensor_shm(&input.parameters, &input.name)?;
        if let Some(params) = shm_params {
            if input.contents.is_some() {
                return Err(Error::invalid_arg(format!(
                    "unexpected 'content' provided when using shared memory for input tensor '{}' for model '{model}'",
                    input.name
                )));
            }
            let target = shm.target(&params.region, params.offset, params.byte_size)?;
            out.inputs.push(InputTensor::in_region(
                input.name,
                input.datatype,
                input.shape,
                target,
            ));
            continue;
        }
        let data = if let Some(contents) = input.contents {
            if using_raw {
                return Err(Error::invalid_arg(format!(
                    "contents field must not be specified when using raw_input_contents for '{}' for model '{model}'",
                    input.name
                )));
            }
            typed_contents(contents, &input.datatype, &input.name, &model)?
        } else {
            raw.next().ok_or_else(|| {
                Error::invalid_arg(format!(
                    "unable to find data for input tensor '{}' for model '{model}' in request.",
                    input.name
                ))
            })?
        };
        out.inputs.push(InputTensor::inline(
            input.name,
            input.datatype,
            input.shape,
            data,
        ));
    }
    for output in req.outputs {
        let mut requested = RequestedOutput::named(output.name.clone());
        for (key, value) in &output.parameters {
            if key == "classification" {
                match value.parameter_choice {
                    Some(ParameterChoice::Int64Param(k)) if k > 0 => {
                        requested.classification = u32::try_from(k).unwrap_or(u32::MAX)
                    }
                    Some(ParameterChoice::Int64Param(_)) => {
                        return Err(Error::invalid_arg(
                            "invalid value for 'classification' parameter, expected >= 0",
                        ));
                    }
                    _ => {
                        return Err(Error::invalid_arg(
                            "invalid value type for 'classification' parameter, expected int64_param",
                        ));
                    }
                }
            }
        }
        if let Some(params) = tensor_shm(&output.parameters, &output.name)? {
            if requested.classification > 0 {
                return Err(Error::invalid_arg(
                    "output can't set both 'shared_memory_region' and 'classification'",
                ));
            }
            requested.shm = Some(shm.target(&params.region, params.offset, params.byte_size)?);
        }
        out.outputs.push(requested);
    }
    out.model_name = model;
    Ok(out)
}

fn request_parameters(params: &HashMap<String, InferParameter>) -> Result<Parameters> {
    let mut out = Parameters::default();
    let mut keys: Vec<&String> = params.keys().collect();
    keys.sort();
    for key in keys {
        let choice = params[key].parameter_choice.clone();
        let value = match (key.as_str(), choice) {
            ("sequence_id", Some(ParameterChoice::Int64Param(v))) => ParamValue::Uint(v as u64),
            ("sequence_id", Some(ParameterChoice::StringParam(s))) => ParamValue::String(s),
            ("sequence_id", _) => {
                return Err(Error::invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
                ));
            }
            ("sequence_start" | "sequence_end", Some(ParameterChoice::BoolParam(b))) => {
                ParamValue::Bool(b)
            }
            ("sequence_start" | "sequence_end", _) => {
                return Err(Error::invalid_arg(format!(
                    "invalid value type for '{key}' parameter, expected bool_param."
                )));
            }
            ("priority", Some(ParameterChoice::Int64Param(v))) => {
                let v = u64::try_from(v).map_err(|_| {
                    Error::invalid_arg("invalid value for 'priority', expected value >= 0.")
                })?;
                ParamValue::Uint(v)
            }
            ("priority", Some(ParameterChoice::Uint64Param(v))) => ParamValue::Uint(v),
            ("priority", _) => {
                return Err(Error::invalid_arg(
                    "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
                ));
            }
            // Triton takes a negative timeout as the unsigned number of the same bits.
            ("timeout", Some(ParameterChoice::Int64Param(v))) => ParamValue::Uint(v as u64),
            ("timeout", _) => {
                return Err(Error::invalid_arg(
                    "invalid value type for 'timeout' parameter, expected int64_param.",
                ));
            }
            ("triton_enable_empty_final_response", Some(ParameterChoice::BoolParam(b))) => {
                ParamValue::Bool(b)
            }
            (k, _) if k.starts_with("triton_") => {
                return Err(Error::invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
                ));
            }
            (_, Some(ParameterChoice::BoolParam(b))) => ParamValue::Bool(b),
            (_, Some(ParameterChoice::Int64Param(v))) => ParamValue::Int(v),
            (_, Some(ParameterChoice::StringParam(s))) => ParamValue::String(s),
            (_, Some(ParameterChoice::DoubleParam(d))) => ParamValue::Double(d),
            (k, _) => {
                return Err(Error::invalid_arg(format!(
                    "invalid value type for '{k}' parameter, expected int64_param, bool_param, or string_param."
                )));
            }
        };
        out.insert(key.clone(), value);
    }
    Ok(out)
}

/// A tensor's shared-memory parameters: region, offset, byte size.
struct ShmParams {
    region: String,
    offset: u64,
    byte_size: u64,
}

/// The shared-memory region named by a tensor's parameters, with Triton's parameter checks.
fn tensor_shm(params: &HashMap<String, InferParameter>, name: &str) -> Result<Option<ShmParams>> {
    let region = match params
        .get("shared_memory_region")
        .and_then(|p| p.parameter_choice.clone())
    {
        Some(ParameterChoice::StringParam(s)) => Some(s),
        Some(_) => {
            return Err(Error::invalid_arg(format!(
                "invalid value type for 'shared_memory_region' parameter for tensor '{name}', expected string_param."
            )));
        }
        None => None,
    };
    let int = |key: &str| -> Result<Option<u64>> {
        match params.get(key).and_then(|p| p.parameter_choice.clone()) {
            None => Ok(None),
            // Triton reads the int64 as a size_t: -1 is an offset (or size) of 2^64 - 1, which
            // the region's bounds check then refuses with its usual words.
            Some(ParameterChoice::Int64Param(v)) => Ok(Some(v as u64)),
            Some(_) => Err(Error::invalid_arg(format!(
                "invalid value type for '{key}' parameter for tensor '{name}', expected int64_param."
            ))),
        }
    };
    let offset = int("shared_memory_offset")?;
    let byte_size = int("shared_memory_byte_size")?;
    match region {
        None if offset.is_some() || byte_size.is_some() => {
            let which = if offset.is_some() {
                "shared_memory_offset"
            } else {
                "shared_memory_byte_size"
            };
            Err(Error::invalid_arg(format!(
                "'{which}' can not be specified without 'shared_memory_region' parameter for tensor '{name}'"
            )))
        }
        None => Ok(None),
        Some(_) if byte_size.is_none() => Err(Error::invalid_arg(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '{name}'"
        ))),
        Some(region) => Ok(Some(ShmParams {
            region,
            offset: offset.unwrap_or(0),
            byte_size: byte_size.unwrap_or(0),
        })),
    }
}

pub fn response(resp: InferResponse) -> ModelInferResponse {
    let mut outputs = Vec::with_capacity(resp.outputs.len());
    let mut raw = Vec::with_capacity(resp.outputs.len());
    for (t, requested) in resp.outputs.into_iter().zip(&resp.requested) {
        outputs.push(InferOutputTensor {
            name: t.name,
            datatype: t.datatype.as_protocol().to_string(),
            shape: t.shape,
            parameters: Default::default(),
            contents: None,
        });
        // Outputs written to the client's shared memory get an empty entry at their index.
        raw.push(if requested.shm.is_some() {
            Bytes::new()
        } else {
            t.data
        });
    }
    ModelInferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version,
        id: resp.id,
        parameters: response_parameters(&resp.parameters),
        outputs,
        raw_output_contents: raw,
    }
}

pub fn response_parameters(
    params: &Parameters,
) -> std::collections::HashMap<String, InferParameter> {
    params
        .iter()
        .map(|(k, v)| {
            let choice = match v {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
                ParamValue::Uint(u) => ParameterChoice::Uint64Param(*u),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
                ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            (
                k.clone(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            )
        })
        .collect()
}
