//! A generate request's body into an inference request, as Triton's HTTP front end converts it
//! (`GenerateRequestClass::ConvertGenerateRequest`): every top-level key names a model input,
//! whose tensor the value is, or else a request parameter; the `parameters` object's keys are
//! read the same way. Shapes come from the model's metadata, the value's element count filling
//! its variable dimensions.

use bytes::Bytes;
use infergate_proto::DataType;

use crate::core::model::Model;
use crate::core::params::{ParamValue, Parameters};
use crate::core::request::{InferRequest, InputTensor};
use crate::error::{Error, Result, request_prefix};
use crate::json::data::{DataError, decode_value, for_each_scalar};
use crate::json::{self, Number, Value};

/// What a generate body may hold.
#[derive(Clone, Copy)]
pub struct Limits {
    /// JSON nesting depth.
    pub max_depth: u32,
    /// Bytes of all input tensors together.
    pub max_input_bytes: u64,
}

/// The key whose object holds more inputs and parameters (Triton's one nested schema).
const NESTED: &str = "parameters";

/// Decodes `body`, a generate request to `model` (`version` as the path gave it).
pub fn decode(model: &Model, version: &str, body: &[u8], limits: Limits) -> Result<InferRequest> {
    let doc =
        json::parse(body, limits.max_depth).map_err(crate::http::request_body::body_json_error)?;
    let mut converter = Converter {
        model,
        limits,
        request: InferRequest {
            model_name: model.name.clone(),
            model_version: version.to_string(),
            plain_parameters: true,
            ..Default::default()
        },
        consumed: 0,
    };
    if let Some(id) = doc.get("id") {
        converter.request.id = match id {
            Value::String(s) => String::from_utf8_lossy(s).into_owned(),
            _ => {
                return Err(Error::internal(
                    "Unable to parse 'id': attempt to access JSON non-string as string",
                ));
            }
        };
    }
    let Value::Object(members) = &doc else {
        return Err(Error::internal("attempt to get members for non-object"));
    };
    for (key, _) in members {
        let key = String::from_utf8_lossy(key);
        if key == NESTED {
            converter.nested(&doc)?;
        } else {
            converter.exact(&key, &doc)?;
        }
    }
    Ok(converter.request)
}

struct Converter<'m> {
    model: &'m Model,
    limits: Limits,
    request: InferRequest,
    /// Bytes of the inputs added so far.
    consumed: u64,
}

