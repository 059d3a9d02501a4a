//! The admin status endpoint, on its own port and not in the client Service: what this sidecar
//! really offers, per extension, and the facts behind it. The operator reads it to write an
//! `InferenceService`'s status.
//!
//! `GET /status` → `{"server", "ready", "backend", "extensions": [{name, state, implementation,
//! reason}], "shm", "gpu"}`; states are `Active`, `Degraded`, `Unsupported` and `Disabled`.
//! `GET /drain?seconds=N` is the pod's preStop hook (`drain.rs`). `GET /livez` and `GET /readyz`
//! are the kubelet's probes of the sidecar, `GET /upstream/livez` its probe of a model server that
//! listens on loopback only. Who may call which: `admin_access.rs`.

use crate::peers::membership::PeerState;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value as J, json};

use crate::backend::upstream::UpstreamInfo;
use crate::caller::{Caller, CertifiedClient};
use crate::http::answer::json_ok;
use crate::shm::cuda::Cuda;
use crate::state::SharedState;
use infergate_config::SequenceMode;

pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/livez", get(live))
        .route("/readyz", get(ready))
        .route("/upstream/livez", get(upstream_live))
        .route("/status", get(status))
        .route("/drain", get(crate::drain::hook))
        .with_state(state)
}

/// Live while the process serves: the kubelet restarts a sidecar that stops answering.
async fn live() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// Ready as `/v2/health/ready` is (models discovered, the model server ready, not draining), and
/// nothing more said.
async fn ready(State(st): State<SharedState>) -> Response {
    if st.health.is_ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

/// Live while the model server accepts connections on its loopback address, as a TCP probe from
/// the node would find it if it listened there; 404 without a model server (built-in models).
async fn upstream_live(State(st): State<SharedState>) -> Response {
    let Some(upstream) = &st.upstream else {
        return (StatusCode::NOT_FOUND, "no model server\n").into_response();
    };
    let probe_timeout = std::time::Duration::from_secs(1);
    if crate::backend::upstream::listening::accepts_connections(&upstream.config.url, probe_timeout)
        .await
    {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        let refusal = "the model server does not accept connections\n";
        (StatusCode::SERVICE_UNAVAILABLE, refusal).into_response()
    }
}

async fn status(
    State(st): State<SharedState>,
    caller: Option<axum::Extension<Caller>>,
    certified: Option<axum::Extension<CertifiedClient>>,
    headers: HeaderMap,
) -> Response {
    let caller = caller.map(|axum::Extension(c)| c);
    match st
        .admin
        .may_read_status(caller, certified.is_some(), &headers)
    {
        Ok(()) => json_ok(&report(&st)),
        Err(refusal) => crate::http::answer::admin_refusal(&refusal),
    }
}

fn extension(name: &str, state: &str, implementation: &str, reason: &str) -> J {
    json!({"name": name, "state": state, "implementation": implementation, "reason": reason})
}

/// The whole status document.
pub fn report(st: &SharedState) -> J {
    let upstream = st.upstream.as_ref().map(|h| h.info.read().clone());
    let upstream_has = |ext: &str| {
        upstream
            .as_ref()
            .is_some_and(|u| u.extensions.iter().any(|e| e == ext))
    };
    let mut extensions = vec![
        extension("binary_tensor_data", "Active", "sidecar", ""),
        extension("classification", "Active", "sidecar", ""),
        extension("model_configuration", "Active", "sidecar", ""),
        extension("statistics", "Active", "sidecar", ""),
        extension("parameters", "Active", "sidecar", ""),
        if st.tracing.exports() {
            extension("trace", "Active", "sidecar", "")
        } else {
            extension(
                "trace",
                "Disabled",
                "sidecar",
                "settings only: start with a trace file (--trace-config triton,file=<path>) or \
                 --trace-config mode=opentelemetry to trace",
            )
        },
        extension("logging", "Active", "sidecar", ""),
    ];
    extensions.push(match &upstream {
        None => extension("sequence", "Active", "sidecar", ""),
        Some(u) => sequence_extension(u, upstream_has("sequence")),
    });
    extensions.push(match &upstream {
        None => extension("model_repository", "Active", "sidecar", ""),
        Some(_) => extension(
            "model_repository",
            "Degraded",
            "sidecar",
            "index only: load and unload are done in the model container",
        ),
    });
    extensions.push(match &upstream {
        None => extension("schedule_policy", "Active", "sidecar", ""),
        Some(_) if upstream_has("schedule_policy") => extension(
            "schedule_policy",
            "Active",
            "upstream",
            "priority and timeout go with each request to the model server's queues",
        ),
        Some(_) => extension(
            "schedule_policy",
            "Unsupported",
            "sidecar",
            "the model server does not offer schedule_policy: priority and timeout reach it as plain parameters",
        ),
    });
    extensions.push(if st.shm.allowed() {
        extension("system_shared_memory", "Active", "sidecar", "")
    } else {
        extension(
            "system_shared_memory",
            "Disabled",
            "sidecar",
            "client shared memory is off; start with --allow-client-shm",
        )
    });
    extensions.push(cuda_extension(st, st.forwards_cuda().is_some()));
    json!({
        "server": {"name": st.server.name, "version": st.server.version},
        "ready": st.health.is_ready(),
        "backend": match &upstream {
            None => json!({"kind": "builtin"}),
            Some(u) => json!({
                "kind": "upstream",
                "url": u.url,
                "reachable": u.reachable,
                "server": {"name": u.name, "version": u.version},
                "extensions": u.extensions,
                "models": u.models,
                // Who forms each model's dynamic batches: its server, the sidecar, or nobody.
                "batching": u.batching.iter().map(|(model, by)| {
                    json!({"model": model, "by": by.as_str()})
                }).collect::<Vec<_>>(),
            }),
        },
        "extensions": extensions,
        "shm": dev_shm(st),
        "gpu": gpu(st.shm.cuda()),
        "sequence_peers": sequence_peers(st),
        "canary": canary(st),
        "traffic": traffic(st),
        "tls": {
            "http": tls(st.http_tls.as_deref()),
            "grpc": tls(st.grpc_tls.as_deref()),
            "metrics": tls(st.metrics_tls.as_deref()),
        },
    })
}

/// How busy the sidecar is (`crate::traffic`): inference calls and streams in flight, whole
/// seconds since there were none, and the sequences its models hold (a live sequence is
/// traffic too, idle between its requests).
fn traffic(st: &SharedState) -> J {
    let live_sequences: u64 = st
        .repository
        .ready_models()
        .iter()
        .filter_map(|m| m.sequencer.as_ref())
        .map(|s| s.counters().active)
        .sum();
    // Sequences a model server keeps are seen here through the sequence peers' record, where
    // sequences are routed across replicas (each is counted by one of the two).
    let routed = st.peers.as_ref().map_or(0, |p| p.held_sequences() as u64);
    let live_sequences = live_sequences.max(routed);
    json!({
        "in_flight": st.traffic.in_flight(),
        "quiet_seconds": st.traffic.quiet_for().as_secs(),
        "live_sequences": live_sequences,
    })
}

/// A client port's TLS: on or not, mutual or not, and when the certificate it serves expires
/// (seconds since the epoch), as read from the certificate loaded last.
fn tls(tls: Option<&crate::tls::Tls>) -> J {
    match tls {
        None => json!({"enabled": false}),
        Some(t) => json!({"enabled": true, "mutual": t.is_mutual(), "not_after": t.not_after()}),
    }
}

/// The canary this sidecar splits calls with: its share, its sidecars and their states, and the
/// calls of each variant this sidecar saw.
fn canary(st: &SharedState) -> J {
    use crate::canary::Variant;
    let Some(canary) = &st.canary else {
        return json!(null);
    };
    let peers: Vec<J> = canary
        .peers()
        .into_iter()
        .map(|(address, state)| json!({"address": address, "state": peer_state(state)}))
        .collect();
    let calls = |variant| {
        let (succeeded, failed) = canary.calls(variant);
        json!({"success": succeeded, "failure": failed})
    };
    json!({
        "traffic_percent": canary.percent(),
        "peers": peers,
        "calls": {"stable": calls(Variant::Stable), "canary": calls(Variant::Canary)},
    })
}

fn peer_state(state: PeerState) -> &'static str {
    match state {
        PeerState::Ready => "ready",
        PeerState::Live => "live",
        PeerState::Down => "down",
    }
}

