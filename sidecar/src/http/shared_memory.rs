//! The shared-memory extensions: `/v2/systemsharedmemory/*` and `/v2/cudasharedmemory/*`.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Value as J, json};

use super::answer::{error_response, json_ok};
use super::handlers::{control_body, control_json, empty_json_ok, string_text, unsigned};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::json::Value;
use crate::state::SharedState;

/// The caller the port gave the request (none: not a local one).
type From = Option<Extension<Caller>>;

fn shm(st: &SharedState, caller: From) -> &crate::shm::Registry {
    st.shm_for(caller.map(|Extension(c)| c))
}

pub(super) async fn system_shm_status_all(
    State(st): State<SharedState>,
    caller: From,
) -> Result<Response> {
    system_status(shm(&st, caller), None)
}

pub(super) async fn system_shm_status_one(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
) -> Result<Response> {
    system_status(shm(&st, caller), Some(&name))
}

fn system_status(shm: &crate::shm::Registry, name: Option<&str>) -> Result<Response> {
    shm.system_status(name).map(|regions| {
        let list: Vec<J> = regions
            .into_iter()
            .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
            .collect();
        json_ok(&J::Array(list))
    })
}

pub(super) async fn system_shm_register(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response> {
    let shm = shm(&st, caller);
    shm.check_open()?;
    let raw = control_body(body, &st.limits).await?;
    let doc = control_json(&raw)?.unwrap_or(Value::Null);
    let key = match doc.get("key") {
        None => {
            return Err(Error::invalid_arg(
                "Shared memory register request has no 'key' field",
            ));
        }
        Some(k) => string_text(k)?,
    };
    let uint = |field: &str| doc.get(field).map(unsigned).transpose();
    let offset = uint("offset")?.unwrap_or(0);
    let byte_size = uint("byte_size")?.ok_or_else(|| {
        Error::invalid_arg("Shared memory register request has no 'byte_size' field")
    })?;
    shm.register_system(&name, &key, offset, byte_size)?;
    Ok(empty_json_ok())
}

pub(super) async fn system_shm_register_unnamed(
    State(st): State<SharedState>,
    caller: From,
) -> Response {
    let refused = shm(&st, caller).check_open().err();
    error_response(&refused.unwrap_or_else(|| {
        Error::invalid_arg("'region name' is necessary to register system shared memory region")
    }))
}

pub(super) async fn system_shm_unregister_one(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
) -> Result<Response> {
    shm(&st, caller)
        .unregister_system(Some(&name))
        .map(|()| empty_json_ok())
}

pub(super) async fn system_shm_unregister_all(
    State(st): State<SharedState>,
    caller: From,
) -> Result<Response> {
    shm(&st, caller)
        .unregister_system(None)
        .map(|()| empty_json_ok())
}

pub(super) async fn cuda_shm_status_all(
    State(st): State<SharedState>,
    caller: From,
) -> Result<Response> {
    cuda_status(shm(&st, caller), None)
}

pub(super) async fn cuda_shm_status_one(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
) -> Result<Response> {
    cuda_status(shm(&st, caller), Some(&name))
}

fn cuda_status(shm: &crate::shm::Registry, name: Option<&str>) -> Result<Response> {
    shm.cuda_status(name).map(|regions| {
        let list: Vec<J> = regions
            .into_iter()
            .map(|r| json!({"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}))
            .collect();
        json_ok(&J::Array(list))
    })
}

/// Body: `{"raw_handle":{"b64":"<base64 cudaIpcMemHandle_t>"},"device_id":0,"byte_size":64}`.
pub(super) async fn cuda_shm_register(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response> {
    let caller = caller.map(|Extension(c)| c);
    // Who the caller is comes first, as Triton's restricted APIs look at that first.
    st.shm_for(caller).check_caller()?;
    if !st.serves_cuda() {
        return Err(crate::shm::registry::gpus_not_supported(&name));
    }
    st.shm.check_open()?;
    let raw = control_body(body, &st.limits).await?;
    let doc = control_json(&raw)?.unwrap_or(Value::Null);
    let handle = match doc.get("raw_handle") {
        None => {
            return Err(Error::invalid_arg(
                "Shared memory register request has no 'raw_handle' field",
            ));
        }
        Some(h) => h,
    };
    let Some(Value::String(b64)) = handle.get("b64") else {
        return Err(Error::invalid_arg(
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ));
    };
    // Read as Triton reads it (skipping line breaks and other non-alphabet characters), so
    // handles from its C++ client and perf_analyzer register; the registry checks the length.
    let handle = super::lenient_base64::decode(&String::from_utf8_lossy(b64));
    let uint = |field: &str| match doc.get(field) {
        None => Err(Error::internal(format!(
            "attempt to find non-existing object member '{field}'"
        ))),
        Some(v) => unsigned(v),
    };
    let device_id = uint("device_id")?;
    let byte_size = uint("byte_size")?;
    // Triton's REST handler checks the decoded length itself; its gRPC one does not (see
    // Registry::register_cuda), so this text is REST's alone.
    if handle.len() != crate::shm::cuda::HANDLE_BYTES {
        return Err(Error::invalid_arg(
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ));
    }
    st.register_cuda(caller, &name, &handle, device_id, byte_size)
        .await?;
    Ok(empty_json_ok())
}

pub(super) async fn cuda_shm_unregister_one(
    State(st): State<SharedState>,
    caller: From,
    Path(name): Path<String>,
) -> Result<Response> {
    st.unregister_cuda(caller.map(|Extension(c)| c), Some(&name))
        .await
        .map(|()| empty_json_ok())
}

pub(super) async fn cuda_shm_unregister_all(
    State(st): State<SharedState>,
    caller: From,
) -> Result<Response> {
    st.unregister_cuda(caller.map(|Extension(c)| c), None)
        .await
        .map(|()| empty_json_ok())
}
