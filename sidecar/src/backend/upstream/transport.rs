//! The calls the sidecar makes to the upstream, over whichever protocol it speaks: V2 gRPC
//! (`grpc://`, preferred: raw tensor bytes, one HTTP/2 connection) or V2 REST (`http://`).
//! Both answer with the gRPC messages and `tonic::Status`, so everything above this module is
//! written once.

use std::time::Duration;

use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::{
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse,
    CudaSharedMemoryUnregisterRequest, ModelConfigRequest, ModelConfigResponse, ModelInferRequest,
    ModelInferResponse, ModelMetadataRequest, ModelMetadataResponse, ModelStreamInferResponse,
    RepositoryIndexRequest, RepositoryIndexResponse, ServerMetadataResponse,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryStatusRequest,
    SystemSharedMemoryStatusResponse, SystemSharedMemoryUnregisterRequest,
};
use infergate_proto::inference::{ServerMetadataRequest, ServerReadyRequest};

use super::answer::Answer;
use super::h2_channel::H2Channel;
use super::rest::RestClient;
use crate::trace::ContextHeaders;

/// A cheap-to-clone handle on the upstream connection.
#[derive(Clone)]
pub enum Transport {
    Grpc(GrpcInferenceServiceClient<H2Channel>),
    Rest(RestClient),
}

/// A transport with what its callers need besides: the address their errors name and how long
/// a call may wait for an answer. What the registrations of clients' regions are made through
/// (`Passthrough`), instead of the whole connection.
#[derive(Clone, Copy)]
pub struct Link<'a> {
    pub client: &'a Transport,
    pub url: &'a str,
    pub timeout: Duration,
}

impl Transport {
    /// One inference. `context` holds the trace-context headers (`traceparent`) that make the
    /// upstream's spans children of the caller's, when the request is traced.
    pub async fn model_infer(
        &self,
        request: ModelInferRequest,
        context: &ContextHeaders,
    ) -> Answer<ModelInferResponse> {
        match self {
            Transport::Grpc(c) => {
                let request = with_metadata(int64_parameters(request), context);
                inner(c.clone().model_infer(request).await)
            }
            Transport::Rest(c) => c.infer(&request, context).await,
        }
    }

    /// One request on a stream of its own, for decoupled models: their responses, which end
    /// with the one whose `triton_final_response` is true when the request asks for it. Only
    /// gRPC has streams; the REST transport answers UNIMPLEMENTED.
    pub async fn model_stream_infer(
        &self,
        request: ModelInferRequest,
        context: &ContextHeaders,
    ) -> Answer<tonic::Streaming<ModelStreamInferResponse>> {
        match self {
            Transport::Grpc(c) => {
                let requests = tokio_stream::once(int64_parameters(request));
                inner(
                    c.clone()
                        .model_stream_infer(with_metadata(requests, context))
                        .await,
                )
            }
            Transport::Rest(_) => Err(tonic::Status::unimplemented(
                "decoupled models need the upstream's gRPC endpoint: V2 REST has no streams",
            )),
        }
    }

    pub async fn server_ready(&self) -> Answer<bool> {
        match self {
            Transport::Grpc(c) => {
                inner(c.clone().server_ready(ServerReadyRequest {}).await).map(|r| r.ready)
            }
            Transport::Rest(c) => c.server_ready().await,
        }
    }

    pub async fn server_metadata(&self) -> Answer<ServerMetadataResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().server_metadata(ServerMetadataRequest {}).await),
            Transport::Rest(c) => c.server_metadata().await,
        }
    }

    pub async fn repository_index(
        &self,
        request: RepositoryIndexRequest,
    ) -> Answer<RepositoryIndexResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().repository_index(request).await),
            Transport::Rest(c) => c.repository_index(request.ready).await,
        }
    }

    pub async fn model_metadata(
        &self,
        request: ModelMetadataRequest,
    ) -> Answer<ModelMetadataResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().model_metadata(request).await),
            Transport::Rest(c) => c.model_metadata(&request.name).await,
        }
    }

    pub async fn model_config(&self, request: ModelConfigRequest) -> Answer<ModelConfigResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().model_config(request).await),
            Transport::Rest(c) => c.model_config(&request.name).await,
        }
    }

    pub async fn system_shared_memory_status(
        &self,
        request: SystemSharedMemoryStatusRequest,
    ) -> Answer<SystemSharedMemoryStatusResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().system_shared_memory_status(request).await),
            Transport::Rest(c) => c.shm_status(&request.name).await,
        }
    }

    pub async fn system_shared_memory_register(
        &self,
        request: SystemSharedMemoryRegisterRequest,
    ) -> Answer<()> {
        match self {
            Transport::Grpc(c) => {
                inner(c.clone().system_shared_memory_register(request).await).map(|_| ())
            }
            Transport::Rest(c) => c.shm_register(request).await,
        }
    }

    pub async fn system_shared_memory_unregister(
        &self,
        request: SystemSharedMemoryUnregisterRequest,
    ) -> Answer<()> {
        match self {
            Transport::Grpc(c) => {
                inner(c.clone().system_shared_memory_unregister(request).await).map(|_| ())
            }
            Transport::Rest(c) => c.shm_unregister(&request.name).await,
        }
    }

    pub async fn cuda_shared_memory_register(
        &self,
        request: CudaSharedMemoryRegisterRequest,
    ) -> Answer<()> {
        match self {
            Transport::Grpc(c) => {
                inner(c.clone().cuda_shared_memory_register(request).await).map(|_| ())
            }
            Transport::Rest(c) => c.cuda_register(request).await,
        }
    }

    pub async fn cuda_shared_memory_status(
        &self,
        request: CudaSharedMemoryStatusRequest,
    ) -> Answer<CudaSharedMemoryStatusResponse> {
        match self {
            Transport::Grpc(c) => inner(c.clone().cuda_shared_memory_status(request).await),
            Transport::Rest(c) => c.cuda_status(&request.name).await,
        }
    }

    pub async fn cuda_shared_memory_unregister(
        &self,
        request: CudaSharedMemoryUnregisterRequest,
    ) -> Answer<()> {
        match self {
            Transport::Grpc(c) => {
                inner(c.clone().cuda_shared_memory_unregister(request).await).map(|_| ())
            }
            Transport::Rest(c) => c.cuda_unregister(&request.name).await,
        }
    }
}

/// Triton's gRPC front end takes a `sequence_id` only as int64 (or string), and reads the
/// int64's bits as unsigned: uint64 parameters travel as the same bits in an int64.
fn int64_parameters(mut request: ModelInferRequest) -> ModelInferRequest {
    for value in request.parameters.values_mut() {
        if let Some(ParameterChoice::Uint64Param(v)) = value.parameter_choice {
            value.parameter_choice = Some(ParameterChoice::Int64Param(v as i64));
        }
    }
    request
}

fn with_metadata<T>(message: T, context: &ContextHeaders) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for (name, value) in context {
        if let Ok(value) = value.parse() {
            request.metadata_mut().insert(*name, value);
        }
    }
    request
}

fn inner<T>(answer: Answer<tonic::Response<T>>) -> Answer<T> {
    answer.map(tonic::Response::into_inner)
}
