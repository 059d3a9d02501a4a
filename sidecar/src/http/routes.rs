//! Route table and the handlers other than inference.

use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode, header};
use serde_json::{Value as J, json};

use super::compression::{self, Encoding};
use super::{error_response, infer, json_error, json_ok, read_body, trace_setting};
use crate::core::model::Model;
use crate::core::repository::Repository;
use crate::core::stats::{Duration2, Snapshot};
use crate::error::{Error, Result};
use crate::json::{self, Value};
use crate::log_update::{self, Front, LogValue};
use crate::peers::{self, Route};
use crate::state::SharedState;
use crate::telemetry::LogSettings;
use crate::trace;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{model}", get(model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(model_metadata_v),
        )
        .route("/v2/models/{model}/ready", get(model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(model_ready_v),
        )
        .route("/v2/models/{model}/config", get(model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(model_config_v),
        )
        .route("/v2/models/{model}/stats", get(model_stats))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(model_stats_v),
        )
        .route("/v2/models/{model}/infer", post(infer_latest))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_v))
        .route("/v2/models/{model}/generate", post(generate))
        .route("/v2/models/{model}/generate_stream", post(generate))
        .route(
            "/v2/models/{model}/versions/{version}/generate",
            post(generate),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate_stream",
            post(generate),
        )
        .route(
            "/v2/models/{model}/trace/setting",
            get(trace_setting::get_model).post(trace_setting::post_model),
        )
        .route(
            "/v2/trace/setting",
            get(trace_setting::get_server).post(trace_setting::post_server),
        )
        .route("/v2/logging", get(logging_get).post(logging_post))
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/models/{model}/load", post(load))
        .route("/v2/repository/models/{model}/unload", post(unload))
        .route("/v2/repository/{repo}/index", post(named_repository))
        .route(
            "/v2/repository/{repo}/models/{model}/{action}",
            post(named_repository),
        )
        .route("/v2/systemsharedmemory/status", get(system_shm_status_all))
        .route(
            "/v2/systemsharedmemory/region/{name}/status",
            get(system_shm_status_one),
        )
        .route(
            "/v2/systemsharedmemory/register",
            post(system_shm_register_unnamed),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/register",
            post(system_shm_register),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/unregister",
            post(system_shm_unregister_one),
        )
        .route(
            "/v2/systemsharedmemory/unregister",
            post(system_shm_unregister_all),
        )
        .route("/v2/cudasharedmemory/status", get(cuda_shm_status_all))
        .route(
            "/v2/cudasharedmemory/region/{name}/status",
            get(cuda_shm_status_one),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/register",
            post(cuda_shm_register),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/unregister",
            post(cuda_shm_unregister_one),
        )
        .route(
            "/v2/cudasharedmemory/unregister",
            post(cuda_shm_unregister_all),
        )
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            json_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
}

fn respond(result: Result<Response>) -> Response {
    result.unwrap_or_else(|e| error_response(&e))
}

fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

async fn server_metadata(State(st): State<SharedState>) -> Response {
    json_ok(
        &json!({"name": st.server.name, "version": st.server.version, "extensions": st.extensions()}),
    )
}

async fn live() -> Response {
    empty(StatusCode::OK)
}

async fn ready(State(st): State<SharedState>) -> Response {
    empty(if st.health.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    })
}

pub fn metadata_json(model: &Model) -> J {
    let tensor = |spec: &crate::core::model::TensorSpec| json!({"name": spec.name, "datatype": spec.datatype.as_protocol(), "shape": model.metadata_shape(spec)});
    json!({
        "name": model.name,
        "versions": [model.version_string()],
        "platform": model.platform,
        "inputs": model.inputs.iter().map(tensor).collect::<Vec<_>>(),
        "outputs": model.outputs.iter().map(tensor).collect::<Vec<_>>(),
    })
}

async fn model_metadata(State(st): State<SharedState>, Path(model): Path<String>) -> Response {
    metadata(&st, &model, "")
}

async fn model_metadata_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    metadata(&st, &model, &version)
}

fn metadata(st: &SharedState, model: &str, version: &str) -> Response {
    respond(
        st.repository
            .get(model, version)
            .map(|m| json_ok(&metadata_json(&m))),
    )
}

