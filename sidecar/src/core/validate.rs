//! Checks a request against the model's configuration, in the order and with the messages of
//! Triton's core (`InferenceRequest::Normalize`).

use infergate_proto::DataType;

use super::input_order;
use super::model::{Model, TensorSpec};
use super::request::{InferRequest, InputTensor, RequestedOutput};
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

    // Triton's front ends refuse a repeated name as they add inputs, then outputs, to the
    // request: in the request's order.
    if let Some(name) = first_repeated(request.inputs.iter().map(|i| i.name.as_str())) {
        return Err(Error::invalid_arg(format!(
            "{prefix}input '{name}' already exists in request"
        )));
    }
    if let Some(name) = first_repeated(request.outputs.iter().map(|o| o.name.as_str())) {
        return Err(Error::invalid_arg(format!(
            "{prefix}output '{name}' already exists in request"
        )));
    }

    // Requested outputs, which Triton keeps in a sorted set: unknown names; none means all.
    let mut unknown: Vec<&str> = request
        .outputs
        .iter()
        .map(|o| o.name.as_str())
        .filter(|name| model.output(name).is_none())
        .collect();
    unknown.sort_unstable();
    if let Some(name) = unknown.first() {
        return Err(Error::invalid_arg(format!(
            "unexpected inference output '{name}' for model '{m}'"
        )));
    }
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
        request.outputs
    };

    // From here on Triton visits the inputs in its map's order, so the one an error names is
    // the one it would name.
    let order = input_order::triton_order(
        &request
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
    );
    check_input_count(model, &request.inputs, &order, &prefix)?;

    // Every input known; for a batching model, the batch size from each one's first dimension.
    let mut batch_size: Option<u64> = None;
    for &i in &order {
        let input = &request.inputs[i];
        if model.input(&input.name).is_none() {
            return Err(Error::invalid_arg(format!(
                "unexpected inference input '{}' for model '{m}'",
                input.name
            )));
        }
        if model.max_batch_size == 0 {
            continue;
        }
        let Some(&first) = input.shape.first() else {
            return Err(Error::invalid_arg(format!(
                "{prefix}input '{}' has no shape but model requires batch dimension for '{m}'",
                input.name
            )));
        };
        // A negative batch dimension (gRPC only) fails the shape check below.
        let batch = u64::try_from(first).unwrap_or(0);
        match batch_size {
            None | Some(0) => batch_size = Some(batch),
            Some(b) if b != batch => {
                return Err(Error::invalid_arg(format!(
                    "{prefix}input '{}' batch size does not match other inputs for '{m}'",
                    input.name
                )));
            }
            Some(_) => {}
        }
    }
    if model.max_batch_size > 0 && batch_size.unwrap_or(0) > u64::from(model.max_batch_size) {
        return Err(Error::invalid_arg(format!(
            "{prefix}inference request batch-size must be <= {} for '{m}'",
            model.max_batch_size
        )));
    }

    // Each input's datatype, shape and size, in the same order. (Triton's messages call the
    // input of a raw REST body `raw_input`.)
    let raw_input = request.raw_input;
    let mut inputs: Vec<Option<InputTensor>> = request.inputs.into_iter().map(Some).collect();
    let mut checked: Vec<Option<(Tensor, Option<ShmTarget>)>> =
        (0..inputs.len()).map(|_| None).collect();
    for &i in &order {
        let Some(mut input) = inputs[i].take() else {
            continue;
        };
        let Some(spec) = model.input(&input.name) else {
            continue;
        };
        let datatype = check_datatype(&input, spec, m, &prefix)?;
        check_shape(model, spec, &input, m, &prefix)?;
        // Triton sizes a batch of 0 as the shape without its batch dimension; sizes that agree
        // only because of that are refused all the same (the tensor itself holds nothing).
        let zero_batch = model.max_batch_size > 0 && batch_size == Some(0);
        let counted = if zero_batch {
            input.shape.get(1..).unwrap_or(&[])
        } else {
            &input.shape[..]
        };
        let count = element_count(counted, &input.name)?;
        match byte_size(datatype, count, &input.name)? {
            Some(expected) => {
                let got = input.byte_len();
                let expected = if zero_batch && expected == got {
                    0
                } else {
                    expected
                };
                if expected != got {
                    return Err(Error::invalid_arg(format!(
                        "{prefix}input byte size mismatch for input '{}' for model '{m}'. Expected {expected}, got {got}",
                        shown_name(&input, raw_input)
                    )));
                }
            }
            None => {
                // Strings are checked element by element: their bytes are needed here.
                input.read_region()?;
                let count = if zero_batch && !input.data.is_empty() {
                    0
                } else {
                    count
                };
                check_bytes_elements(
                    &input.data,
                    count,
                    shown_name(&input, raw_input),
                    m,
                    &prefix,
                )?
            }
        }
        checked[i] = Some((
            Tensor {
                name: input.name,
                datatype,
                shape: input.shape,
                data: input.data,
            },
            input.shm,
        ));
    }
    let (inputs, input_regions) = checked.into_iter().flatten().unzip();

    Ok(Validated {
        inputs,
        input_regions,
        outputs,
        batch_size: batch_size.unwrap_or(1),
    })
}

