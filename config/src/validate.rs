//! Semantic validation of a parsed configuration. Every problem is collected so the user sees all
//! of them at once.

use std::fmt;

use super::{BackendConfig, SidecarConfig};

/// One problem in a configuration, with the dotted path of the offending field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl SidecarConfig {
    /// Checks the configuration against itself and against `known_models` (the built-in catalog).
    pub fn validate(&self, known_models: &[&str]) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut err = |path: &str, message: String| {
            errors.push(ConfigError {
                path: path.to_string(),
                message,
            })
        };
        let s = &self.server;
        if s.name.is_empty() {
            err("server.name", "must not be empty".into());
        }
        if s.bind_host().parse::<std::net::IpAddr>().is_err() && s.host != "localhost" {
            err("server.host", format!("'{}' is not an IP address", s.host));
        }
        if !["error", "warn", "info", "debug", "trace"].contains(&s.log_level.as_str()) {
            err(
                "server.log_level",
                format!(
                    "'{}' is not one of error, warn, info, debug, trace",
                    s.log_level
                ),
            );
        }
        if !["text", "json", "default", "ISO8601"].contains(&s.log_format.as_str()) {
            err(
                "server.log_format",
                format!(
                    "'{}' is not one of text, json, default, ISO8601",
                    s.log_format
                ),
            );
        }
        if s.worker_threads > 1024 {
            err("server.worker_threads", "must be at most 1024".into());
        }
        if let Err(e) = s.http_restrictions() {
            err("server.http_restricted_api", e);
        }
        if let Err(e) = s.grpc_restrictions() {
            err("server.grpc_restricted_protocol", e);
        }
        if let Err(e) = s.pod_only_categories() {
            err("server.pod_only_api", e);
        }
        if let Err(e) = s.trace() {
            err("server.trace_config", e);
        }
        if let Some(identity) = &s.identity {
            if let Err(e) = identity.check() {
                err("server.identity", e);
            }
            // One rule per API: a key, or an identity.
            let keyed = [s.http_restrictions(), s.grpc_restrictions()];
            for category in identity.categories().unwrap_or_default() {
                if keyed
                    .iter()
                    .flatten()
                    .any(|restrictions| restrictions.get(category).is_some())
                {
                    err(
                        "server.identity.apis",
                        format!(
                            "'{}' has a restricted-API key as well: an API takes a key or an \
                             identity, not both",
                            category.as_str()
                        ),
                    );
                }
            }
        }
        for (i, peer) in s.sequence_peers.iter().enumerate() {
            if !is_host_port(peer) {
                err(
                    &format!("server.sequence_peers[{i}]"),
                    format!("'{peer}' is not HOST:PORT"),
                );
            }
        }
        if let Some(service) = &s.sequence_peers_service {
            if !s.sequence_peers.is_empty() {
                err(
                    "server.sequence_peers_service",
                    "give either sequence_peers or sequence_peers_service, not both".into(),
                );
            }
            if !is_namespaced_name(service) {
                err(
                    "server.sequence_peers_service",
                    format!("'{service}' is not [NAMESPACE/]SERVICE"),
                );
            }
        }
        if let Some(canary) = &s.canary {
            validate_canary(canary, &mut err);
        }
        if let Some(activator) = &s.activator {
            validate_activator(activator, &mut err);
            let routed = !s.sequence_peers.is_empty() || s.sequence_peers_service.is_some();
            if routed || s.canary.is_some() {
                err(
                    "server.activator",
                    "an activator serves no model: it takes neither sequence peers nor a canary"
                        .into(),
                );
            }
        }
        let routed = !s.sequence_peers.is_empty() || s.sequence_peers_service.is_some();
        if routed && s.grpc_port == 0 {
            err(
                "server.grpc_port",
                "sequence peers need a fixed gRPC port (peers reach each other there)".into(),
            );
        }
        if let Some(me) = &s.sequence_self
            && !s.sequence_peers.contains(me)
        {
            err(
                "server.sequence_self",
                format!("'{me}' is not one of server.sequence_peers"),
            );
        }
        for (i, digest) in s.status_token_sha256.iter().enumerate() {
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                err(
                    &format!("server.status_token_sha256[{i}]"),
                    "must be a SHA-256 digest: 64 hexadecimal digits".into(),
                );
            }
        }
        if s.max_drain_seconds > 86_400 {
            err("server.max_drain_seconds", "must be at most 86400".into());
        }
        let ports = [
            ("server.http_port", s.http_port),
            ("server.grpc_port", s.grpc_port),
            ("server.metrics_port", s.metrics_port),
            ("server.admin_port", s.admin_port),
        ];
        for (i, (name, port)) in ports.iter().enumerate() {
            if *port != 0 && ports[..i].iter().any(|(_, p)| p == port) {
                err(name, format!("port {port} is used twice"));
            }
        }
        for (name, tls) in [
            ("server.grpc_tls", &s.grpc_tls),
            ("server.http_tls", &s.http_tls),
            ("server.metrics_tls", &s.metrics_tls),
        ] {
            if !tls.enabled() {
                continue;
            }
            if tls.server_cert.is_none() || tls.server_key.is_none() {
                err(name, "use_ssl needs server_cert and server_key".into());
            }
            if tls.use_ssl_mutual && tls.root_cert.is_none() {
                err(
                    name,
                    "use_ssl_mutual needs root_cert, the root of the clients' certificates".into(),
                );
            }
        }
        let peers = &s.sequence_peers_tls;
        let routed = !s.sequence_peers.is_empty() || s.sequence_peers_service.is_some();
        if !peers.is_off() {
            if peers.root_cert.is_none() || peers.server_name.is_none() {
                err(
                    "server.sequence_peers_tls",
                    "needs root_cert and server_name (the name peers' certificates carry)".into(),
                );
            }
            if peers.client_cert.is_some() != peers.client_key.is_some() {
                err(
                    "server.sequence_peers_tls",
                    "client_cert and client_key go together".into(),
                );
            }
        } else if routed && s.grpc_tls.enabled() {
            err(
                "server.sequence_peers_tls",
                "the gRPC port serves TLS, so peers do too: set root_cert and server_name (and client_cert and client_key where the port is mutual)".into(),
            );
        }
        if routed
            && s.grpc_tls.use_ssl_mutual
            && peers.root_cert.is_some()
            && peers.client_cert.is_none()
        {
            err(
                "server.sequence_peers_tls",
                "the gRPC port is mutual TLS, so peers ask for a certificate: set client_cert and client_key".into(),
            );
        }
        for (name, seconds) in [
            ("server.tls_reload_seconds", s.tls_reload_seconds),
            ("server.key_reload_seconds", s.key_reload_seconds),
        ] {
            if seconds == 0 || seconds > 3600 {
                err(name, "must be between 1 and 3600".into());
            }
        }
        let l = &self.limits;
        if l.max_http_body_bytes < 1024 {
            err("limits.max_http_body_bytes", "must be at least 1024".into());
        }
        if l.max_grpc_message_bytes < 1024 || l.max_grpc_message_bytes > i32::MAX as u64 {
            err(
                "limits.max_grpc_message_bytes",
                format!("must be between 1024 and {}", i32::MAX),
            );
        }
        if l.max_json_depth == 0 || l.max_json_depth > 1000 {
            err("limits.max_json_depth", "must be between 1 and 1000".into());
        }
        for (name, seconds) in [
            (
                "limits.http_header_timeout_seconds",
                l.http_header_timeout_seconds,
            ),
            (
                "limits.http_body_timeout_seconds",
                l.http_body_timeout_seconds,
            ),
        ] {
            if seconds == 0 || seconds > 3600 {
                err(name, "must be between 1 and 3600".into());
            }
        }
        for (name, seconds) in [
            (
                "limits.http_body_deadline_seconds",
                l.http_body_deadline_seconds,
            ),
            ("limits.idle_timeout_seconds", l.idle_timeout_seconds),
            ("limits.keepalive_seconds", l.keepalive_seconds),
            (
                "limits.keepalive_timeout_seconds",
                l.keepalive_timeout_seconds,
            ),
        ] {
            if seconds == 0 || seconds > 86400 {
                err(name, "must be between 1 and 86400".into());
            }
        }
        for (name, seconds) in [
            (
                "limits.max_connection_age_seconds",
                l.max_connection_age_seconds,
            ),
            (
                "limits.max_connection_age_grace_seconds",
                l.max_connection_age_grace_seconds,
            ),
        ] {
            if seconds > 86400 {
                err(name, "must be between 0 (never) and 86400".into());
            }
        }
        for (name, count) in [
            ("limits.max_connections", l.max_connections),
            ("limits.max_admin_connections", l.max_admin_connections),
            ("limits.max_concurrent_streams", l.max_concurrent_streams),
        ] {
            if count == 0 || count > 1_000_000 {
                err(name, "must be between 1 and 1000000".into());
            }
        }
        // One request of the largest size allowed must fit.
        let largest = l.max_http_body_bytes.max(l.max_grpc_message_bytes);
        if l.max_inflight_request_bytes < largest {
            err(
                "limits.max_inflight_request_bytes",
                format!("must be at least the largest request allowed ({largest} bytes)"),
            );
        }
        // The sidecar's SIGBUS guard keeps a fixed table of mappings (4096, with room for its own).
        if l.max_shm_regions > 4000 {
            err("limits.max_shm_regions", "must be at most 4000".into());
        }
        match &self.backend {
            BackendConfig::Upstream(up) => {
                match up.url.split_once("://") {
                    Some(("grpc" | "http", rest)) if !rest.is_empty() && !rest.contains('/') => {}
                    _ => err(
                        "backend.url",
                        format!(
                            "'{}' is not grpc://HOST:PORT (V2 gRPC) or http://HOST:PORT (V2 REST)",
                            up.url
                        ),
                    ),
                }
                if let Some(rest_url) = &up.rest_url {
                    if !up.url.starts_with("grpc://") {
                        err(
                            "backend.rest_url",
                            "is for a grpc:// url (calls to an http:// url are all REST)".into(),
                        );
                    }
                    match rest_url.split_once("://") {
                        Some(("http", rest)) if !rest.is_empty() && !rest.contains('/') => {}
                        _ => err(
                            "backend.rest_url",
                            format!("'{rest_url}' is not http://HOST:PORT (V2 REST)"),
                        ),
                    }
                }
                if up.rest_idle_ms > 3_600_000 {
                    err(
                        "backend.rest_idle_ms",
                        "must be at most 3600000 (an hour; 0 opens a connection for every call)"
                            .into(),
                    );
                }
                if up.timeout_seconds == 0 {
                    err("backend.timeout_seconds", "must be at least 1".into());
                }
                if up.max_concurrency == 0 {
                    err("backend.max_concurrency", "must be at least 1".into());
                }
                if up.staging_shm_bytes > 1 << 40 {
                    err(
                        "backend.staging_shm_bytes",
                        "must be at most 1 TiB (0 turns the staging pool off)".into(),
                    );
                }
                for (i, m) in up.models.iter().enumerate() {
                    if m.name.is_empty() {
                        err(
                            &format!("backend.models[{i}].name"),
                            "must not be empty".into(),
                        );
                    }
                    if m.config.as_ref().is_some_and(|c| !c.is_object()) {
                        err(
                            &format!("backend.models[{i}].config"),
                            "must be a map of model-configuration fields".into(),
                        );
                    }
                }
            }
            BackendConfig::Builtin { models } => {
                for (i, name) in models.iter().enumerate() {
                    if !known_models.contains(&name.as_str()) {
                        err(
                            &format!("backend.models[{i}]"),
                            format!("'{name}' is not a built-in model"),
                        );
                    }
                    if models[..i].contains(name) {
                        err(
                            &format!("backend.models[{i}]"),
                            format!("'{name}' is listed twice"),
                        );
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// `server.canary`: where its sidecars are, and a share that is a percent.
fn validate_canary(canary: &super::CanarySettings, err: &mut impl FnMut(&str, String)) {
    match (&canary.service, canary.peers.is_empty()) {
        (Some(_), false) => err(
            "server.canary.service",
            "give either canary.peers or canary.service, not both".into(),
        ),
        (None, true) => err(
            "server.canary",
            "name the canary's sidecars: canary.peers or canary.service".into(),
        ),
        _ => {}
    }
    for (i, peer) in canary.peers.iter().enumerate() {
        if !is_host_port(peer) {
            err(
                &format!("server.canary.peers[{i}]"),
                format!("'{peer}' is not HOST:PORT"),
            );
        }
    }
    if let Some(service) = &canary.service
        && !is_namespaced_name(service)
    {
        err(
            "server.canary.service",
            format!("'{service}' is not [NAMESPACE/]SERVICE"),
        );
    }
    if canary.traffic_percent > 100 {
        err(
            "server.canary.traffic_percent",
            format!("{} is not a percent (0 to 100)", canary.traffic_percent),
        );
    }
}

/// `server.activator`: where the service's sidecars are, and bounds that hold something.
fn validate_activator(activator: &super::ActivatorSettings, err: &mut impl FnMut(&str, String)) {
    match (&activator.service, activator.peers.is_empty()) {
        (Some(_), false) => err(
            "server.activator.service",
            "give either activator.peers or activator.service, not both".into(),
        ),
        (None, true) => err(
            "server.activator",
            "name the service's sidecars: activator.peers or activator.service".into(),
        ),
        _ => {}
    }
    for (i, peer) in activator.peers.iter().enumerate() {
        if !is_host_port(peer) {
            err(
                &format!("server.activator.peers[{i}]"),
                format!("'{peer}' is not HOST:PORT"),
            );
        }
    }
    for (field, value) in [
        ("service", &activator.service),
        ("deployment", &activator.deployment),
        ("inference_service", &activator.inference_service),
    ] {
        if let Some(value) = value
            && !is_namespaced_name(value)
        {
            err(
                &format!("server.activator.{field}"),
                format!("'{value}' is not [NAMESPACE/]NAME"),
            );
        }
    }
    for (field, zero) in [
        ("upstream_http_port", activator.upstream_http_port == 0),
        ("scale_to", activator.scale_to == 0),
        ("hold_timeout_seconds", activator.hold_timeout_seconds == 0),
        ("max_held_calls", activator.max_held_calls == 0),
        ("max_held_bytes", activator.max_held_bytes == 0),
    ] {
        if zero {
            err(
                &format!("server.activator.{field}"),
                "must be above 0".into(),
            );
        }
    }
}

/// `HOST:PORT` with a port above 0.
fn is_host_port(address: &str) -> bool {
    let port = address.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
    matches!(port, Some(Ok(p)) if p > 0)
}

/// `[NAMESPACE/]NAME` with a name.
fn is_namespaced_name(value: &str) -> bool {
    let name = value.rsplit_once('/').map_or(value, |(_, n)| n);
    !name.is_empty() && value.split('/').count() <= 2
}

#[cfg(test)]
mod tests;