async fn model_ready(State(st): State<SharedState>, Path(model): Path<String>) -> Response {
    readiness(&st, &model, "")
}

async fn model_ready_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    readiness(&st, &model, &version)
}

fn readiness(st: &SharedState, model: &str, version: &str) -> Response {
    match st.repository.is_ready(model, version) {
        Ok(true) => empty(StatusCode::OK),
        Ok(false) => json_error(StatusCode::BAD_REQUEST, "Model version not ready"),
        Err(e) => error_response(&e),
    }
}

async fn model_config(State(st): State<SharedState>, Path(model): Path<String>) -> Response {
    config(&st, &model, "")
}

async fn model_config_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    config(&st, &model, &version)
}

fn config(st: &SharedState, model: &str, version: &str) -> Response {
    respond(
        st.repository
            .get(model, version)
            .map(|m| json_ok(&infergate_proto::model_config::to_json(&m.config))),
    )
}

fn duration(d: Duration2) -> J {
    json!({"count": d.count, "ns": d.ns})
}

pub fn stats_json(model: &Model, s: &Snapshot) -> J {
    json!({
        "name": model.name,
        "version": model.version_string(),
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": duration(s.success),
            "fail": duration(s.fail),
            "queue": duration(s.queue),
            "compute_input": duration(s.compute_input),
            "compute_infer": duration(s.compute_infer),
            "compute_output": duration(s.compute_output),
            "cache_hit": duration(s.cache_hit),
            "cache_miss": duration(s.cache_miss),
        },
        "response_stats": {},
        "batch_stats": s.batches.iter().map(|(size, b)| json!({
            "batch_size": size,
            "compute_input": duration(b.compute_input),
            "compute_infer": duration(b.compute_infer),
            "compute_output": duration(b.compute_output),
        })).collect::<Vec<_>>(),
        "memory_usage": [],
    })
}

fn stats_document(models: &[std::sync::Arc<Model>]) -> J {
    let list: Vec<J> = models
        .iter()
        .map(|m| stats_json(m, &m.stats.snapshot()))
        .collect();
    json!({"model_stats": list})
}

async fn all_stats(State(st): State<SharedState>) -> Response {
    json_ok(&stats_document(&st.repository.ready_models()))
}

async fn model_stats(State(st): State<SharedState>, Path(model): Path<String>) -> Response {
    stats_for(&st, &model, "")
}

async fn model_stats_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    stats_for(&st, &model, &version)
}

fn stats_for(st: &SharedState, model: &str, version: &str) -> Response {
    match st.repository.get(model, version) {
        Ok(m) => json_ok(&stats_document(&[m])),
        Err(_) if version.is_empty() => json_error(
            StatusCode::BAD_REQUEST,
            &format!("requested model '{model}' is not available"),
        ),
        Err(_) => json_error(
            StatusCode::BAD_REQUEST,
            &format!("requested model version is not available for model '{model}'"),
        ),
    }
}

async fn infer_latest(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run_infer(st, model, String::new(), headers, body).await
}

async fn infer_v(
    State(st): State<SharedState>,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run_infer(st, model, version, headers, body).await
}

