//! Unary RPCs of `inference.GRPCInferenceService` and the health service.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Instant;

use futures::Stream;
use infergate_proto::health::health_check_response::ServingStatus;
use infergate_proto::health::health_server::{Health, HealthServer};
use infergate_proto::health::{HealthCheckRequest, HealthCheckResponse};
use infergate_proto::inference::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use infergate_proto::inference::model_metadata_response::TensorMetadata;
use infergate_proto::inference::model_repository_parameter::ParameterChoice as RepoParam;
use infergate_proto::inference::*;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status, Streaming};

use super::{convert, stream};
use crate::caller::Caller;
use crate::core::model::Model;
use crate::core::repository::Repository;
use crate::core::stats::Duration2;
use crate::error::Error;
use crate::front_door::{self, Call, Origin, Target};
use crate::log::update::{self, LogValue};
use crate::peers;
use crate::protocol::Protocol;
use crate::state::SharedState;
use crate::trace;

type Reply<T> = Result<Response<T>, Status>;

pub struct Inference {
    state: SharedState,
}

/// The inference service. Requests may be compressed with gzip or deflate (`grpc-encoding`), as
/// Triton accepts them; the message limit holds for the decompressed message. Answers are not
/// compressed, as Triton's are not by default (`--grpc-infer-response-compression-level none`).
pub fn inference_service(state: SharedState) -> GrpcInferenceServiceServer<Inference> {
    let limit = usize::try_from(state.limits.max_grpc_message_bytes).unwrap_or(usize::MAX);
    GrpcInferenceServiceServer::new(Inference { state })
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
}

pub struct HealthService {
    state: SharedState,
}

