//! Audit lines for calls to the control APIs: the model repository, logging, trace settings and
//! shared memory, over REST and gRPC (the admin port writes its own, `admin_access.rs`). Anyone
//! who can reach a client port may call them unless a restricted-API key guards them, so each
//! call leaves a line (target `audit`) with who called (the connection's address), with what
//! credential (the name of the key's header, or none: never its value), what was called, and
//! whether the key let it through. Inference, health, metadata and statistics are not control
//! APIs and write none.

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

/// One control call, as the port's guard judged it. `call` names it (`POST /v2/logging`, or the
/// gRPC method's path).
pub fn control_call(
    protocol: &str,
    category: RestrictedCategory,
    call: &str,
    caller: Option<Caller>,
    guard: &Guard,
    allowed: bool,
) {
    let caller = caller.map_or_else(|| "unknown".to_string(), |c| c.shown());
    let credential = guard
        .key_name(category)
        .map_or_else(|| "none".to_string(), |key| format!("key {key}"));
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