pub(super) async fn run_infer(
    st: SharedState,
    model: String,
    version: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let received = Instant::now();
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let mut root = st.tracing.start(
        &model,
        || trace::context_of(|name| headers.get(name).and_then(|v| v.to_str().ok())),
        trace::Front::Http,
        received,
    );
    let encoding = match compression::request_encoding(header(header::CONTENT_ENCODING)) {
        Ok(e) => e,
        Err(e) => {
            let mut resp = error_response(&e);
            resp.headers_mut().insert(
                header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("gzip, deflate"),
            );
            return resp;
        }
    };
    let limit = st.limits.max_http_body_bytes;
    let content_length = header(header::CONTENT_LENGTH).and_then(|v| v.parse().ok());
    let result = async {
        // As Triton, before the body is read.
        if st
            .repository
            .get(&model, &version)
            .is_ok_and(|m| m.is_decoupled())
        {
            return Err(Error::unsupported(
                "HTTP end point doesn't support models with decoupled transaction policy",
            ));
        }
        let raw = read_body(body, limit, content_length, st.limits.http_body_timeout()).await?;
        if let Some(root) = &mut root {
            root.event("HTTP_RECV_END", Instant::now());
        }
        let body = if encoding == Encoding::Identity {
            raw
        } else {
            compression::inflate(&raw, limit)?
        };
        let mut request = if infer::json_bytes(&headers, body.len()) >= OFFLOAD_BYTES {
            let (st, headers) = (st.clone(), headers.clone());
            off_worker(move || infer::decode(&st, &model, &version, &headers, body)).await?
        } else {
            infer::decode(&st, &model, &version, &headers, body)?
        };
        request.trace = root.as_ref().map(|root| root.scope().clone());
        let ready = st.health.is_ready();
        let peers = st.peers.as_deref();
        let response = peers::infer(&st.repository, peers, ready, request, Route::Client).await?;
        if let Some(root) = &mut root {
            root.event("INFER_RESPONSE_COMPLETE", Instant::now());
        }
        let accept_encoding = header(header::ACCEPT_ENCODING);
        if infer::heavy_to_encode(&response, accept_encoding, OFFLOAD_BYTES) {
            let accept_encoding = accept_encoding.map(str::to_owned);
            off_worker(move || infer::encode(&response, accept_encoding.as_deref())).await
        } else {
            infer::encode(&response, accept_encoding)
        }
    }
    .await;
    if let Some(root) = root {
        trace::end_root(root, trace::Front::Http, result.as_ref().err());
    }
    respond(result)
}

/// JSON of at least this many bytes to read or write (or a body to compress) is handled on a
/// blocking thread, so that the runtime's workers (one by default) go on serving the other
/// connections meanwhile.
const OFFLOAD_BYTES: usize = 256 * 1024;

/// Runs `work` on the runtime's blocking threads.
async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::internal(format!("the request's worker thread failed: {e}")))?
}

async fn generate() -> Response {
    error_response(&Error::unsupported(
        "the generate extension is not supported by this server",
    ))
}

fn logging_json(s: &LogSettings) -> J {
    json!({
        "log_file": "", "log_info": s.log_info, "log_warning": s.log_warning, "log_error": s.log_error,
        "log_verbose_level": s.log_verbose_level, "log_format": s.log_format,
    })
}

async fn logging_get(State(st): State<SharedState>) -> Response {
    json_ok(&logging_json(&st.log.get()))
}

async fn logging_post(State(st): State<SharedState>, body: Body) -> Response {
    let result = async {
        let raw = read_body(body, 1 << 20, None, st.limits.http_body_timeout()).await?;
        // An empty body changes nothing; neither does anything but an object (Triton looks each
        // setting up by name and finds none).
        let doc = if raw.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            json::parse(&raw, 16).map_err(infer::body_json_error)?
        };
        let mut settings = st.log.get();
        let result = log_update::update(&mut settings, Front::Rest, |key| {
            doc.get(key).map(|v| match v {
                Value::Null => LogValue::Null,
                Value::Bool(b) => LogValue::Bool(*b),
                Value::Number(json::Number::Uint(u)) => LogValue::Uint(*u),
                Value::String(s) => LogValue::String(String::from_utf8_lossy(s).into_owned()),
                _ => LogValue::Other,
            })
        });
        // What was applied before an invalid setting stays applied, as in Triton.
        st.log.set(settings.clone());
        tracing::info!(level = settings.filter(), "log settings changed");
        result.map(|()| json_ok(&logging_json(&settings)))
    }
    .await;
    respond(result)
}

async fn optional_json(body: Body, stall: std::time::Duration) -> Result<Option<J>> {
    let raw = read_body(body, 64 << 20, None, stall).await?;
    if raw.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    // Syntax errors in rapidjson's words and offsets, as the infer route gives them. Past
    // serde's own nesting limit (128) the reader stops, and serde answers a bomb.
    if let Err(e @ json::JsonError::Syntax { .. }) = json::parse(&raw, 128) {
        return Err(Error::internal(e.request_message()));
    }
    serde_json::from_slice(&raw)
        .map(Some)
        .map_err(|e| Error::internal(format!("failed to parse the request JSON buffer: {e}")))
}

