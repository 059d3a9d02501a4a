//! `GET /drain?seconds=N` on the admin port: the pod's preStop hook.
//!
//! When a pod terminates, the endpoints controller and every node's proxy take a moment to stop
//! sending it new connections, and clients keep the connections they have. The operator makes
//! the model container's preStop hook call this endpoint: the sidecar starts draining
//! (`Health::draining`: readiness false, gRPC connections get GOAWAY, HTTP/1.1 answers
//! `Connection: close`), keeps serving every call that still arrives, and answers after `N`
//! seconds; only then does the kubelet stop the model server. Calls in flight when the model
//! server stops are the only ones that could fail, and by then clients have moved.
//!
//! A drain that is not followed by SIGTERM within `UNDO_AFTER` past its seconds (a stray call to
//! the admin port, which is not in the Service) is undone, so the pod serves again.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use crate::http::json_ok;
use crate::state::SharedState;

/// Longest wait one call may ask for (the pod's grace period bounds it anyway).
pub const MAX_SECONDS: u64 = 300;
/// Seconds after the asked wait at which a drain without termination is undone.
const UNDO_AFTER: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
pub struct DrainQuery {
    seconds: Option<u64>,
}

pub async fn hook(State(st): State<SharedState>, Query(q): Query<DrainQuery>) -> Response {
    let seconds = q.seconds.unwrap_or(5).min(MAX_SECONDS);
    let wait = Duration::from_secs(seconds);
    if st.health.set_draining(true) {
        tracing::info!(seconds, "draining before termination (preStop)");
        let undo = st.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait + UNDO_AFTER).await;
            if !undo.health.is_shutting_down() && undo.health.set_draining(false) {
                tracing::warn!("drained without being terminated; serving again");
            }
        });
    }
    tokio::time::sleep(wait).await;
    json_ok(&json!({"draining": st.health.is_draining(), "seconds": seconds}))
}