/// The replicas sequences are routed across, with the state this sidecar last saw each in.
fn sequence_peers(st: &SharedState) -> J {
    let Some(peers) = &st.peers else {
        return json!(null);
    };
    let listed: Vec<J> = peers
        .states(st.health.is_ready())
        .into_iter()
        .map(|(address, state)| json!({"address": address, "state": peer_state(state)}))
        .collect();
    json!({"self": peers.address(), "peers": listed})
}

/// Who opens clients' CUDA buffers: the model server where it offers CUDA shared memory (the
/// sidecar hands it the handles, and copies itself only where it has a GPU and the model server
/// refused one), else the sidecar where its container sees a usable GPU.
fn cuda_extension(st: &SharedState, upstream_offers: bool) -> J {
    const NAME: &str = "cuda_shared_memory";
    let someone_can = upstream_offers || st.shm.cuda().driver().is_some();
    if someone_can && !st.shm.allowed() {
        let reason = "client shared memory is off; start with --allow-client-shm";
        let implementation = if upstream_offers {
            "upstream"
        } else {
            "sidecar"
        };
        return extension(NAME, "Disabled", implementation, reason);
    }
    match (st.shm.cuda(), upstream_offers) {
        (Cuda::Usable(_), true) => extension(
            NAME,
            "Active",
            "upstream",
            "clients' CUDA handles are passed to the model server; the sidecar copies a buffer only where the model server cannot open it",
        ),
        (Cuda::Unavailable(reason), true) => extension(
            NAME,
            "Active",
            "upstream",
            &format!(
                "clients' CUDA handles are passed to the model server, which opens them (this container: {reason})"
            ),
        ),
        (Cuda::Usable(_), false) => extension(NAME, "Active", "sidecar", ""),
        (Cuda::Unavailable(reason), false) => {
            let reason = if st.upstream.is_some() {
                format!("{reason}, and the model server does not offer cuda_shared_memory")
            } else {
                reason.clone()
            };
            extension(NAME, "Unsupported", "sidecar", &reason)
        }
    }
}

