//! The REST front end (axum): every route of the protocol with Triton's status codes, error
//! bodies (`{"error": "..."}`) and header rules. This file only assembles the service; each job
//! is a module of its own.

pub mod answer;
pub(crate) mod body;
pub mod compression;
mod front;
mod generate;
mod handlers;
mod infer;
mod lenient_base64;
mod logging;
mod metadata;
mod params;
mod path_rules;
mod repository;
pub mod request_body;
pub mod restricted;
mod routes;
pub mod serve;
mod shared_memory;
mod statistics;
mod trace_setting;

use axum::Router;

use crate::state::SharedState;

pub use front::Front;

/// The HTTP port's service: inference calls straight to their handler, the rest to `router`.
pub fn front(state: SharedState) -> Front {
    Front::new(state.clone(), router(state))
}

/// The REST router over shared state.
pub fn router(state: SharedState) -> Router {
    let routes = routes::router()
        .with_state(state)
        .layer(axum::middleware::map_response(answer::json_rejections));
    // The outer router only hands every request to the routes, after Triton's path rules.
    Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn(path_rules::triton_path_rules))
}