pub fn health_service(state: SharedState) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { state })
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, _request: Request<HealthCheckRequest>) -> Reply<HealthCheckResponse> {
        let status = if self.state.health.is_ready() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        Ok(Response::new(HealthCheckResponse {
            status: status as i32,
        }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, _request: Request<HealthCheckRequest>) -> Reply<Self::WatchStream> {
        Err(Status::unimplemented(
            "grpc.health.v1.Health/Watch is not supported; use Check",
        ))
    }
}

fn duration(d: Duration2) -> Option<StatisticDuration> {
    Some(StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

fn statistics(model: &Model) -> ModelStatistics {
    let s = model.stats.snapshot();
    ModelStatistics {
        name: model.name.clone(),
        version: model.version_string(),
        last_inference: s.last_inference_ms,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
            cache_hit: duration(s.cache_hit),
            cache_miss: duration(s.cache_miss),
        }),
        batch_stats: s
            .batches
            .iter()
            .map(|(size, b)| InferBatchStatistics {
                batch_size: *size,
                compute_input: duration(b.compute_input),
                compute_infer: duration(b.compute_infer),
                compute_output: duration(b.compute_output),
            })
            .collect(),
        memory_usage: Vec::new(),
        response_stats: HashMap::new(),
    }
}

fn named_repository(name: &str) -> Result<(), Status> {
    if name.is_empty() {
        Ok(())
    } else {
        Err(Error::unsupported("'repository_name' specification is not supported").into())
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Reply<ServerLiveResponse> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Reply<ServerReadyResponse> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.state.health.is_ready(),
        }))
    }

    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Reply<ModelReadyResponse> {
        let r = request.into_inner();
        let ready = self.state.repository.is_ready(&r.name, &r.version)?;
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Reply<ServerMetadataResponse> {
        let s = &self.state.server;
        Ok(Response::new(ServerMetadataResponse {
            name: s.name.clone(),
            version: s.version.clone(),
            extensions: self.state.extensions(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Reply<ModelMetadataResponse> {
        let r = request.into_inner();
        let model = self.state.repository.get(&r.name, &r.version)?;
        let tensor = |spec: &crate::core::model::TensorSpec| TensorMetadata {
            name: spec.name.clone(),
            datatype: spec.datatype.as_protocol().to_string(),
            shape: model.metadata_shape(spec),
        };
        Ok(Response::new(ModelMetadataResponse {
            name: model.name.clone(),
            versions: vec![model.version_string()],
            platform: model.platform.clone(),
            inputs: model.inputs.iter().map(tensor).collect(),
            outputs: model.outputs.iter().map(tensor).collect(),
        }))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Reply<ModelInferResponse> {
        if self.state.health.is_shutting_down() {
            return Err(Status::unavailable(
                "GRPC server is shutting down and has stopped accepting new requests.",
            ));
        }
        let received = Instant::now();
        let caller = Caller::of(request.extensions());
        let (metadata, _, message) = request.into_parts();
        let text = |key| metadata.get(key).and_then(|v| v.to_str().ok());
        let origin =
            Origin::from_metadata(text(peers::ROUTE_METADATA), text(peers::VARIANT_METADATA));
        let state = &self.state;
        let target = Target::resolve(state, &message.model_name, &message.model_version);
        let mut call = Call::begin(
            state,
            &target,
            &message.model_name,
            Protocol::Grpc,
            received,
            || trace::context_of(|name| metadata.get(name).and_then(|v| v.to_str().ok())),
        );
        call.note_id(&message.id);
        call.event("GRPC_WAITREAD_END", received);
        let result = async {
            let mut request = convert::request(message, state.shm_for(caller))?;
            request.credential = front_door::credential(state, text("authorization"));
            let response = front_door::infer(state, &call, target, request, origin).await?;
            call.event("INFER_RESPONSE_COMPLETE", Instant::now());
            Ok::<_, Error>(convert::response(response))
        }
        .await;
        call.end(result.as_ref().err());
        Ok(Response::new(result?))
    }

    type ModelStreamInferStream = stream::ResponseStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Reply<Self::ModelStreamInferStream> {
        let text = |name| request.metadata().get(name).and_then(|v| v.to_str().ok());
        let opening = stream::Opening {
            context: trace::context_of(text),
            credential: front_door::credential(&self.state, text("authorization")),
        };
        let caller = Caller::of(request.extensions());
        Ok(Response::new(stream::serve(
            self.state.clone(),
            caller,
            request.into_inner(),
            std::sync::Arc::new(opening),
        )))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Reply<ModelConfigResponse> {
        let r = request.into_inner();
        let model = self.state.repository.get(&r.name, &r.version)?;
        Ok(Response::new(ModelConfigResponse {
            config: Some(model.config.clone()),
        }))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Reply<ModelStatisticsResponse> {
        let r = request.into_inner();
        // The version is read first, as Triton reads it, whatever the name.
        crate::core::repository::parse_version(&r.version)?;
        let models = if r.name.is_empty() {
            self.state.repository.ready_models()
        } else {
            match self.state.repository.get(&r.name, &r.version) {
                Ok(m) => vec![m],
                Err(_) if r.version.is_empty() => {
                    return Err(Error::invalid_arg(format!(
                        "requested model '{}' is not available",
                        r.name
                    ))
                    .into());
                }
                Err(_) => {
                    return Err(Error::invalid_arg(format!(
                        "requested model version is not available for model '{}'",
                        r.name
                    ))
                    .into());
                }
            }
        };
        Ok(Response::new(ModelStatisticsResponse {
            model_stats: models.iter().map(|m| statistics(m)).collect(),
        }))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Reply<RepositoryIndexResponse> {
        let r = request.into_inner();
        named_repository(&r.repository_name)?;
        let models = self
            .state
            .repository
            .index(r.ready)
            .into_iter()
            .map(|e| repository_index_response::ModelIndex {
                name: e.name,
                version: e.version.unwrap_or_default(),
                state: e.state.unwrap_or_default().to_string(),
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Reply<RepositoryModelLoadResponse> {
        let r = request.into_inner();
        named_repository(&r.repository_name)?;
        let mut config_override = None;
        let mut files = false;
        for (key, value) in &r.parameters {
            match (key.as_str(), &value.parameter_choice) {
                ("config", Some(RepoParam::StringParam(text))) => config_override = Some(text),
                ("config", _) => {
                    return Err(Error::invalid_arg(
                        "invalid value type for load parameter 'config', expected string_param.",
                    )
                    .into());
                }
                (k, Some(RepoParam::BytesParam(_))) if k.starts_with("file:") => files = true,
                (k, _) if k.starts_with("file:") => {
                    return Err(Error::invalid_arg(format!(
                        "invalid value type for load parameter '{k}', expected bytes_param."
                    ))
                    .into());
                }
                (k, _) => {
                    return Err(
                        Error::invalid_arg(format!("unrecognized load parameter '{k}'.")).into(),
                    );
                }
            }
        }
        // Triton checks its mode once the request is read, before anything else.
        self.state.check_model_control()?;
        if files {
            return Err(Repository::file_overrides_refused(&r.model_name).into());
        }
        self.state
            .repository
            .load(&r.model_name, config_override.map(String::as_str))?;
        Ok(Response::new(RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Reply<RepositoryModelUnloadResponse> {
        let r = request.into_inner();
        named_repository(&r.repository_name)?;
        // As Triton: `unload_dependents` must be a bool_param; the built-in models have no
        // dependents, so its value changes nothing here.
        if let Some(value) = r.parameters.get("unload_dependents")
            && !matches!(value.parameter_choice, Some(RepoParam::BoolParam(_)))
        {
            return Err(Error::invalid_arg(
                "invalid value type for 'unload_dependents' parameter, expected bool_param.",
            )
            .into());
        }
        self.state.check_model_control()?;
        self.state.repository.unload(&r.model_name)?;
        Ok(Response::new(RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Reply<SystemSharedMemoryStatusResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        let regions = self
            .state
            .shm_for(caller)
            .system_status(name)?
            .into_iter()
            .map(|s| {
                let status = system_shared_memory_status_response::RegionStatus {
                    name: s.name.clone(),
                    key: s.key,
                    offset: s.offset,
                    byte_size: s.byte_size,
                };
                (s.name, status)
            })
            .collect();
        Ok(Response::new(SystemSharedMemoryStatusResponse { regions }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Reply<SystemSharedMemoryRegisterResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        self.state
            .shm_for(caller)
            .register_system(&r.name, &r.key, r.offset, r.byte_size)?;
        Ok(Response::new(SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Reply<SystemSharedMemoryUnregisterResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        self.state
            .shm_for(caller)
            .unregister_system((!r.name.is_empty()).then_some(r.name.as_str()))?;
        Ok(Response::new(SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Reply<CudaSharedMemoryStatusResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        let regions = self
            .state
            .shm_for(caller)
            .cuda_status(name)?
            .into_iter()
            .map(|s| {
                let status = cuda_shared_memory_status_response::RegionStatus {
                    name: s.name.clone(),
                    device_id: s.device_id,
                    byte_size: s.byte_size,
                };
                (s.name, status)
            })
            .collect();
        Ok(Response::new(CudaSharedMemoryStatusResponse { regions }))
    }

    /// `raw_handle` carries the 64 raw bytes of the `cudaIpcMemHandle_t` (no base64 on gRPC).
    async fn cuda_shared_memory_register(
        &self,
        request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Reply<CudaSharedMemoryRegisterResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        let device_id = u64::try_from(r.device_id).unwrap_or(u64::MAX);
        self.state
            .register_cuda(caller, &r.name, &r.raw_handle, device_id, r.byte_size)
            .await?;
        Ok(Response::new(CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Reply<CudaSharedMemoryUnregisterResponse> {
        let caller = Caller::of(request.extensions());
        let r = request.into_inner();
        self.state
            .unregister_cuda(caller, (!r.name.is_empty()).then_some(r.name.as_str()))
            .await?;
        Ok(Response::new(CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(
        &self,
        request: Request<TraceSettingRequest>,
    ) -> Reply<TraceSettingResponse> {
        let r = request.into_inner();
        let model = (!r.model_name.is_empty()).then_some(r.model_name.as_str());
        if let Some(model) = model {
            self.state.check_trace_model(model)?;
        }
        let tracing = &self.state.tracing;
        let view = if r.settings.is_empty() {
            tracing.view(model)
        } else {
            // No values: back to the server's setting, as `null` is over HTTP.
            let update: trace::Update = r
                .settings
                .into_iter()
                .map(|(key, v)| {
                    let given = if v.value.is_empty() {
                        trace::Given::Clear
                    } else {
                        trace::Given::Values(v.value)
                    };
                    (key, given)
                })
                .collect();
            tracing.update(model, &update, Protocol::Grpc)?
        };
        let settings = view
            .into_iter()
            .map(|(key, value)| {
                (
                    key.to_string(),
                    trace_setting_response::SettingValue { value },
                )
            })
            .collect();
        Ok(Response::new(TraceSettingResponse { settings }))
    }

    async fn log_settings(
        &self,
        request: Request<LogSettingsRequest>,
    ) -> Reply<LogSettingsResponse> {
        use log_settings_request::setting_value::ParameterChoice as In;
        use log_settings_response::setting_value::ParameterChoice as Out;
        let mut given = request.into_inner().settings;
        if !given.is_empty() {
            let mut settings = self.state.log.get();
            let result = update::update(&mut settings, Protocol::Grpc, |key| {
                given.remove(key).map(|value| match value.parameter_choice {
                    Some(In::BoolParam(b)) => LogValue::Bool(b),
                    Some(In::Uint32Param(u)) => LogValue::Uint(u.into()),
                    Some(In::StringParam(s)) => LogValue::String(s),
                    None => LogValue::Other,
                })
            });
            // What was applied before an invalid setting stays applied, as in Triton.
            self.state.log.set(settings);
            result?;
        }
        let s = self.state.log.get();
        let entry = |c: Out| log_settings_response::SettingValue {
            parameter_choice: Some(c),
        };
        let settings = HashMap::from([
            ("log_file".to_string(), entry(Out::StringParam(s.log_file))),
            ("log_info".to_string(), entry(Out::BoolParam(s.log_info))),
            (
                "log_warning".to_string(),
                entry(Out::BoolParam(s.log_warning)),
            ),
            ("log_error".to_string(), entry(Out::BoolParam(s.log_error))),
            (
                "log_verbose_level".to_string(),
                entry(Out::Uint32Param(s.log_verbose_level)),
            ),
            (
                "log_format".to_string(),
                entry(Out::StringParam(s.log_format)),
            ),
        ]);
        Ok(Response::new(LogSettingsResponse { settings }))
    }
}