async fn repository_index(State(st): State<SharedState>, body: Body) -> Response {
    let result = async {
        let ready = match optional_json(body, st.limits.http_body_timeout()).await? {
            None => false,
            Some(doc) => match doc.get("ready") {
                None => false,
                Some(J::Bool(b)) => *b,
                Some(_) => {
                    return Err(Error::invalid_arg(
                        "Invalid value for 'ready': expected a boolean",
                    ));
                }
            },
        };
        let rows: Vec<J> = st
            .repository
            .index(ready)
            .into_iter()
            .map(|e| {
                let mut row = serde_json::Map::new();
                row.insert("name".into(), J::String(e.name));
                if let Some(v) = e.version {
                    row.insert("version".into(), J::String(v));
                }
                if let Some(s) = e.state {
                    row.insert("state".into(), J::String(s.to_string()));
                }
                if !e.reason.is_empty() {
                    row.insert("reason".into(), J::String(e.reason));
                }
                J::Object(row)
            })
            .collect();
        Ok(json_ok(&J::Array(rows)))
    }
    .await;
    respond(result)
}

async fn load(State(st): State<SharedState>, Path(model): Path<String>, body: Body) -> Response {
    let result = async {
        let doc = optional_json(body, st.limits.http_body_timeout()).await?;
        // Triton reads every parameter before it loads: each value must be a JSON string, and
        // only `config` and `file:*` keys are parameters; its JSON reader's texts are kept.
        let params = match doc.as_ref().and_then(|d| d.get("parameters")) {
            None => None,
            Some(J::Object(params)) => Some(params),
            Some(_) => return Err(Error::internal("attempt to get members for non-object")),
        };
        let mut config_override = None;
        let mut files = false;
        for (key, value) in params.into_iter().flatten() {
            let J::String(text) = value else {
                return Err(Error::internal(
                    "attempt to access JSON non-string as string",
                ));
            };
            if key == "config" {
                config_override = Some(text.as_str());
            } else if key.starts_with("file:") {
                files = true;
            } else {
                return Err(Error::internal(
                    "unexpected error on creating Triton parameter",
                ));
            }
        }
        // Triton checks its mode once the request is read, before anything else.
        st.check_model_control()?;
        if files {
            return Err(Repository::file_overrides_refused(&model));
        }
        st.repository.load(&model, config_override)?;
        tracing::info!(model = %model, "model loaded");
        Ok(empty_json_ok())
    }
    .await;
    respond(result)
}

/// `parameters.unload_dependents` is read as Triton reads it over HTTP: a value that is not a
/// boolean does not fail the call, the model is unloaded alone. The built-in models have no
/// dependents (no ensembles), so the flag changes nothing here.
async fn unload(State(st): State<SharedState>, Path(model): Path<String>, body: Body) -> Response {
    let result = async {
        optional_json(body, st.limits.http_body_timeout()).await?;
        st.check_model_control()?;
        st.repository.unload(&model)?;
        tracing::info!(model = %model, "model unloaded");
        Ok(empty_json_ok())
    }
    .await;
    respond(result)
}

fn empty_json_ok() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::empty(),
    )
        .into_response()
}

async fn named_repository() -> Response {
    error_response(&Error::unsupported(
        "'repository_name' specification is not supported",
    ))
}

async fn system_shm_status_all(State(st): State<SharedState>) -> Response {
    system_status(&st, None)
}

async fn system_shm_status_one(
    State(st): State<SharedState>,
    Path(name): Path<String>,
) -> Response {
    system_status(&st, Some(&name))
}

fn system_status(st: &SharedState, name: Option<&str>) -> Response {
    respond(st.shm.system_status(name).map(|regions| {
        let list: Vec<J> = regions
            .into_iter()
            .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
            .collect();
        json_ok(&J::Array(list))
    }))
}