impl Converter<'_> {
    /// The `parameters` object: its keys are inputs or parameters too.
    fn nested(&mut self, doc: &Value<'_>) -> Result<()> {
        if self.model.input(NESTED).is_some() {
            return Err(Error::invalid_arg(format!(
                "Keyword '{NESTED}' for nested schema also given as input tensor name"
            )));
        }
        // As Triton's accessors, by name: a repeated key reads its first value each time.
        let (object, members) = match doc.get(NESTED) {
            Some(object @ Value::Object(members)) => (object, members),
            _ => {
                return Err(Error::internal(format!(
                    "Expected JSON object for keyword: '{NESTED}': attempt to access JSON non-object as object"
                )));
            }
        };
        for (key, _) in members {
            self.exact(&String::from_utf8_lossy(key), object)
                .map_err(|e| prefixed(e, &format!("Converting keyword: '{NESTED}'")))?;
        }
        Ok(())
    }

    /// One key: the input it names, or else a parameter.
    fn exact(&mut self, name: &str, holder: &Value<'_>) -> Result<()> {
        let Some(value) = holder.get(name) else {
            return Ok(());
        };
        match self.model.input(name) {
            None => {
                let value = parameter(name, value)?;
                insert_first(&mut self.request.parameters, name, value);
                Ok(())
            }
            Some(spec) => {
                let (datatype, shape) = (spec.datatype, self.model.metadata_shape(spec));
                self.input(name, value, datatype, shape)
            }
        }
    }

    fn input(
        &mut self,
        name: &str,
        value: &Value<'_>,
        datatype: DataType,
        model_shape: Vec<i64>,
    ) -> Result<()> {
        // The count that shapes the tensor is the outer array's: the value is meant to be a
        // scalar or a flat list.
        let outer_count = match value {
            Value::Array(items) => items.len() as u64,
            _ => 1,
        };
        // BYTES: the strings' bytes (with their length prefixes) and how many there are.
        let (byte_size, expected) = match datatype.element_size() {
            Some(size) => (outer_count.saturating_mul(size as u64), outer_count),
            None => bytes_size(value)?,
        };
        if byte_size == 0 {
            // Added without a shape or bytes, for validation to judge.
            return self.add(InputTensor::inline(
                name.to_string(),
                datatype.as_protocol().to_string(),
                Vec::new(),
                Bytes::new(),
            ));
        }
        let max = self.limits.max_input_bytes;
        if byte_size.saturating_add(self.consumed) > max {
            return Err(Error::invalid_arg(format!(
                "request size of {} bytes with input '{name}' of size {byte_size} bytes exceeds the maximum allowed input size of {max}. Use --http-max-input-size to increase the limit.",
                self.consumed
            )));
        }
        self.consumed += byte_size;
        let shape = fill_shape(model_shape, outer_count).ok_or_else(|| {
            Error::invalid_arg(format!(
                "The schema can not convert input '{name}' to tensor with proper shape"
            ))
        })?;
        if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
            return Err(Error::invalid_arg(format!(
                "receiving {datatype} data via JSON is not supported. Please use the binary data format for input {name}"
            )));
        }
        // BYTES elements are counted by their bytes, which `bytes_size` has summed: every
        // string fits, whatever the nesting, so all of them are expected.
        let data = decode_value(value, datatype, expected).map_err(|e| match e {
            DataError::WrongType(msg) => Error::internal(format!("Unable to parse 'data': {msg}")),
            DataError::TooMany => Error::internal(
                "Unable to parse 'data': Shape does not match true shape of 'data' field",
            ),
            DataError::TooFew => {
                Error::internal("Failed to parse 'data' field: shape does not match true shape")
            }
            DataError::Json(e) => crate::http::request_body::body_json_error(e),
        })?;
        self.add(InputTensor::inline(
            name.to_string(),
            datatype.as_protocol().to_string(),
            shape,
            Bytes::from(data),
        ))
    }

    /// Adds an input, refusing a name given twice as the request is built (Triton's order: the
    /// keys after it are not read).
    fn add(&mut self, input: InputTensor) -> Result<()> {
        if self.request.inputs.iter().any(|i| i.name == input.name) {
            return Err(Error::invalid_arg(format!(
                "{}input '{}' already exists in request",
                request_prefix(&self.request.id),
                input.name
            )));
        }
        self.request.inputs.push(input);
        Ok(())
    }
}

