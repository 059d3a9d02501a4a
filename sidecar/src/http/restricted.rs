//! `--http-restricted-api` on the REST port: which API a path belongs to, by Triton's route
//! patterns on the path as sent (before any percent-decoding), and the refusal of a request
//! without the API's header: 403 `{"error":"This API is restricted, expecting header '<key>'"}`.
//! Triton looks before anything else, the method included, so a restricted path answers 403
//! whatever the method; paths its patterns do not match are not restricted (they are 404).

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use infergate_config::RestrictedCategory;

use super::answer::json_error;
use crate::caller::Caller;
use crate::restricted::Guard;

/// The refusal of a request of `category` with `headers` from `caller`, if the guard refuses it.
pub fn refusal(
    guard: &Guard,
    category: RestrictedCategory,
    headers: &HeaderMap,
    caller: Option<Caller>,
) -> Option<Response> {
    let message = guard.check(category, headers, caller).err()?;
    Some(json_error(StatusCode::FORBIDDEN, message))
}

/// The answer to a caller refused for its identity (`server.identity`): 401 with a bearer
/// challenge, 403, or 503 while identities cannot be checked.
pub fn identity_refusal(refusal: crate::identity::Refusal) -> Response {
    use crate::identity::Refusal;
    let status = match refusal {
        Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
        Refusal::Forbidden => StatusCode::FORBIDDEN,
        Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut answer = json_error(status, refusal.message());
    if refusal == Refusal::Unauthenticated {
        answer.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    answer
}

/// The API of a path, as Triton's `HTTPAPIServer::Handle` dispatches it.
pub fn category(path: &str) -> Option<RestrictedCategory> {
    use RestrictedCategory as C;
    match path {
        "/v2/models/stats" => return Some(C::Statistics),
        "/v2/logging" => return Some(C::Logging),
        "/v2" => return Some(C::Metadata),
        "/v2/health/live" | "/v2/health/ready" => return Some(C::Health),
        "/v2/trace/setting" => return Some(C::Trace),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/v2/models/") {
        return model_category(rest);
    }
    let shared_memory = ["/v2/systemsharedmemory/", "/v2/cudasharedmemory/"]
        .iter()
        .filter_map(|prefix| path.strip_prefix(prefix))
        .any(is_shared_memory_action);
    if shared_memory {
        return Some(C::SharedMemory);
    }
    path.strip_prefix("/v2/repository/")
        .filter(|rest| is_repository_action(rest))
        .map(|_| C::ModelRepository)
}

/// `([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|
/// trace/setting))?` after `/v2/models/`. A model's trace setting has no versioned form.
fn model_category(rest: &str) -> Option<RestrictedCategory> {
    use RestrictedCategory as C;
    let (model, tail) = match rest.split_once('/') {
        None => (rest, None),
        Some((model, tail)) => (model, Some(tail)),
    };
    if model.is_empty() {
        return None;
    }
    let Some(tail) = tail else {
        return Some(C::Metadata);
    };
    let (versioned, kind) = match tail.strip_prefix("versions/") {
        Some(after) => {
            let (version, kind) = match after.split_once('/') {
                None => (after, None),
                Some((version, kind)) => (version, Some(kind)),
            };
            if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (true, kind)
        }
        None => (false, Some(tail)),
    };
    match kind {
        None => Some(C::Metadata),
        Some("infer" | "generate" | "generate_stream") => Some(C::Inference),
        Some("ready") => Some(C::Health),
        Some("config") => Some(C::ModelConfig),
        Some("stats") => Some(C::Statistics),
        Some("trace/setting") if !versioned => Some(C::Trace),
        Some(_) => None,
    }
}

/// `(?:region/([^/]+)/)?(status|register|unregister)` after the shared-memory prefix.
fn is_shared_memory_action(rest: &str) -> bool {
    let action = match rest.strip_prefix("region/") {
        Some(region) => match region.split_once('/') {
            Some((name, action)) if !name.is_empty() => action,
            _ => return false,
        },
        None => rest,
    };
    matches!(action, "status" | "register" | "unregister")
}

/// `(?:([^/]+)/)?(index|models/([^/]+)/(load|unload))` after `/v2/repository/`.
fn is_repository_action(rest: &str) -> bool {
    let segments: Vec<&str> = rest.split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return false;
    }
    let action = match segments.as_slice() {
        ["index"] | [_, "index"] => return true,
        ["models", _, action] | [_, "models", _, action] => *action,
        _ => return false,
    };
    matches!(action, "load" | "unload")
}

#[cfg(test)]
mod tests {
    use super::*;
    use RestrictedCategory as C;

    #[test]
    fn paths_belong_to_triton_s_apis() {
        for (path, expected) in [
            ("/v2", C::Metadata),
            ("/v2/health/live", C::Health),
            ("/v2/health/ready", C::Health),
            ("/v2/models/simple", C::Metadata),
            ("/v2/models/simple/versions/1", C::Metadata),
            ("/v2/models/simple/ready", C::Health),
            ("/v2/models/simple/versions/1/ready", C::Health),
            ("/v2/models/simple/infer", C::Inference),
            ("/v2/models/simple/versions/12/infer", C::Inference),
            ("/v2/models/simple/generate", C::Inference),
            ("/v2/models/simple/generate_stream", C::Inference),
            ("/v2/models/simple/config", C::ModelConfig),
            ("/v2/models/simple/versions/1/config", C::ModelConfig),
            ("/v2/models/simple/stats", C::Statistics),
            ("/v2/models/stats", C::Statistics),
            ("/v2/models/simple/trace/setting", C::Trace),
            ("/v2/trace/setting", C::Trace),
            ("/v2/logging", C::Logging),
            ("/v2/systemsharedmemory/status", C::SharedMemory),
            ("/v2/systemsharedmemory/register", C::SharedMemory),
            ("/v2/systemsharedmemory/unregister", C::SharedMemory),
            ("/v2/systemsharedmemory/region/r/status", C::SharedMemory),
            ("/v2/systemsharedmemory/region/r/register", C::SharedMemory),
            ("/v2/cudasharedmemory/region/r/unregister", C::SharedMemory),
            ("/v2/cudasharedmemory/status", C::SharedMemory),
            ("/v2/repository/index", C::ModelRepository),
            ("/v2/repository/models/simple/load", C::ModelRepository),
            ("/v2/repository/models/simple/unload", C::ModelRepository),
            ("/v2/repository/repo/index", C::ModelRepository),
            ("/v2/repository/repo/models/simple/load", C::ModelRepository),
            ("/v2/models/sim%20ple/infer", C::Inference),
        ] {
            assert_eq!(category(path), Some(expected), "{path}");
        }
    }

    #[test]
    fn paths_triton_does_not_route_are_not_restricted() {
        for path in [
            "/",
            "/v2/",
            "/v2/health",
            "/v2/health/live/",
            "/v2/models",
            "/v2/models/",
            "/v2/models//infer",
            "/v2/models/simple/",
            "/v2/models/simple/versions",
            "/v2/models/simple/versions/",
            "/v2/models/simple/versions/x/infer",
            "/v2/models/simple/versions/1/trace/setting",
            "/v2/models/simple/infer/",
            "/v2/models/simple/other",
            "/v2/systemsharedmemory",
            "/v2/systemsharedmemory/region//status",
            "/v2/systemsharedmemory/region/r",
            "/v2/systemsharedmemory/region/r/x",
            "/v2/repository",
            "/v2/repository/models/simple",
            "/v2/repository/models/simple/delete",
            "/v2/repository/models//load",
            "/v2/repository/a/b/index",
            "/v2/trace",
            "/metrics",
        ] {
            assert_eq!(category(path), None, "{path}");
        }
    }
}
