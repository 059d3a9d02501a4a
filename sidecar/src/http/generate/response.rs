//! A generate response's JSON, as Triton's HTTP front end writes it
//! (`GenerateRequestClass::FinalizeResponse`): one flat object whose keys are the request id
//! (when it has one), `model_name`, `model_version`, the response's parameters and its output
//! tensors, in the byte order of their names (Triton gathers them in a sorted map; a name
//! already taken keeps its first holder, in that order). A tensor of one element is that
//! element, any other a flat array.

use std::collections::BTreeMap;

use infergate_proto::DataType;

use super::super::params::write_value;
use crate::core::params::ParamValue;
use crate::core::request::InferResponse;
use crate::error::{Error, Result};
use crate::json::{self, Writer};
use crate::tensor::Tensor;

/// One member of the object.
enum Member<'r> {
    Text(&'r str),
    Parameter(&'r ParamValue),
    Tensor(&'r Tensor),
}

/// The response as a generate JSON object. FP16 and BF16 outputs cannot be written in JSON.
pub fn encode(response: &InferResponse) -> Result<Vec<u8>> {
    let mut members: BTreeMap<&[u8], Member<'_>> = BTreeMap::new();
    if !response.id.is_empty() {
        members.insert(b"id", Member::Text(&response.id));
    }
    members.insert(b"model_name", Member::Text(&response.model_name));
    members.insert(b"model_version", Member::Text(&response.model_version));
    for (name, value) in response.parameters.iter() {
        members
            .entry(name.as_bytes())
            .or_insert(Member::Parameter(value));
    }
    for tensor in &response.outputs {
        members
            .entry(tensor.name.as_bytes())
            .or_insert(Member::Tensor(tensor));
    }

    let mut w = Writer::with_capacity(256);
    w.byte(b'{');
    for (i, (name, member)) in members.into_iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.string(name).byte(b':');
        match member {
            Member::Text(text) => {
                w.string(text.as_bytes());
            }
            Member::Parameter(value) => write_value(&mut w, value),
            Member::Tensor(tensor) => write_tensor(&mut w, tensor)?,
        }
    }
    w.byte(b'}');
    Ok(w.into_bytes())
}

fn write_tensor(w: &mut Writer, tensor: &Tensor) -> Result<()> {
    if matches!(tensor.datatype, DataType::Fp16 | DataType::Bf16) {
        return Err(Error::invalid_arg(format!(
            "sending {} data via JSON is not supported. Please use the binary data format for output",
            tensor.datatype
        )));
    }
    let one_element = tensor.shape.iter().all(|&d| d == 1);
    if !one_element {
        json::data::encode(w, tensor.datatype, &tensor.data);
        return Ok(());
    }
    let mut array = Writer::default();
    json::data::encode(&mut array, tensor.datatype, &tensor.data);
    let text = array.into_bytes();
    match text.strip_prefix(b"[").and_then(|t| t.strip_suffix(b"]")) {
        // The one element, without its array.
        Some(element) if !element.is_empty() => {
            w.buf.extend_from_slice(element);
        }
        // Bytes that hold no element at all: the empty array, as written.
        _ => {
            w.buf.extend_from_slice(&text);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::params::Parameters;
    use bytes::Bytes;

    fn response(outputs: Vec<Tensor>, parameters: Parameters, id: &str) -> InferResponse {
        InferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: id.into(),
            parameters,
            requested: outputs
                .iter()
                .map(|t| crate::core::request::RequestedOutput::named(t.name.clone()))
                .collect(),
            outputs,
        }
    }

    fn text(response: &InferResponse) -> String {
        String::from_utf8(encode(response).unwrap()).unwrap()
    }

    fn int32(name: &str, shape: Vec<i64>, values: &[i32]) -> Tensor {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::Int32, shape, Bytes::from(data))
    }

    #[test]
    fn members_are_in_byte_order_and_one_element_is_a_scalar() {
        let outputs = vec![
            int32("OUTPUT1", vec![1, 2], &[3, 4]),
            int32("OUTPUT0", vec![1, 1], &[7]),
            int32("empty", vec![0], &[]),
        ];
        let mut params = Parameters::default();
        params.insert("b_param", ParamValue::Double(0.5));
        assert_eq!(
            text(&response(outputs, params, "42")),
            r#"{"OUTPUT0":7,"OUTPUT1":[3,4],"b_param":0.5,"empty":[],"id":"42","model_name":"m","model_version":"1"}"#
        );
    }

    #[test]
    fn a_name_already_taken_keeps_its_first_holder() {
        let outputs = vec![int32("model_name", vec![1], &[1]), int32("x", vec![], &[2])];
        let mut params = Parameters::default();
        params.insert("x", ParamValue::Bool(true));
        params.insert("id", ParamValue::String("param".into()));
        assert_eq!(
            text(&response(outputs, params, "")),
            r#"{"id":"param","model_name":"m","model_version":"1","x":true}"#
        );
    }

    #[test]
    fn strings_are_written_as_text_and_half_floats_refused() {
        let mut data = Vec::new();
        crate::tensor::bytes_elements::push(&mut data, b"hello");
        let one = Tensor::new("TEXT", DataType::Bytes, vec![1, 1], Bytes::from(data));
        assert_eq!(
            text(&response(vec![one], Parameters::default(), "")),
            r#"{"TEXT":"hello","model_name":"m","model_version":"1"}"#
        );
        let half = Tensor::new("H", DataType::Fp16, vec![1], Bytes::from(vec![0u8, 0]));
        let e = encode(&response(vec![half], Parameters::default(), "")).unwrap_err();
        assert_eq!(
            e.message,
            "sending FP16 data via JSON is not supported. Please use the binary data format for output"
        );
    }
}
