//! Audit lines for calls to the control APIs that a restricted-API key or the pod-only rule
//! guards: the model repository, logging, trace settings and shared memory, over REST and gRPC
//! (the admin port writes its own, `admin_access.rs`). Each such call leaves a line (target
//! `audit`) with who called (the connection's address), with what credential (the name of the
//! key's header, never its value, or the pod), what was called, and whether it was let through.
//!
//! A control API no key guards (Triton's defaults) writes none: the log then stays Triton's,
//! line for line, which tools and Triton's own QA count (`L0_logging` counts the lines that name
//! `/v2/logging`). Inference, health, metadata and statistics are not control APIs.

use infergate_config::RestrictedCategory;

use crate::caller::Caller;
use crate::restricted::Guard;

/// Whether calls of `category` change or reveal what the server does for everyone.
pub fn is_control(category: RestrictedCategory) -> bool {
    use RestrictedCategory as C;
    matches!(
        category,
        C::ModelRepository | C::Logging | C::Trace | C::SharedMemory
    )
}

/// One control call, as the port's guard judged it, if a key or the pod-only rule guards its
/// category. It is named
/// by its method and path (`POST /v2/logging`), or by its path alone (a gRPC method's).
pub fn control_call(
    protocol: &str,
    category: RestrictedCategory,
    method: Option<&str>,
    path: &str,
    caller: Option<Caller>,
    guard: &Guard,
    allowed: bool,
) {
    let Some(credential) = guard.credential(category) else {
        return;
    };
    control_call_with(
        protocol,
        category,
        method,
        path,
        caller,
        &credential,
        allowed,
    );
}

/// A call of `category` checked against the caller's Kubernetes identity (`server.identity`),
/// with its audit line where `category` is a control API; the refusal, if it is refused.
pub async fn identity_call(
    identity: &crate::identity::Authenticator,
    protocol: &str,
    category: RestrictedCategory,
    method: Option<&str>,
    path: &str,
    caller: Option<Caller>,
    headers: &http::HeaderMap,
) -> Result<(), crate::identity::Refusal> {
    let checked = identity.check(headers, category).await;
    if is_control(category) {
        let credential = identity_credential(checked.as_ref());
        let allowed = checked.is_ok();
        control_call_with(
            protocol,
            category,
            method,
            path,
            caller,
            &credential,
            allowed,
        );
    }
    checked.map(drop).map_err(|denied| denied.refusal)
}

/// What an audit line says of a Kubernetes identity: the user it proved, or that it proved
/// none (never the token).
fn identity_credential(
    checked: Result<&crate::identity::User, &crate::identity::Denied>,
) -> String {
    match checked {
        Ok(user)
        | Err(crate::identity::Denied {
            user: Some(user), ..
        }) => format!("kubernetes identity {}", user.name),
        Err(_) => "kubernetes identity (none proven)".to_string(),
    }
}

/// One control call, with what is said of its credential.
fn control_call_with(
    protocol: &str,
    category: RestrictedCategory,
    method: Option<&str>,
    path: &str,
    caller: Option<Caller>,
    credential: &str,
    allowed: bool,
) {
    let call = match method {
        Some(method) => format!("{method} {path}"),
        None => path.to_string(),
    };
    let call = call.as_str();
    let caller = caller.map_or_else(|| "unknown".to_string(), |c| c.shown());
    let api = category.as_str();
    if allowed {
        tracing::info!(target: "audit", protocol, api, call, %caller, %credential, allowed, "control call");
    } else {
        tracing::warn!(target: "audit", protocol, api, call, %caller, %credential, allowed, "control call refused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_control_apis_are_audited() {
        use RestrictedCategory as C;
        let audited: Vec<_> = C::ALL.into_iter().filter(|c| is_control(*c)).collect();
        assert_eq!(
            audited,
            [C::SharedMemory, C::ModelRepository, C::Trace, C::Logging]
        );
    }
}
