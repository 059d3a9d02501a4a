//! The REST route table: every path and method to its handler, one module per endpoint family
//! (inference, metadata and health, statistics, repository, shared memory, trace settings,
//! logging, generate). Inference calls reach `infer::run_infer` before this table (`front.rs`).

use axum::Router;
use axum::routing::{get, post};
use http::StatusCode;

use super::answer::json_error;
use super::{
    generate, infer, logging, metadata, repository, shared_memory, statistics, trace_setting,
};
use crate::state::SharedState;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/v2", get(metadata::server_metadata))
        .route("/v2/health/live", get(metadata::live))
        .route("/v2/health/ready", get(metadata::ready))
        .route("/v2/models/stats", get(statistics::all_stats))
        .route("/v2/models/{model}", get(metadata::model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(metadata::model_metadata_v),
        )
        .route("/v2/models/{model}/ready", get(metadata::model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(metadata::model_ready_v),
        )
        .route("/v2/models/{model}/config", get(metadata::model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(metadata::model_config_v),
        )
        .route("/v2/models/{model}/stats", get(statistics::model_stats))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(statistics::model_stats_v),
        )
        .route("/v2/models/{model}/infer", post(infer::infer_latest))
        .route(
            "/v2/models/{model}/versions/{version}/infer",
            post(infer::infer_v),
        )
        .route("/v2/models/{model}/generate", post(generate::generate))
        .route(
            "/v2/models/{model}/generate_stream",
            post(generate::generate_stream),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate",
            post(generate::generate_v),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate_stream",
            post(generate::generate_stream_v),
        )
        .route(
            "/v2/models/{model}/trace/setting",
            get(trace_setting::get_model).post(trace_setting::post_model),
        )
        .route(
            "/v2/trace/setting",
            get(trace_setting::get_server).post(trace_setting::post_server),
        )
        .route(
            "/v2/logging",
            get(logging::logging_get).post(logging::logging_post),
        )
        .route("/v2/repository/index", post(repository::repository_index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route(
            "/v2/repository/models/{model}/unload",
            post(repository::unload),
        )
        .route(
            "/v2/repository/{repo}/index",
            post(repository::named_repository),
        )
        .route(
            "/v2/repository/{repo}/models/{model}/{action}",
            post(repository::named_repository),
        )
        .route(
            "/v2/systemsharedmemory/status",
            get(shared_memory::system_shm_status_all),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/status",
            get(shared_memory::system_shm_status_one),
        )
        .route(
            "/v2/systemsharedmemory/register",
            post(shared_memory::system_shm_register_unnamed),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/register",
            post(shared_memory::system_shm_register),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/unregister",
            post(shared_memory::system_shm_unregister_one),
        )
        .route(
            "/v2/systemsharedmemory/unregister",
            post(shared_memory::system_shm_unregister_all),
        )
        .route(
            "/v2/cudasharedmemory/status",
            get(shared_memory::cuda_shm_status_all),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/status",
            get(shared_memory::cuda_shm_status_one),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/register",
            post(shared_memory::cuda_shm_register),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/unregister",
            post(shared_memory::cuda_shm_unregister_one),
        )
        .route(
            "/v2/cudasharedmemory/unregister",
            post(shared_memory::cuda_shm_unregister_all),
        )
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            json_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
}
