//! `GET /drain?seconds=N` on the admin port: the pod's preStop hook, accepted from loopback only
//! (`admin_access.rs`); the hook is the `infergate-drain` binary, run in the pod.
//!
//! When a pod terminates, the endpoints controller and every node's proxy take a moment to stop
//! sending it new connections, and clients keep the connections they have. The operator makes
//! the model container's preStop hook call this endpoint: the sidecar starts draining
//! (`Health::draining`: readiness false, gRPC connections get GOAWAY, HTTP/1.1 answers
//! `Connection: close`), keeps serving every call that still arrives, and answers after `N`
//! seconds; only then does the kubelet stop the model server. Calls in flight when the model
//! server stops are the only ones that could fail, and by then clients have moved.
//!
//! `sequences=M` (the operator sets it where the sidecars route sequences) then waits up to `M`
//! seconds more while this sidecar holds sequences: its peers still send it the requests of the
//! sequences whose state is in this pod's model server, so those end here, by their END or
//! their idle timeout, instead of failing when the model server stops. A replica removed while
//! clients run sequences loses none of them that end within the pod's grace period.
//!
//! A drain that is not followed by SIGTERM within `UNDO_AFTER` past its seconds (a stray call to
//! the admin port, which is not in the Service) is undone, so the pod serves again.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use crate::caller::Caller;
use crate::http::answer::json_ok;
use crate::state::SharedState;

/// Seconds after the asked wait at which a drain without termination is undone.
const UNDO_AFTER: Duration = Duration::from_secs(30);
/// How often the held sequences are counted while waiting for them.
const POLL: Duration = Duration::from_millis(100);

#[derive(Deserialize)]
pub struct DrainQuery {
    seconds: Option<u64>,
    sequences: Option<u64>,
}

pub async fn hook(
    State(st): State<SharedState>,
    caller: Option<axum::Extension<Caller>>,
    Query(q): Query<DrainQuery>,
) -> Response {
    if let Err(refusal) = st.admin.may_drain(caller.map(|axum::Extension(c)| c)) {
        return crate::http::answer::admin_refusal(&refusal);
    }
    let started = Instant::now();
    // Each wait is capped by `server.max_drain_seconds`: the pod's grace period, as the operator
    // renders it.
    let most = st.admin.max_drain_seconds;
    let seconds = q.seconds.unwrap_or(5).min(most);
    let wait = Duration::from_secs(seconds);
    let longest = wait + Duration::from_secs(q.sequences.unwrap_or(0).min(most));
    if st.health.set_draining(true) {
        tracing::info!(seconds, "draining before termination (preStop)");
        let undo = st.clone();
        tokio::spawn(async move {
            tokio::time::sleep(longest + UNDO_AFTER).await;
            if !undo.health.is_shutting_down() && undo.health.set_draining(false) {
                tracing::warn!("drained without being terminated; serving again");
            }
        });
    }
    tokio::time::sleep(wait).await;
    let held = sequences_ended(&st, started + longest).await;
    json_ok(&json!({
        "draining": st.health.is_draining(),
        "seconds": seconds,
        "sequences_held": held,
    }))
}

/// Waits until this sidecar holds no sequence, or until `deadline`; returns how many it still
/// holds. Without sequence peers it holds none.
async fn sequences_ended(st: &SharedState, deadline: Instant) -> usize {
    let Some(peers) = &st.peers else {
        return 0;
    };
    let mut logged = false;
    loop {
        let held = peers.held_sequences();
        if held == 0 {
            if logged {
                tracing::info!("the sequences held here have ended");
            }
            return 0;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                held,
                "drained with sequences still held here; they end with the model server"
            );
            return held;
        }
        if !logged {
            tracing::info!(held, "waiting for the sequences held here to end");
            logged = true;
        }
        tokio::time::sleep(POLL).await;
    }
}