/// Who runs sequences in front of an upstream: its own batcher, the sidecar, or the models.
fn sequence_extension(upstream: &UpstreamInfo, upstream_batches: bool) -> J {
    let named = |mode: SequenceMode| -> Vec<&str> {
        upstream
            .sequences
            .iter()
            .filter(|(_, m)| *m == mode)
            .map(|(name, _)| name.as_str())
            .collect()
    };
    let (scheduled, stateful, forwarded) = (
        named(SequenceMode::Sidecar),
        named(SequenceMode::Parameters),
        named(SequenceMode::Upstream),
    );
    let mut reasons = Vec::new();
    if !scheduled.is_empty() {
        reasons.push(format!(
            "scheduled by the sidecar, control tensors added as inputs: {}",
            scheduled.join(", ")
        ));
    }
    if !stateful.is_empty() {
        reasons.push(format!(
            "sequence parameters forwarded to models that keep their own state: {}",
            stateful.join(", ")
        ));
    }
    if !forwarded.is_empty() {
        reasons.push(format!(
            "forwarded to the upstream's sequence batcher: {}",
            forwarded.join(", ")
        ));
    }
    let implementation = if scheduled.is_empty() && stateful.is_empty() && upstream_batches {
        "upstream"
    } else {
        "sidecar"
    };
    if reasons.is_empty() {
        reasons.push(if upstream_batches {
            "sequence parameters are forwarded to the upstream's sequence batcher".to_string()
        } else {
            "no sequence model; a model configured with sequence_batching gets the sidecar's scheduler"
                .to_string()
        });
    }
    extension("sequence", "Active", implementation, &reasons.join("; "))
}

/// `/dev/shm`: whether it exists, its size and free space (a Memory emptyDir in Kubernetes).
fn dev_shm(st: &SharedState) -> J {
    let staging = st.upstream.as_ref().map(|h| &h.upstream.shared_pool);
    match nix::sys::statvfs::statvfs("/dev/shm") {
        Ok(s) => {
            let block = s.fragment_size();
            json!({
                "path": "/dev/shm",
                "present": true,
                "size_bytes": s.blocks().saturating_mul(block),
                "free_bytes": s.blocks_available().saturating_mul(block),
                // Proven, not assumed: true once the upstream opened the staging pool, false if
                // it could not; null until tried (or without an upstream or a pool).
                "shared_with_upstream": staging.and_then(|s| s.shared_with_upstream()),
                "staging_pool": staging.map(|s| {
                    let s = s.status();
                    json!({
                        "state": s.state,
                        "reason": s.reason,
                        "byte_size": s.byte_size,
                        "in_use_bytes": s.in_use,
                        "min_tensor_bytes": s.min_bytes,
                    })
                }),
            })
        }
        Err(e) => json!({"path": "/dev/shm", "present": false, "reason": e.to_string()}),
    }
}

/// NVIDIA devices visible to this container.
fn gpu(cuda: &Cuda) -> J {
    let nodes: Vec<String> = std::fs::read_dir("/dev")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("nvidia").is_some_and(|rest| {
                        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    match cuda {
        Cuda::Usable(driver) => json!({
            "visible": true,
            "driver_version": driver.version,
            "devices": driver.devices.iter().map(|d| json!({"id": d.id, "name": d.name})).collect::<Vec<_>>(),
            "device_nodes": nodes,
            "reason": "",
        }),
        Cuda::Unavailable(reason) => json!({
            "visible": !nodes.is_empty(),
            "devices": [],
            "device_nodes": nodes,
            "reason": reason,
        }),
    }
}