/// The input's name as Triton's messages give it: the input of a raw body is `raw_input`.
fn shown_name(input: &InputTensor, raw_input: bool) -> &str {
    if raw_input { "raw_input" } else { &input.name }
}

/// The first name that comes again, in order. A set, not a scan of those before: a hostile
/// request may carry a million inputs.
fn first_repeated<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

/// Too many inputs, or required ones missing: Triton's message lists the inputs in its map's
/// order (and, when none is missing, ends the missing list with a lone `]`, as Triton does).
fn check_input_count(
    model: &Model,
    inputs: &[InputTensor],
    order: &[usize],
    prefix: &str,
) -> Result<()> {
    let required = model.inputs.iter().filter(|s| !s.optional).count();
    if inputs.len() <= model.inputs.len() && inputs.len() >= required {
        return Ok(());
    }
    let quoted = |names: &mut dyn Iterator<Item = &str>| {
        names
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let got = format!(
        "[{}]",
        quoted(&mut order.iter().map(|&i| inputs[i].name.as_str()))
    );
    let missing = quoted(
        &mut model
            .inputs
            .iter()
            .filter(|s| !s.optional && !inputs.iter().any(|i| i.name == s.name))
            .map(|s| s.name.as_str()),
    );
    let missing = if missing.is_empty() {
        "]".to_string()
    } else {
        format!("[{missing}]")
    };
    let expected = if required == model.inputs.len() {
        format!("expected {required} inputs")
    } else {
        format!(
            "expected number of inputs between {required} and {}",
            model.inputs.len()
        )
    };
    Err(Error::invalid_arg(format!(
        "{prefix}{expected} but got {} inputs for model '{}'. Got input(s) {got}, but missing required input(s) {missing}. Please provide all required input(s).",
        inputs.len(),
        model.name
    )))
}

fn check_datatype(
    input: &InputTensor,
    spec: &TensorSpec,
    model: &str,
    prefix: &str,
) -> Result<DataType> {
    match input.parsed_datatype() {
        Some(dt) if dt == spec.datatype => Ok(dt),
        parsed => {
            let got = if parsed.is_some() {
                input.datatype.as_str()
            } else {
                "INVALID"
            };
            Err(Error::invalid_arg(format!(
                "{prefix}inference input '{}' data-type is '{got}', but model '{model}' expects '{}'",
                input.name, spec.datatype
            )))
        }
    }
}

/// The input's shape against the configuration.
fn check_shape(
    model: &Model,
    spec: &TensorSpec,
    input: &InputTensor,
    m: &str,
    prefix: &str,
) -> Result<()> {
    let dims = if model.max_batch_size > 0 {
        input.shape.get(1..).unwrap_or(&[])
    } else {
        &input.shape[..]
    };
    let batch_ok = model.max_batch_size == 0 || input.shape.first().is_some_and(|&b| b >= 0);
    let mut matches = batch_ok && dims.len() == spec.dims.len();
    if matches {
        for (&got, &want) in dims.iter().zip(&spec.dims) {
            if got == -1 {
                return Err(Error::invalid_arg(format!(
                    "{prefix}All input dimensions should be specified for input '{}' for model '{m}', got {}",
                    input.name,
                    format_shape(&input.shape)
                )));
            }
            if got < 0 || (want != -1 && got != want) {
                matches = false;
                break;
            }
        }
    }
    if matches {
        return Ok(());
    }
    let note = if model.max_batch_size > 0 {
        BATCH_NOTE
    } else {
        ""
    };
    Err(Error::invalid_arg(format!(
        "{prefix}unexpected shape for input '{}' for model '{m}'. Expected {}, got {}. {note}",
        input.name,
        format_shape(&model.metadata_shape(spec)),
        format_shape(&input.shape)
    )))
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
