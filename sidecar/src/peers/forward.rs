//! A request handed to the peer that holds its sequence, over that peer's gRPC port: the
//! request as the gRPC message (tensors as raw bytes), the peer's answer back as the response
//! the client gets. Tensors in the client's shared memory cannot travel: the client's regions
//! are in this pod's memory, not the peer's.

use std::collections::HashMap;
use std::time::Duration;

use infergate_proto::DataType;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use infergate_proto::inference::{InferParameter, ModelInferRequest, ModelInferResponse};

use super::membership::PeerClient;
use crate::core::params::{ParamValue, Parameters};
use crate::core::request::{InferRequest, InferResponse, RequestedOutput};
use crate::error::{Code, Error, Result};
use crate::tensor::Tensor;

/// The metadata key that marks a request forwarded by a peer: the peers asked so far, in order.
pub const ROUTE_METADATA: &str = "infergate-sequence-route";

/// How long a peer may take to answer a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a forward did not produce the peer's answer.
pub enum Failed {
    /// Nothing reached the peer (it is gone): the caller may try another.
    Unreachable(Error),
    /// The peer answered with an error, or did not answer in time: the client's answer.
    Answered(Error),
}

/// The metadata key that marks a client's call a sidecar has sent to a canary's sidecar: the
/// variant it was given, so that it is not split again.
pub const VARIANT_METADATA: &str = "infergate-variant";

/// Why a request is forwarded, which its metadata says.
pub enum Mark<'a> {
    /// A request of a sequence, with the peers asked so far (this sidecar last).
    Route(&'a [&'a str]),
    /// A client's call given to a canary.
    Variant(&'a str),
}

/// Sends `request` to `peer`, marked with why, and the trace context.
pub async fn forward(
    peer: &PeerClient,
    address: &str,
    request: &InferRequest,
    mark: Mark<'_>,
    context: &crate::trace::ContextHeaders,
) -> std::result::Result<InferResponse, Failed> {
    let message = message(request).map_err(Failed::Answered)?;
    let mut call = tonic::Request::new(message);
    let metadata = call.metadata_mut();
    let (key, value) = match mark {
        Mark::Route(route) => (ROUTE_METADATA, route.join(",")),
        Mark::Variant(variant) => (VARIANT_METADATA, variant.to_string()),
    };
    if let Ok(value) = value.parse() {
        metadata.insert(key, value);
    }
    // The peer checks the caller's identity again.
    if let Some(value) = request.credential.as_deref().and_then(|c| c.parse().ok()) {
        metadata.insert("authorization", value);
    }
    for (name, value) in context {
        if let Ok(value) = value.parse() {
            metadata.insert(*name, value);
        }
    }
    let answer = tokio::time::timeout(FORWARD_TIMEOUT, peer.clone().model_infer(call)).await;
    match answer {
        Ok(Ok(response)) => response_of(response.into_inner(), request).map_err(Failed::Answered),
        // Made locally, with the transport's error as its source: the peer is gone.
        Ok(Err(status)) if std::error::Error::source(&status).is_some() => {
            Err(Failed::Unreachable(Error::unavailable(format!(
                "the replica {address} is unreachable: {}",
                status.message()
            ))))
        }
        Ok(Err(status)) => Err(Failed::Answered(answered(&status))),
        Err(_) => Err(Failed::Answered(Error::unavailable(format!(
            "the replica {address} did not answer within {} s",
            FORWARD_TIMEOUT.as_secs()
        )))),
    }
}

/// Whether the request can be sent to another pod: none of its tensors is in the client's
/// shared memory, which is this pod's.
pub fn travels(request: &InferRequest) -> bool {
    request.inputs.iter().all(|t| t.shm.is_none())
        && request.outputs.iter().all(|o| o.shm.is_none())
}

/// The peer's error, as the peer gave it to this sidecar's client.
fn answered(status: &tonic::Status) -> Error {
    let code = match status.code() {
        tonic::Code::InvalidArgument => Code::InvalidArg,
        tonic::Code::NotFound => Code::NotFound,
        tonic::Code::Unimplemented => Code::Unsupported,
        tonic::Code::AlreadyExists => Code::AlreadyExists,
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Code::Unavailable,
        tonic::Code::Cancelled => Code::Cancelled,
        _ => Code::Internal,
    };
    Error::new(code, status.message().to_string())
}

/// The request as the gRPC message; refused where a tensor is in the client's shared memory.
fn message(request: &InferRequest) -> Result<ModelInferRequest> {
    let mut inputs = Vec::with_capacity(request.inputs.len());
    let mut raw = Vec::with_capacity(request.inputs.len());
    for input in &request.inputs {
        if input.shm.is_some() {
            return Err(shared_memory_refusal(&input.name));
        }
        inputs.push(InferInputTensor {
            name: input.name.clone(),
            datatype: input.datatype.clone(),
            shape: input.shape.clone(),
            ..Default::default()
        });
        raw.push(input.data.clone());
    }
    let mut outputs = Vec::with_capacity(request.outputs.len());
    for output in &request.outputs {
        if output.shm.is_some() {
            return Err(shared_memory_refusal(&output.name));
        }
        let mut parameters = HashMap::new();
        if output.classification > 0 {
            parameters.insert(
                "classification".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::Int64Param(i64::from(
                        output.classification,
                    ))),
                },
            );
        }
        outputs.push(InferRequestedOutputTensor {
            name: output.name.clone(),
            parameters,
        });
    }
    Ok(ModelInferRequest {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        parameters: parameters(&request.parameters),
        inputs,
        outputs,
        raw_input_contents: raw,
    })
}

