//! REST `parameters` objects: request-level (sequence, priority, timeout, binary_data_output,
//! custom) and tensor-level (binary data, classification, shared memory).

use crate::core::params::{ParamValue, Parameters};
use crate::error::{Error, Result};
use crate::json::{Number, Value, Writer};

fn type_err(key: &str, detail: &str) -> Error {
    Error::internal(format!("Unable to parse '{key}': {detail}"))
}

const NOT_BOOL: &str = "attempt to access JSON non-boolean as boolean";
const NOT_UINT: &str = "attempt to access JSON non-unsigned-integer as unsigned-integer";
const NOT_STRING: &str = "attempt to access JSON non-string as string";

/// Parses request-level parameters; returns them and the `binary_data_output` flag.
pub fn parse_request_parameters(value: &Value<'_>) -> Result<(Parameters, bool)> {
    let Value::Object(members) = value else {
        return Err(Error::internal(
            "failed to get request params.: attempt to get members for non-object",
        ));
    };
    let mut params = Parameters::default();
    let mut binary_output = false;
    for (key, v) in members {
        let key = String::from_utf8_lossy(key).into_owned();
        match key.as_str() {
            "sequence_id" => {
                let id = match v {
                    Value::Number(Number::Uint(u)) => ParamValue::Uint(*u),
                    Value::String(s) => ParamValue::String(String::from_utf8_lossy(s).into_owned()),
                    // Triton tries unsigned first, then string; the string error is what shows.
                    _ => return Err(type_err(&key, NOT_STRING)),
                };
                params.insert(key, id);
            }
            "sequence_start" | "sequence_end" => {
                let b = v.as_bool().ok_or_else(|| type_err(&key, NOT_BOOL))?;
                params.insert(key, ParamValue::Bool(b));
            }
            "priority" | "timeout" => {
                let u = v.as_u64().ok_or_else(|| type_err(&key, NOT_UINT))?;
                params.insert(key, ParamValue::Uint(u));
            }
            "binary_data_output" => {
                binary_output = v.as_bool().ok_or_else(|| type_err(&key, NOT_BOOL))?
            }
            _ if key.starts_with("triton_") => {
                return Err(Error::invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ));
            }
            _ => {
                let value = match v {
                    Value::Bool(b) => ParamValue::Bool(*b),
                    Value::Number(Number::Uint(u)) => match i64::try_from(*u) {
                        Ok(i) => ParamValue::Int(i),
                        Err(_) => ParamValue::Uint(*u),
                    },
                    Value::Number(Number::Int(i)) => ParamValue::Int(*i),
                    Value::Number(Number::Float(f)) => ParamValue::Double(*f),
                    Value::String(s) => ParamValue::String(String::from_utf8_lossy(s).into_owned()),
                    _ => {
                        return Err(Error::invalid_arg(format!(
                            "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                        )));
                    }
                };
                params.insert(key, value);
            }
        }
    }
    Ok((params, binary_output))
}

/// Tensor-level parameters of an input or output.
#[derive(Debug, Default)]
pub struct TensorParams {
    pub binary_data_size: Option<u64>,
    pub binary_data: Option<bool>,
    pub classification: Option<u32>,
    pub shm_region: Option<String>,
    pub shm_offset: Option<u64>,
    pub shm_byte_size: Option<u64>,
}

pub fn tensor_parameters(value: Option<&Value<'_>>) -> Result<TensorParams> {
    let mut p = TensorParams::default();
    let Some(value) = value else { return Ok(p) };
    let Value::Object(members) = value else {
        return Err(type_err(
            "parameters",
            "attempt to access JSON non-object as object",
        ));
    };
    for (key, v) in members {
        let key = String::from_utf8_lossy(key);
        let uint = || v.as_u64().ok_or_else(|| type_err(&key, NOT_UINT));
        match key.as_ref() {
            "binary_data_size" => p.binary_data_size = Some(uint()?),
            "binary_data" => {
                p.binary_data = Some(v.as_bool().ok_or_else(|| type_err(&key, NOT_BOOL))?)
            }
            "classification" => {
                let k = v.as_u64().ok_or_else(|| {
                    Error::internal(format!("Unable to set 'classification': {NOT_UINT}"))
                })?;
                p.classification = Some(u32::try_from(k).unwrap_or(u32::MAX));
            }
            "shared_memory_region" => {
                p.shm_region = Some(
                    v.as_str()
                        .ok_or_else(|| type_err(&key, NOT_STRING))?
                        .to_string(),
                );
            }
            "shared_memory_offset" => p.shm_offset = Some(uint()?),
            "shared_memory_byte_size" => p.shm_byte_size = Some(uint()?),
            _ => {}
        }
    }
    Ok(p)
}

/// Writes response parameters as a JSON object.
pub fn write_parameters(w: &mut Writer, params: &Parameters) -> Result<()> {
    w.byte(b'{');
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.key(k);
        write_value(w, v);
    }
    w.byte(b'}');
    Ok(())
}

/// One parameter's value as its JSON kind.
pub(super) fn write_value(w: &mut Writer, value: &ParamValue) {
    match value {
        ParamValue::Bool(b) => w.bool(*b),
        ParamValue::Int(n) => w.i64(*n),
        ParamValue::Uint(n) => w.u64(*n),
        ParamValue::Double(d) => w.f64(*d),
        ParamValue::String(s) => w.string(s.as_bytes()),
    };
}
