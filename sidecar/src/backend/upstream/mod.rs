//! The upstream backend: a model server in the same pod (Triton, KServe's ModelServer,
//! MLServer, ...) spoken to over V2 gRPC on loopback. The sidecar discovers its models, keeps
//! their readiness, and forwards plain inference to it; everything the protocol offers on top
//! (binary data and compression toward the client, classification, client shared memory) is done
//! by the sidecar's own front ends and pipeline, so it works whatever the upstream supports.

mod discovery;

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use infergate_proto::DataType;
use infergate_proto::config::UpstreamConfig;
use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use infergate_proto::inference::{InferParameter, ModelInferRequest};
use tokio::sync::Semaphore;
use tonic::transport::{Channel, Endpoint};

pub use discovery::{UpstreamLoader, run_discovery};

use crate::core::model::{Backend, Execution};
use crate::core::params::ParamValue;
use crate::error::{Code, Error, Result};
use crate::tensor::Tensor;

/// A connection to the upstream and the limits that apply to it.
pub struct Upstream {
    pub url: String,
    client: GrpcInferenceServiceClient<Channel>,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
}

impl Upstream {
    /// A lazily connecting client: the sidecar starts whether or not the upstream is up.
    pub fn new(config: &UpstreamConfig, max_message_bytes: usize) -> Result<Self> {
        let address = config.url.replacen("grpc://", "http://", 1);
        let endpoint = Endpoint::from_shared(address)
            .map_err(|e| Error::invalid_arg(format!("invalid upstream url '{}': {e}", config.url)))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(16 << 20))
            .initial_connection_window_size(Some(32 << 20));
        let client = GrpcInferenceServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes);
        Ok(Upstream {
            url: config.url.clone(),
            client,
            timeout: Duration::from_secs(config.timeout_seconds),
            in_flight: Arc::new(Semaphore::new(config.max_concurrency as usize)),
        })
    }

    pub fn client(&self) -> GrpcInferenceServiceClient<Channel> {
        self.client.clone()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Maps an upstream failure to the protocol's error the client sees.
pub fn upstream_error(status: tonic::Status, url: &str) -> Error {
    match status.code() {
        tonic::Code::Unavailable => Error::unavailable(format!(
            "upstream model server {url} is unavailable: {}",
            status.message()
        )),
        tonic::Code::DeadlineExceeded => Error::unavailable(format!(
            "upstream model server {url} did not answer in time"
        )),
        tonic::Code::InvalidArgument => Error::invalid_arg(status.message().to_string()),
        tonic::Code::NotFound => Error::not_found(status.message().to_string()),
        tonic::Code::Unimplemented => Error::unsupported(status.message().to_string()),
        tonic::Code::AlreadyExists => Error::already_exists(status.message().to_string()),
        tonic::Code::Cancelled => Error::new(Code::Cancelled, status.message().to_string()),
        _ => Error::internal(format!("upstream model server {url}: {}", status.message())),
    }
}

/// One upstream model as a backend.
pub struct UpstreamModel {
    upstream: Arc<Upstream>,
    name: String,
    version: String,
}

impl UpstreamModel {
    pub fn new(upstream: Arc<Upstream>, name: String, version: String) -> Self {
        UpstreamModel {
            upstream,
            name,
            version,
        }
    }

    fn request(&self, execution: &Execution<'_>) -> ModelInferRequest {
        let mut parameters = std::collections::HashMap::new();
        // Sequence and custom parameters go through: a model that keeps its own state, or an
        // upstream with its own sequence batcher, needs them.
        for (key, value) in execution.parameters.iter() {
            let choice = match value {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
                ParamValue::Uint(u) => ParameterChoice::Int64Param(*u as i64),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
                ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            parameters.insert(
                key.clone(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            );
        }
        ModelInferRequest {
            model_name: self.name.clone(),
            model_version: self.version.clone(),
            id: String::new(),
            parameters,
            inputs: execution
                .inputs
                .iter()
                .map(|t| InferInputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype.as_protocol().to_string(),
                    shape: t.shape.clone(),
                    parameters: Default::default(),
                    contents: None,
                })
                .collect(),
            outputs: execution
                .outputs
                .iter()
                .map(|name| InferRequestedOutputTensor {
                    name: name.clone(),
                    parameters: Default::default(),
                })
                .collect(),
            // Reference-counted slices of the client's request: not copied until encoding.
            raw_input_contents: execution.inputs.iter().map(|t| t.data.clone()).collect(),
        }
    }
}

impl Backend for UpstreamModel {
    fn execute<'a>(&'a self, execution: Execution<'a>) -> BoxFuture<'a, Result<Vec<Tensor>>> {
        let request = self.request(&execution);
        async move {
            let _permit = self
                .upstream
                .in_flight
                .acquire()
                .await
                .map_err(|_| Error::unavailable("the upstream client is shutting down"))?;
            let mut client = self.upstream.client();
            let call = client.model_infer(request);
            let response = match tokio::time::timeout(self.upstream.timeout, call).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(status)) => return Err(upstream_error(status, &self.upstream.url)),
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "upstream model server {} did not answer within {} s",
                        self.upstream.url,
                        self.upstream.timeout.as_secs()
                    )));
                }
            };
            let mut raw = response.raw_output_contents.into_iter();
            let mut outputs = Vec::with_capacity(response.outputs.len());
            for output in response.outputs {
                let datatype = DataType::from_protocol(&output.datatype).ok_or_else(|| {
                    Error::internal(format!(
                        "upstream returned output '{}' with datatype '{}'",
                        output.name, output.datatype
                    ))
                })?;
                let data = match output.contents {
                    Some(contents) => crate::grpc::convert::typed_contents(
                        contents,
                        &output.datatype,
                        &output.name,
                        &self.name,
                    )?,
                    None => raw.next().unwrap_or_default(),
                };
                outputs.push(Tensor::new(output.name, datatype, output.shape, data));
            }
            Ok(outputs)
        }
        .boxed()
    }
}
