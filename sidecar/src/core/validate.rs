//! Checks a request against the model's configuration, in the order and with the messages of
//! Triton's core (`InferenceRequest::Normalize`).

use infergate_proto::DataType;

use super::input_order;
use super::model::{Model, TensorSpec};
use super::request::{InferRequest, InputTensor, RequestedOutput};
use crate::error::{Error, Result, request_prefix};
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;
use crate::tensor::shape::{CountError, checked_byte_size, count_elements, format_shape};

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

    // Every input known; for a batching model, the batch size from each one's first dimension,
    // held as Triton holds it: in 32 bits, set by the first input that gives a non-zero one and
    // compared, widened again, with the others' (so -1 or 2^32 + 1 do not match themselves).
    let mut batch_size: u32 = 0;
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
        if batch_size == 0 {
            batch_size = first as u32;
        } else if first != i64::from(batch_size) {
            return Err(Error::invalid_arg(format!(
                "{prefix}input '{}' batch size does not match other inputs for '{m}'",
                input.name
            )));
        }
    }
    if model.max_batch_size > 0 && batch_size > model.max_batch_size {
        return Err(Error::invalid_arg(format!(
            "{prefix}inference request batch-size must be <= {} for '{m}'",
            model.max_batch_size
        )));
    }

    // Each input's datatype, shape and size, in the same order. (Triton's messages call the
    // input of a raw REST body `raw_input`.)
    let raw_input = request.raw_input;
    let mut inputs: Vec<Option<InputTensor>> = request.inputs.into_iter().map(Some).collect();
    // What the core lets through and the model's backend then refuses, once every input passed.
    let mut refused_by_model: Option<Error> = None;
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
        // From here the shape is the one the model runs with: Triton's batch size in front, or,
        // for a batch of 0, no batch dimension at all (Triton sizes it so; sizes that agree only
        // because of that are refused all the same, the tensor itself holding nothing).
        let zero_batch = model.max_batch_size > 0 && batch_size == 0;
        if model.max_batch_size > 0 && !zero_batch {
            input.shape[0] = i64::from(batch_size);
        }
        let counted = if zero_batch {
            input.shape.get(1..).unwrap_or(&[])
        } else {
            &input.shape[..]
        };
        match datatype.element_size() {
            Some(element_size) => {
                let name = shown_name(&input, raw_input);
                let expected = tensor_byte_size(counted, element_size, name)?;
                let got = input.byte_len();
                let expected = if zero_batch && expected == got {
                    0
                } else {
                    expected
                };
                if expected != got {
                    return Err(Error::invalid_arg(format!(
                        "{prefix}input byte size mismatch for input '{name}' for model '{m}'. Expected {expected}, got {got}"
                    )));
                }
            }
            None => {
                let count = string_element_count(counted, shown_name(&input, raw_input))?;
                // Strings are checked element by element: their bytes are needed here.
                input.read_region()?;
                let name = shown_name(&input, raw_input);
                let count = if zero_batch && !input.data.is_empty() {
                    0
                } else {
                    count
                };
                if let Some(refusal) = check_bytes_elements(&input.data, count, name, m, &prefix)? {
                    refused_by_model.get_or_insert(refusal);
                }
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
    if let Some(refusal) = refused_by_model {
        return Err(refusal);
    }
    let (inputs, input_regions) = checked.into_iter().flatten().unzip();

    Ok(Validated {
        inputs,
        input_regions,
        outputs,
        // A model without batching runs a request as one; a batching one with the batch given
        // (0 included).
        batch_size: if model.max_batch_size > 0 {
            u64::from(batch_size)
        } else {
            1
        },
    })
}

/// The input's name as Triton's messages give it: the input of a raw body is `raw_input`.
fn shown_name(input: &InputTensor, raw_input: bool) -> &str {
    if raw_input { "raw_input" } else { &input.name }
}

/// Bytes of a fixed-size tensor, refused as Triton's core refuses a shape it cannot size (its
/// `GetByteSize`: these words carry no request id).
fn tensor_byte_size(shape: &[i64], element_size: usize, name: &str) -> Result<u64> {
    let overflow = || {
        Error::invalid_arg(format!(
            "byte size for tensor '{name}' exceeds maximum size of {}",
            i64::MAX
        ))
    };
    match count_elements(shape) {
        Ok(count) => checked_byte_size(count, element_size).ok_or_else(overflow),
        Err(CountError::InvalidDimension) => Err(Error::invalid_arg(format!(
            "tensor '{name}' contains an invalid dimension {}",
            format_shape(shape)
        ))),
        Err(CountError::Overflow) => Err(overflow()),
    }
}

/// Elements of a BYTES tensor, refused in the words of Triton's core (`GetElementCount`).
fn string_element_count(shape: &[i64], name: &str) -> Result<u64> {
    count_elements(shape).map_err(|e| match e {
        CountError::InvalidDimension => Error::invalid_arg(format!(
            "tensor '{name}' contains an invalid dimension in shape {}",
            format_shape(shape)
        )),
        CountError::Overflow => Error::invalid_arg(format!(
            "element count for tensor '{name}' exceeds maximum size of {}",
            i64::MAX
        )),
    })
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
                // Triton's name for a datatype it does not know.
                "<invalid>"
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
    let mut matches = dims.len() == spec.dims.len();
    if matches {
        for (&got, &want) in dims.iter().zip(&spec.dims) {
            if got == -1 {
                return Err(Error::invalid_arg(format!(
                    "{prefix}All input dimensions should be specified for input '{}' for model '{m}', got {}",
                    input.name,
                    format_shape(&input.shape)
                )));
            }
            // Other negative dimensions pass a variable one here; sizing refuses them.
            if want != -1 && got != want {
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

/// A BYTES tensor's elements counted as Triton's core counts them (`ValidateBytesInputs`): each
/// length indicator whole, an element that runs past the end taking the rest of the buffer and
/// counting all the same, one too many ending the count. When the count is right, such an element
/// is left to the model's backend, which refuses it (`ValidateStringBuffer`): that refusal is
/// returned, to be raised once every input passed the core's checks.
fn check_bytes_elements(
    data: &[u8],
    expected: u64,
    name: &str,
    model: &str,
    prefix: &str,
) -> Result<Option<Error>> {
    let mut rest = data;
    let mut checked = 0u64;
    let mut cut = None;
    while !rest.is_empty() {
        let Some((indicator, after)) = rest.split_first_chunk::<4>() else {
            return Err(Error::invalid_arg(format!(
                "{prefix}incomplete string length indicator for inference input '{name}' for model '{model}', expecting 4 bytes but only {} bytes available. Please make sure the string length indicator is in one buffer.",
                rest.len()
            )));
        };
        checked += 1;
        if checked > expected {
            return Err(Error::invalid_arg(format!(
                "{prefix}unexpected number of string elements {checked} for inference input '{name}' for model '{model}', expecting {expected}"
            )));
        }
        let length = u32::from_le_bytes(*indicator);
        rest = match after.get(length as usize..) {
            Some(rest) => rest,
            None => {
                cut = Some((length, after.len()));
                &[]
            }
        };
    }
    if checked != expected {
        return Err(Error::invalid_arg(format!(
            "{prefix}expected {expected} string elements for inference input '{name}' for model '{model}', got {checked}"
        )));
    }
    Ok(cut.map(|(length, available)| {
        Error::invalid_arg(format!(
            "incomplete string data for inference input '{name}', expecting string of length {length} but only {available} bytes available"
        ))
        .from_model()
    }))
}

/// Whether JSON may carry this datatype (FP16 and BF16 may only travel as binary).
pub fn json_capable(datatype: DataType) -> bool {
    !matches!(datatype, DataType::Fp16 | DataType::Bf16)
}