/// A request parameter from a JSON value: string, integer, boolean or other number.
fn parameter(name: &str, value: &Value<'_>) -> Result<ParamValue> {
    Ok(match value {
        Value::String(s) => ParamValue::String(String::from_utf8_lossy(s).into_owned()),
        Value::Bool(b) => ParamValue::Bool(*b),
        Value::Number(Number::Int(i)) => ParamValue::Int(*i),
        Value::Number(Number::Uint(u)) => match i64::try_from(*u) {
            Ok(i) => ParamValue::Int(i),
            // Beyond a signed integer, a double (what Triton's accessors make of it).
            Err(_) => ParamValue::Double(*u as f64),
        },
        Value::Number(Number::Float(f)) => ParamValue::Double(*f),
        _ => {
            return Err(Error::invalid_arg(format!(
                "parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )));
        }
    })
}

/// A key given twice is read by name both times (its first value), so the first value stays.
fn insert_first(parameters: &mut Parameters, name: &str, value: ParamValue) {
    if parameters.get(name).is_none() {
        parameters.insert(name, value);
    }
}

/// The serialized size of a BYTES value (each string's length plus its 4-byte prefix) and its
/// number of strings.
fn bytes_size(value: &Value<'_>) -> Result<(u64, u64)> {
    let (mut size, mut count) = (0u64, 0u64);
    for_each_scalar(value, &mut |scalar| match scalar {
        Value::String(s) => {
            size += s.len() as u64 + 4;
            count += 1;
            Ok(())
        }
        _ => Err(Error::internal(
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        )),
    })?;
    Ok((size, count))
}

/// The model's shape with `count` elements spread over it: the fixed dimensions must divide
/// the count; the innermost variable one takes what remains and the others are 1. `None` when
/// the count does not fit.
fn fill_shape(mut shape: Vec<i64>, count: u64) -> Option<Vec<i64>> {
    let mut left = count;
    for &d in shape.iter().rev() {
        if d != -1 {
            let d = u64::try_from(d).ok().filter(|&d| d > 0)?;
            if !left.is_multiple_of(d) {
                return None;
            }
            left /= d;
        }
    }
    for d in shape.iter_mut().rev() {
        if *d == -1 {
            *d = i64::try_from(left).ok()?;
            left = 1;
        }
    }
    (left == 1).then_some(shape)
}

/// Triton's `RETURN_MSG_IF_ERR`: the same code, the message after `context`.
fn prefixed(e: Error, context: &str) -> Error {
    Error {
        message: format!("{context}: {}", e.message),
        ..e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_fills_the_innermost_variable_dimension() {
        assert_eq!(fill_shape(vec![-1, 16], 16), Some(vec![1, 16]));
        assert_eq!(fill_shape(vec![-1, 16], 32), Some(vec![2, 16]));
        assert_eq!(fill_shape(vec![1, 1], 1), Some(vec![1, 1]));
        assert_eq!(fill_shape(vec![1, -1], 5), Some(vec![1, 5]));
        assert_eq!(fill_shape(vec![-1, -1], 5), Some(vec![1, 5]));
        assert_eq!(fill_shape(vec![-1], 3), Some(vec![3]));
        assert_eq!(fill_shape(vec![], 1), Some(vec![]));
    }

    #[test]
    fn a_count_that_does_not_fit_the_shape_is_refused() {
        assert_eq!(fill_shape(vec![-1, 16], 15), None);
        assert_eq!(fill_shape(vec![1, 1], 2), None);
        assert_eq!(fill_shape(vec![], 2), None);
        assert_eq!(fill_shape(vec![0], 1), None);
    }

    #[test]
    fn parameters_take_the_json_kind_and_refuse_the_rest() {
        let parse = |text: &'static str| json::parse(text.as_bytes(), 10).unwrap();
        assert_eq!(
            parameter("p", &parse("\"x\"")).unwrap(),
            ParamValue::String("x".into())
        );
        assert_eq!(parameter("p", &parse("-3")).unwrap(), ParamValue::Int(-3));
        assert_eq!(parameter("p", &parse("7")).unwrap(), ParamValue::Int(7));
        assert_eq!(
            parameter("p", &parse("18446744073709551615")).unwrap(),
            ParamValue::Double(18446744073709551615.0)
        );
        assert_eq!(
            parameter("p", &parse("0.5")).unwrap(),
            ParamValue::Double(0.5)
        );
        assert_eq!(
            parameter("p", &parse("true")).unwrap(),
            ParamValue::Bool(true)
        );
        for text in ["null", "[1]", "{\"a\":1}"] {
            let e = parameter("p", &parse(text)).unwrap_err();
            assert_eq!(e.code, crate::error::Code::InvalidArg);
            assert_eq!(
                e.message,
                "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."
            );
        }
    }

    #[test]
    fn bytes_are_sized_by_their_strings_at_any_depth() {
        let v = json::parse(br#"["ab",["c",""]]"#, 10).unwrap();
        assert_eq!(bytes_size(&v).unwrap(), (2 + 1 + 12, 3));
        let v = json::parse(br#"["ab",1]"#, 10).unwrap();
        assert_eq!(
            bytes_size(&v).unwrap_err().message,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
        );
    }
}
