//! An `InferResponse` into the infer answer: JSON, or JSON followed by the binary outputs as
//! separate chunks (`Inference-Header-Content-Length`), compressed if the client asked.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use infergate_proto::DataType;

use crate::core::request::InferResponse;
use crate::error::{Error, Result};
use crate::http::body::Chunks;
use crate::http::compression::{self, Encoding};
use crate::http::params::write_parameters;
use crate::json::{self, Writer};

use infergate_proto::wire::HEADER_LENGTH;

/// Whether [`response`] has much to do for `response`: at least `threshold` bytes of tensors
/// written as JSON, or compressed.
pub fn heavy_to_encode(
    response: &InferResponse,
    accept_encoding: Option<&str>,
    threshold: usize,
) -> bool {
    let compressing = compression::response_encoding(accept_encoding) != Encoding::Identity;
    let bytes: usize = response
        .outputs
        .iter()
        .zip(&response.requested)
        .filter(|(_, requested)| requested.shm.is_none() && (compressing || !requested.binary))
        .map(|(tensor, _)| tensor.data.len())
        .sum();
    bytes >= threshold
}

/// Encodes a response: JSON, then the binary chunks of binary outputs in output order.
pub fn response(
    response: &InferResponse,
    accept_encoding: Option<&str>,
) -> Result<http::Response<axum::body::Body>> {
    let mut w = Writer::with_capacity(256);
    let mut chunks: Vec<Bytes> = Vec::with_capacity(response.outputs.len() + 1);
    w.byte(b'{');
    if !response.id.is_empty() {
        w.key("id").string(response.id.as_bytes()).byte(b',');
    }
    w.key("model_name")
        .string(response.model_name.as_bytes())
        .byte(b',');
    w.key("model_version")
        .string(response.model_version.as_bytes())
        .byte(b',');
    if !response.parameters.is_empty() {
        w.key("parameters");
        write_parameters(&mut w, &response.parameters)?;
        w.byte(b',');
    }
    w.key("outputs").byte(b'[');
    for (i, (tensor, requested)) in response.outputs.iter().zip(&response.requested).enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.tensor_head(&tensor.name, tensor.datatype.as_protocol(), &tensor.shape);
        if requested.shm.is_some() {
            // The bytes are in the client's region; the entry names the tensor only.
        } else if requested.binary {
            w.byte(b',');
            w.key("parameters")
                .byte(b'{')
                .key("binary_data_size")
                .u64(tensor.data.len() as u64)
                .byte(b'}');
            chunks.push(tensor.data.clone());
        } else {
            w.byte(b',');
            if matches!(tensor.datatype, DataType::Fp16 | DataType::Bf16) {
                return Err(Error::invalid_arg(format!(
                    "sending {} data via JSON is not supported. Please use the binary data format for output",
                    tensor.datatype
                )));
            }
            w.key("data");
            json::data::encode(&mut w, tensor.datatype, &tensor.data);
        }
        w.byte(b'}');
    }
    w.byte(b']').byte(b'}');
    let header_len = w.buf.len();
    let has_binary = chunks.iter().any(|c| !c.is_empty());
    chunks.insert(0, Bytes::from(w.into_bytes()));

    let mut builder = http::Response::builder().status(StatusCode::OK);
    if has_binary {
        builder = builder
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(HEADER_LENGTH, HeaderValue::from(header_len));
    } else {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    let encoding = compression::response_encoding(accept_encoding);
    let body = match (encoding, compression::compress(encoding, &chunks)) {
        (Encoding::Identity, _) | (_, None) => axum::body::Body::new(Chunks::new(chunks)),
        (enc, Some(packed)) => {
            if let Some(v) = enc.header_value() {
                builder = builder.header(header::CONTENT_ENCODING, v);
            }
            axum::body::Body::from(packed)
        }
    };
    builder
        .body(body)
        .map_err(|e| Error::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request::RequestedOutput;
    use crate::tensor::Tensor;

    #[test]
    fn only_json_or_compressed_outputs_are_heavy_to_encode() {
        let output = |binary: bool| RequestedOutput {
            binary,
            ..RequestedOutput::named("OUTPUT0")
        };
        let mut response = InferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: String::new(),
            parameters: Default::default(),
            outputs: vec![Tensor::new(
                "OUTPUT0",
                DataType::Fp32,
                vec![256],
                Bytes::from(vec![0u8; 1024]),
            )],
            requested: vec![output(false)],
        };
        assert!(heavy_to_encode(&response, None, 1024));
        assert!(!heavy_to_encode(&response, None, 1025));
        response.requested = vec![output(true)];
        assert!(!heavy_to_encode(&response, None, 1024));
        assert!(heavy_to_encode(&response, Some("gzip"), 1024));
    }
}
