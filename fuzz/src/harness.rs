//! What the request-level targets share: one runtime and one sidecar state (the built-in models,
//! client shared memory allowed, one registered system region), built on first use.

use std::sync::OnceLock;

use axum::body::{Body, Bytes};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use infergate_config::SidecarConfig;
use infergate_sidecar::caller::Caller;
use infergate_sidecar::log::LogControl;
use infergate_sidecar::server;
use infergate_sidecar::state::SharedState;
use tower::ServiceExt;

/// The region every request may name; seeds use it for inputs and outputs in shared memory.
pub const REGION: &str = "fuzz_region";
pub const REGION_BYTES: u64 = 64 * 1024;

/// One thread and a paused clock: a model that sleeps as its request asks (`repeat_int32`'s
/// DELAY and WAIT, up to hours) answers as soon as the runtime has nothing else to do, so an
/// input explores the same paths without real waiting and libFuzzer's timeout still catches a
/// request that spins or never ends.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
    })
}

pub fn sidecar() -> &'static SharedState {
    static STATE: OnceLock<SharedState> = OnceLock::new();
    STATE.get_or_init(|| {
        let mut config = SidecarConfig::default();
        config.server.allow_client_shm = true;
        let state = server::build_state(&config, LogControl::detached("off"))
            .unwrap_or_else(|e| panic!("sidecar state: {e}"));
        state.health.set_ready(true);
        register_region(&state);
        state
    })
}

/// Creates a `/dev/shm` object, registers it as [`REGION`] and unlinks it at once: the mapping
/// lives as long as the process and nothing is left behind.
fn register_region(state: &SharedState) {
    let key = format!("infergate-fuzz-{}", std::process::id());
    let path = format!("/dev/shm/{key}");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    file.set_len(REGION_BYTES)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let registered = state.shm.register_system(REGION, &key, 0, REGION_BYTES);
    let _ = std::fs::remove_file(&path);
    registered.unwrap_or_else(|e| panic!("register {REGION}: {}", e.message));
}

/// A POST from a target's input: the path's tail on the first line (after `/v2/models/`, into
/// `uri`), then `name: value` header lines, an empty line, and the body. `None` when the input
/// has no such form.
pub fn post(data: &[u8], uri: impl FnOnce(&str) -> String) -> Option<Request<Body>> {
    let split = data.windows(2).position(|w| w == b"\n\n")?;
    let head = std::str::from_utf8(&data[..split]).ok()?;
    let body = data[split + 2..].to_vec();
    let mut lines = head.split('\n');
    let mut builder = Request::builder().method("POST").uri(uri(lines.next()?));
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name.trim(), value.trim());
    }
    builder.body(Body::from(body)).ok()
}

/// A caller in the pod, as the ports give one to each request: shared memory is served to it.
pub fn local_caller() -> Caller {
    Caller(std::net::SocketAddr::from(([127, 0, 0, 1], 40000)))
}

/// The real REST router's whole answer to `request`, from a caller in the pod.
pub fn answer(mut request: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    request.extensions_mut().insert(local_caller());
    let router = infergate_sidecar::http::router(sidecar().clone());
    runtime().block_on(async move {
        let response = match router.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .unwrap_or_else(|e| panic!("response body: {e}"))
            .to_bytes();
        (parts.status, parts.headers, body)
    })
}