async fn system_shm_register(
    State(st): State<SharedState>,
    Path(name): Path<String>,
    body: Body,
) -> Response {
    let result = async {
        if !st.shm.allowed() {
            return Err(Error::unsupported(crate::shm::registry::DISABLED));
        }
        let doc = optional_json(body, st.limits.http_body_timeout())
            .await?
            .unwrap_or(J::Null);
        let key = match doc.get("key") {
            None => {
                return Err(Error::invalid_arg(
                    "Shared memory register request has no 'key' field",
                ));
            }
            Some(J::String(k)) => k.clone(),
            Some(_) => {
                return Err(Error::internal(
                    "attempt to access JSON non-string as string",
                ));
            }
        };
        let uint = |field: &str| match doc.get(field) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                Error::internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
            }),
        };
        let offset = uint("offset")?.unwrap_or(0);
        let byte_size = uint("byte_size")?.ok_or_else(|| {
            Error::invalid_arg("Shared memory register request has no 'byte_size' field")
        })?;
        st.shm.register_system(&name, &key, offset, byte_size)?;
        Ok(empty_json_ok())
    }
    .await;
    respond(result)
}

async fn system_shm_register_unnamed() -> Response {
    error_response(&Error::invalid_arg(
        "'region name' is necessary to register system shared memory region",
    ))
}

async fn system_shm_unregister_one(
    State(st): State<SharedState>,
    Path(name): Path<String>,
) -> Response {
    respond(
        st.shm
            .unregister_system(Some(&name))
            .map(|()| empty_json_ok()),
    )
}

async fn system_shm_unregister_all(State(st): State<SharedState>) -> Response {
    respond(st.shm.unregister_system(None).map(|()| empty_json_ok()))
}

async fn cuda_shm_status_all(State(st): State<SharedState>) -> Response {
    cuda_status(&st, None)
}

async fn cuda_shm_status_one(State(st): State<SharedState>, Path(name): Path<String>) -> Response {
    cuda_status(&st, Some(&name))
}

fn cuda_status(st: &SharedState, name: Option<&str>) -> Response {
    respond(st.shm.cuda_status(name).map(|regions| {
        let list: Vec<J> = regions
            .into_iter()
            .map(|r| json!({"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}))
            .collect();
        json_ok(&J::Array(list))
    }))
}

/// Body: `{"raw_handle":{"b64":"<base64 cudaIpcMemHandle_t>"},"device_id":0,"byte_size":64}`.
async fn cuda_shm_register(
    State(st): State<SharedState>,
    Path(name): Path<String>,
    body: Body,
) -> Response {
    let result = async {
        if !st.serves_cuda() {
            return Err(crate::shm::registry::gpus_not_supported(&name));
        }
        if !st.shm.allowed() {
            return Err(Error::unsupported(crate::shm::registry::DISABLED));
        }
        let doc = optional_json(body, st.limits.http_body_timeout())
            .await?
            .unwrap_or(J::Null);
        let handle = match doc.get("raw_handle") {
            None => {
                return Err(Error::invalid_arg(
                    "Shared memory register request has no 'raw_handle' field",
                ));
            }
            Some(h) => h,
        };
        let Some(J::String(b64)) = handle.get("b64") else {
            return Err(Error::invalid_arg(
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
            ));
        };
        // Read as Triton reads it (skipping line breaks and other non-alphabet characters), so
        // handles from its C++ client and perf_analyzer register; the registry checks the length.
        let raw = super::lenient_base64::decode(b64);
        let uint = |field: &str| match doc.get(field) {
            None => Err(Error::internal(format!(
                "attempt to find non-existing object member '{field}'"
            ))),
            Some(v) => v.as_u64().ok_or_else(|| {
                Error::internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
            }),
        };
        let device_id = uint("device_id")?;
        let byte_size = uint("byte_size")?;
        st.register_cuda(&name, &raw, device_id, byte_size).await?;
        Ok(empty_json_ok())
    }
    .await;
    respond(result)
}

async fn cuda_shm_unregister_one(
    State(st): State<SharedState>,
    Path(name): Path<String>,
) -> Response {
    respond(
        st.unregister_cuda(Some(&name))
            .await
            .map(|()| empty_json_ok()),
    )
}

async fn cuda_shm_unregister_all(State(st): State<SharedState>) -> Response {
    respond(st.unregister_cuda(None).await.map(|()| empty_json_ok()))
}
