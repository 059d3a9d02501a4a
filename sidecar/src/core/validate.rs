//! Checks a request against the model's configuration, in the order and with the messages of
//! Triton's core (`InferenceRequest::Normalize`).

use infergate_proto::DataType;

use super::model::Model;
use super::request::{InferRequest, RequestedOutput};
use crate::error::{Error, Result, request_prefix};
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;
use crate::tensor::bytes_elements::{self, BytesError};
use crate::tensor::shape::{byte_size, element_count, format_shape};

/// A request that may run: inputs with known datatypes, the outputs to return, the batch size.
#[derive(Debug)]
pub struct Validated {
    /// Inputs still in a client's region (see `input_regions`) have no bytes here.
    pub inputs: Vec<Tensor>,
    /// Per input (aligned with `inputs`; missing entries are `None`), the client's region that
    /// still holds it.
    pub input_regions: Vec<Option<ShmTarget>>,
    pub outputs: Vec<RequestedOutput>,
    pub batch_size: u64,
}

const BATCH_NOTE: &str = "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.";

pub fn validate(model: &Model, request: InferRequest) -> Result<Validated> {
    let prefix = request_prefix(&request.id);
    let m = &model.name;

    // Outputs: unknown or repeated names; none listed means all.
    let outputs = if request.outputs.is_empty() {
        model
            .outputs
            .iter()
            .map(|o| RequestedOutput {
                name: o.name.clone(),
                binary: request.default_binary,
                ..Default::default()
            })
            .collect()
    } else {
        for (i, out) in request.outputs.iter().enumerate() {
            if model.output(&out.name).is_none() {
                return Err(Error::invalid_arg(format!(
                    "unexpected inference output '{}' for model '{m}'",
                    out.name
                )));
            }
            if request.outputs[..i].iter().any(|o| o.name == out.name) {
                return Err(Error::invalid_arg(format!(
                    "{prefix}output '{}' already exists in request",
                    out.name
                )));
            }
        }
        request.outputs
    };

    // Inputs: repeated names (rejected as they are added), too many, unknown names, then
    // missing required ones.
    for (i, input) in request.inputs.iter().enumerate() {
        if request.inputs[..i].iter().any(|o| o.name == input.name) {
            return Err(Error::invalid_arg(format!(
                "{prefix}input '{}' already exists in request",
                input.name
            )));
        }
    }
    if request.inputs.len() > model.inputs.len() {
        return Err(Error::invalid_arg(format!(
            "{prefix}expected {} inputs but got {} inputs for model '{m}'.",
            model.inputs.len(),
            request.inputs.len()
        )));
    }
    for input in &request.inputs {
        if model.input(&input.name).is_none() {
            return Err(Error::invalid_arg(format!(
                "unexpected inference input '{}' for model '{m}'",
                input.name
            )));
        }
    }
    let missing: Vec<&str> = model
        .inputs
        .iter()
        .filter(|s| !s.optional && !request.inputs.iter().any(|i| i.name == s.name))
        .map(|s| s.name.as_str())
        .collect();
    if !missing.is_empty() {
        let required = model.inputs.iter().filter(|s| !s.optional).count();
        let got: Vec<String> = request
            .inputs
            .iter()
            .map(|i| format!("'{}'", i.name))
            .collect();
        let missing: Vec<String> = missing.iter().map(|n| format!("'{n}'")).collect();
        return Err(Error::invalid_arg(format!(
            "{prefix}expected {required} inputs but got {} inputs for model '{m}'. Got input(s) [{}], but missing required input(s) [{}]. Please provide all required input(s).",
            request.inputs.len(),
            got.join(","),
            missing.join(",")
        )));
    }

    // Batch size from the first dimension of every input of a batching model.
    let mut batch_size: Option<u64> = None;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    let mut input_regions = Vec::with_capacity(request.inputs.len());
    for mut input in request.inputs {
        let Some(spec) = model.input(&input.name) else {
            continue;
        };
        let expected_shape = model.metadata_shape(spec);
        let datatype = match input.parsed_datatype() {
            Some(dt) if dt == spec.datatype => dt,
            _ => {
                let got = if input.parsed_datatype().is_some() {
                    input.datatype.as_str()
                } else {
                    "INVALID"
                };
                return Err(Error::invalid_arg(format!(
                    "{prefix}inference input '{}' data-type is '{got}', but model '{m}' expects '{}'",
                    input.name, spec.datatype
                )));
            }
        };
        let shape_error = || {
            let note = if model.max_batch_size > 0 {
                BATCH_NOTE
            } else {
                ""
            };
            Error::invalid_arg(format!(
                "{prefix}unexpected shape for input '{}' for model '{m}'. Expected {}, got {}. {note}",
                input.name,
                format_shape(&expected_shape),
                format_shape(&input.shape)
            ))
        };
        let dims = if model.max_batch_size > 0 {
            let Some((&batch, rest)) = input.shape.split_first() else {
                return Err(shape_error());
            };
            if batch < 0 {
                return Err(shape_error());
            }
            let batch = batch as u64;
            match batch_size {
                None => {
                    if batch > u64::from(model.max_batch_size) {
                        return Err(Error::invalid_arg(format!(
                            "{prefix}inference request batch-size must be <= {} for '{m}'",
                            model.max_batch_size
                        )));
                    }
                    batch_size = Some(batch);
                }
                Some(b) if b != batch => {
                    return Err(Error::invalid_arg(format!(
                        "{prefix}input '{}' batch size does not match other inputs for '{m}'",
                        input.name
                    )));
                }
                Some(_) => {}
            }
            rest
        } else {
            &input.shape[..]
        };
        let matches = dims.len() == spec.dims.len()
            && dims
                .iter()
                .zip(&spec.dims)
                .all(|(&got, &want)| got >= 0 && (want == -1 || got == want));
        if !matches {
            return Err(shape_error());
        }
        let count = element_count(&input.shape, &input.name)?;
        match byte_size(datatype, count, &input.name)? {
            Some(expected) => {
                if expected != input.byte_len() {
                    return Err(Error::invalid_arg(format!(
                        "{prefix}input byte size mismatch for input '{}' for model '{m}'. Expected {expected}, got {}",
                        input.name,
                        input.byte_len()
                    )));
                }
            }
            None => {
                // Strings are checked element by element: their bytes are needed here.
                input.read_region()?;
                check_bytes_elements(&input.data, count, &input.name, m, &prefix)?
            }
        }
        input_regions.push(input.shm);
        inputs.push(Tensor {
            name: input.name,
            datatype,
            shape: input.shape,
            data: input.data,
        });
    }

    Ok(Validated {
        inputs,
        input_regions,
        outputs,
        batch_size: batch_size.unwrap_or(1),
    })
}