fn shared_memory_refusal(tensor: &str) -> Error {
    Error::unsupported(format!(
        "tensor '{tensor}' is in the client's shared memory, which the replica that holds this sequence cannot read: send the sequence's tensors in the request, or send the sequence to one replica"
    ))
}

/// Parameters as a client's gRPC request carries them: unsigned numbers as int64 (the
/// sequence id, the timeout), except the priority.
fn parameters(params: &Parameters) -> HashMap<String, InferParameter> {
    params
        .iter()
        .map(|(key, value)| {
            let choice = match value {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
                ParamValue::Uint(u) if key == "priority" => ParameterChoice::Uint64Param(*u),
                ParamValue::Uint(u) => ParameterChoice::Int64Param(*u as i64),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
                ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            (
                key.clone(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            )
        })
        .collect()
}

/// The peer's answer as this sidecar's response to the client: the outputs in the order the
/// client asked for them (the peer keeps it), each returned as the client asked (binary or
/// JSON over REST).
fn response_of(answer: ModelInferResponse, request: &InferRequest) -> Result<InferResponse> {
    if answer.raw_output_contents.len() != answer.outputs.len() {
        return Err(Error::internal(
            "the replica that holds this sequence answered without raw output contents",
        ));
    }
    let mut outputs = Vec::with_capacity(answer.outputs.len());
    for (output, data) in answer.outputs.into_iter().zip(answer.raw_output_contents) {
        let datatype = DataType::from_protocol(&output.datatype).ok_or_else(|| {
            Error::internal(format!(
                "the replica that holds this sequence answered with datatype '{}'",
                output.datatype
            ))
        })?;
        outputs.push(Tensor::new(output.name, datatype, output.shape, data));
    }
    let requested = if request.outputs.is_empty() {
        outputs
            .iter()
            .map(|t| RequestedOutput {
                binary: request.default_binary,
                ..RequestedOutput::named(t.name.clone())
            })
            .collect()
    } else {
        request.outputs.clone()
    };
    Ok(InferResponse {
        model_name: answer.model_name,
        model_version: answer.model_version,
        id: answer.id,
        parameters: Parameters::default(),
        outputs,
        requested,
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::core::request::InputTensor;

    fn request() -> InferRequest {
        let mut parameters = Parameters::default();
        parameters.insert("sequence_id", ParamValue::Uint(u64::MAX));
        parameters.insert("sequence_start", ParamValue::Bool(true));
        parameters.insert("priority", ParamValue::Uint(2));
        InferRequest {
            model_name: "m".into(),
            id: "r1".into(),
            parameters,
            inputs: vec![InputTensor::inline(
                "INPUT".into(),
                "INT32".into(),
                vec![1, 1],
                Bytes::from_static(&[7, 0, 0, 0]),
            )],
            outputs: vec![RequestedOutput {
                classification: 2,
                ..RequestedOutput::named("OUTPUT")
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_message_carries_what_a_clients_grpc_request_would() {
        let m = message(&request()).unwrap();
        assert_eq!((m.model_name.as_str(), m.id.as_str()), ("m", "r1"));
        assert_eq!(m.raw_input_contents, [Bytes::from_static(&[7, 0, 0, 0])]);
        assert_eq!(m.inputs[0].shape, [1, 1]);
        let choice = |k: &str| m.parameters[k].parameter_choice.clone();
        // As the clients send them: the id as int64 (its bits), the priority as uint64.
        assert_eq!(choice("sequence_id"), Some(ParameterChoice::Int64Param(-1)));
        assert_eq!(choice("priority"), Some(ParameterChoice::Uint64Param(2)));
        assert_eq!(
            choice("sequence_start"),
            Some(ParameterChoice::BoolParam(true))
        );
        assert_eq!(
            m.outputs[0].parameters["classification"].parameter_choice,
            Some(ParameterChoice::Int64Param(2))
        );
    }

    #[test]
    fn the_answer_keeps_the_clients_requested_outputs_or_its_default() {
        let answer = ModelInferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: "r1".into(),
            outputs: vec![Default::default()],
            raw_output_contents: vec![Bytes::from_static(&[1, 0, 0, 0])],
            ..Default::default()
        };
        let mut answer = answer;
        answer.outputs[0].name = "OUTPUT".into();
        answer.outputs[0].datatype = "INT32".into();
        answer.outputs[0].shape = vec![1, 1];
        let asked = request();
        let response = response_of(answer.clone(), &asked).unwrap();
        assert_eq!(response.requested[0].classification, 2);
        assert_eq!(response.outputs[0].datatype, DataType::Int32);
        let mut all = request();
        all.outputs.clear();
        all.default_binary = true;
        let response = response_of(answer.clone(), &all).unwrap();
        assert_eq!(response.requested[0].name, "OUTPUT");
        assert!(response.requested[0].binary);
        answer.raw_output_contents.clear();
        assert!(response_of(answer, &all).is_err());
    }
}