fn check_bytes_elements(
    data: &[u8],
    expected: u64,
    name: &str,
    model: &str,
    prefix: &str,
) -> Result<()> {
    let mut count = 0u64;
    for element in bytes_elements::iter(data) {
        match element {
            Ok(_) => count += 1,
            Err(BytesError::IncompleteLength { available }) => {
                return Err(Error::invalid_arg(format!(
                    "{prefix}incomplete string length indicator for inference input '{name}' for model '{model}', expecting 4 bytes but only {available} bytes available. Please make sure the string length indicator is in one buffer."
                )));
            }
            Err(BytesError::IncompleteData) => {
                return Err(Error::invalid_arg(format!(
                    "{prefix}incomplete string data for inference input '{name}' for model '{model}'"
                )));
            }
        }
        if count > expected {
            break;
        }
    }
    if count > expected {
        let total = bytes_elements::count(data).unwrap_or(count);
        return Err(Error::invalid_arg(format!(
            "{prefix}unexpected number of string elements {total} for inference input '{name}' for model '{model}', expecting {expected}"
        )));
    }
    if count < expected {
        return Err(Error::invalid_arg(format!(
            "{prefix}expected {expected} string elements for inference input '{name}' for model '{model}', got {count}"
        )));
    }
    Ok(())
}

/// Whether JSON may carry this datatype (FP16 and BF16 may only travel as binary).
pub fn json_capable(datatype: DataType) -> bool {
    !matches!(datatype, DataType::Fp16 | DataType::Bf16)
}
