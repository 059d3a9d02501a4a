//! Checks that neither the schema nor the CEL rules can make, because they concern the parts of
//! the spec kept as free-form Kubernetes objects (extra containers and volumes) or the pod as a
//! whole. The schema and CEL rules themselves are enforced by the API server (and offline by
//! [`crate::admission`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::crd::{AutoscalingMetric, InferenceService, ModelStorage, UpstreamProtocol};
use crate::pod_names::{
    MODEL_CONTAINER, RESERVED_VOLUME_PREFIX, SIDECAR_CONTAINER, STORAGE_INIT_CONTAINER,
    UPSTREAM_PORT_NAME, UPSTREAM_REST_PORT_NAME,
};
use crate::storage_uri;

/// Largest name an InferenceService may have: it names the Service and is a label value.
pub const MAX_NAME_LEN: usize = 63;

/// Whether `s` is a DNS-1035 label: lowercase letters, digits and '-', starting with a letter,
/// ending with a letter or digit, at most 63 characters.
pub fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.last().is_some_and(|c| *c != b'-')
}

/// Whether `s` is a valid container port name (Kubernetes' IANA_SVC_NAME): at most 15
/// characters, lowercase letters, digits and '-', at least one letter, no '-' at either end and
/// no "--".
pub fn is_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=15).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && b[0] != b'-'
        && b.last().is_some_and(|c| *c != b'-')
        && !s.contains("--")
}

/// Every problem of `isvc` that would make its pod invalid or ambiguous, one line each.
pub fn spec(isvc: &InferenceService) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let spec = &isvc.spec;
    let name = isvc.name_any();
    if !is_dns1035_label(&name) {
        problems.push(format!(
            "metadata.name {name:?} must be a DNS-1035 label of at most {MAX_NAME_LEN} characters"
        ));
    }
    // The headless Service `<name>-peers` must be a DNS-1035 label too.
    if spec.extensions.sequence.routed_by_sidecars() && name.len() + "-peers".len() > MAX_NAME_LEN {
        problems.push(format!(
            "metadata.name {name:?} is too long for extensions.sequence.routing Sidecar: at most {} characters (the Service <name>-peers)",
            MAX_NAME_LEN - "-peers".len()
        ));
    }

    // The canary's headless Service `<name>-canary-peers`, likewise.
    if spec.canary.is_some() && name.len() + "-canary-peers".len() > MAX_NAME_LEN {
        problems.push(format!(
            "metadata.name {name:?} is too long for a canary: at most {} characters (the Service <name>-canary-peers)",
            MAX_NAME_LEN - "-canary-peers".len()
        ));
    }

    // The activator's objects, `<name>-activator`.
    if spec.scale_to_zero.is_some() && name.len() + "-activator".len() > MAX_NAME_LEN {
        problems.push(format!(
            "metadata.name {name:?} is too long for scaleToZero: at most {} characters (the Deployment <name>-activator)",
            MAX_NAME_LEN - "-activator".len()
        ));
    }

    // The Deployment's rolling-update limits, which the API server would refuse in it.
    let rollout = &spec.rollout;
    for (field, limit) in [
        ("maxSurge", &rollout.max_surge),
        ("maxUnavailable", &rollout.max_unavailable),
    ] {
        if let Some(limit) = limit
            && !crate::crd::is_rollout_limit(limit)
        {
            let shown = match limit {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => format!("{s:?}"),
            };
            problems.push(format!(
                "rollout.{field} {shown} must be a count of 0 or more or a percentage such as \"25%\""
            ));
        }
    }
    // A rolling update that may neither add nor remove a pod never progresses (and the API
    // server refuses such a Deployment).
    if let Some((surge, unavailable)) = rollout.rolling_limits(spec.model.requests_gpu())
        && crate::crd::is_zero(&surge)
        && crate::crd::is_zero(&unavailable)
    {
        problems.push(
            "rollout: maxSurge and maxUnavailable are both 0, so no pod could ever be replaced; \
             raise maxUnavailable, or maxSurge where there is room (a spare GPU) for an extra pod"
                .to_string(),
        );
    }

    // The control APIs' key (also a rule of the schema).
    let control = &spec.auth.control_apis;
    if control.from == crate::crd::ControlFrom::Key && control.key.is_none() {
        problems.push(
            "auth.controlAPIs.from Key needs auth.controlAPIs.key (the Secret that holds the key)"
                .to_string(),
        );
    }

    // Ports: a number or a name used twice in the pod makes the Service's named target ports
    // ambiguous or a listener fail.
    let side = &spec.sidecar.ports;
    let mut numbers: BTreeMap<i32, String> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut port = |owner: String, number: i32, port_name: Option<&str>| {
        if let Some(first) = numbers.insert(number, owner.clone()) {
            problems.push(format!(
                "port {number} of {owner} is already used by {first}"
            ));
        }
        if let Some(n) = port_name {
            if !is_port_name(n) {
                problems.push(format!(
                    "port name {n:?} of {owner} must be at most 15 lowercase letters, digits and '-', with a letter"
                ));
            }
            if let Some(first) = names.insert(n.to_string(), owner.clone()) {
                problems.push(format!(
                    "port name {n:?} of {owner} is already used by {first}"
                ));
            }
        }
    };
    for (n, p) in [
        ("http", side.http),
        ("grpc", side.grpc),
        ("metrics", side.metrics),
        ("admin", side.admin),
    ] {
        port(format!("sidecar.ports.{n}"), p, Some(n));
    }
    // A REST-only model server's gRPC port is neither declared nor used.
    if spec.upstream.protocol != UpstreamProtocol::Rest {
        port(
            "upstream.grpcPort".to_string(),
            spec.upstream.grpc_port,
            Some(UPSTREAM_PORT_NAME),
        );
    }
    if let Some(rest_port) = spec.upstream.rest_port {
        port(
            "upstream.restPort".to_string(),
            rest_port,
            Some(UPSTREAM_REST_PORT_NAME),
        );
    }
    for (i, p) in spec.model.ports.iter().enumerate() {
        port(
            format!("model.ports[{i}]"),
            p.container_port,
            p.name.as_deref(),
        );
    }
    for (ci, c) in spec.pod.containers.iter().enumerate() {
        for (i, p) in c.ports.iter().flatten().enumerate() {
            port(
                format!("pod.containers[{ci}].ports[{i}]"),
                p.container_port,
                p.name.as_deref(),
            );
        }
    }

    let reserved = [MODEL_CONTAINER, SIDECAR_CONTAINER, STORAGE_INIT_CONTAINER];
    let mut container_names: BTreeMap<&str, String> = BTreeMap::new();
    let users = spec
        .pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("pod.containers[{i}]"), c))
        .chain(
            spec.pod
                .init_containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("pod.initContainers[{i}]"), c)),
        );
    for (at, c) in users {
        if reserved.contains(&c.name.as_str()) {
            problems.push(format!(
                "{at}.name {:?} is reserved (the operator's own containers are {})",
                c.name,
                reserved.join(", ")
            ));
        } else if let Some(first) = container_names.insert(c.name.as_str(), at.clone()) {
            problems.push(format!("{at}.name {:?} is already used by {first}", c.name));
        }
    }

    // CPU utilization is measured against requests: the autoscaler cannot compute it for a pod
    // with a container that requests no CPU, and would never scale.
    if spec
        .autoscaling
        .as_ref()
        .is_some_and(|a| a.metric == AutoscalingMetric::CPU)
    {
        let requests_cpu = |r: Option<&ResourceRequirements>| {
            r.and_then(|r| r.requests.as_ref())
                .is_some_and(|q| q.contains_key("cpu"))
        };
        if !requests_cpu(spec.model.resources.as_ref()) {
            problems.push(
                "autoscaling on CPU needs model.resources.requests.cpu (utilization is measured against requests)"
                    .to_string(),
            );
        }
        if spec.sidecar.resources.is_some() && !requests_cpu(spec.sidecar.resources.as_ref()) {
            problems.push(
                "autoscaling on CPU needs sidecar.resources.requests.cpu (utilization is measured against requests)"
                    .to_string(),
            );
        }
        for (i, c) in spec.pod.containers.iter().enumerate() {
            if !requests_cpu(c.resources.as_ref()) {
                problems.push(format!(
                    "autoscaling on CPU needs pod.containers[{i}].resources.requests.cpu (utilization is measured against requests)"
                ));
            }
        }
    }

    // The model from storage: storageUri, or the whole URI from a Secret (model.storage.uriFrom).
    let storage = &spec.model.storage;
    if spec.model.storage_uri.is_some() && storage.uri_from.is_some() {
        problems.push("give model.storageUri or model.storage.uriFrom, not both".to_string());
    }
    if spec.model.storage_uri.is_some() || storage.uri_from.is_some() {
        if let Some(uri) = &spec.model.storage_uri {
            if let Err(e) = storage_uri::parse(uri) {
                problems.push(format!("model.storageUri: {e}"));
            }
            if uri.starts_with("http://") && storage.secret_name.is_some() {
                problems.push(
                    "model.storageUri is http:// and model.storage.secretName gives it credentials, which would travel in clear: use https://"
                        .to_string(),
                );
            }
        }
        let target = storage.mount_path.trim_end_matches('/');
        for (i, m) in spec.model.volume_mounts.iter().enumerate() {
            if m.mount_path.trim_end_matches('/') == target {
                problems.push(format!(
                    "model.volumeMounts[{i}] mounts {target}, where the model from model.storageUri is mounted (model.storage.mountPath)"
                ));
            }
        }
    } else if spec.model.storage != ModelStorage::default() {
        problems.push(
            "model.storage is set but neither model.storageUri nor model.storage.uriFrom is: name the model's location"
                .to_string(),
        );
    }

    for (i, v) in spec.pod.volumes.iter().enumerate() {
        if v.name.starts_with(RESERVED_VOLUME_PREFIX) {
            problems.push(format!(
                "pod.volumes[{i}].name {:?}: names starting with {:?} are reserved",
                v.name, RESERVED_VOLUME_PREFIX
            ));
        }
    }

    // The shared /dev/shm must be the same volume everywhere; a container's own /dev/shm mount
    // would hide it.
    if spec.extensions.system_shared_memory.enabled {
        let mut mounts: Vec<(String, &str)> = spec
            .model
            .volume_mounts
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("model.volumeMounts[{i}]"), m.mount_path.as_str()))
            .collect();
        for (ci, c) in spec.pod.containers.iter().enumerate() {
            for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
                mounts.push((
                    format!("pod.containers[{ci}].volumeMounts[{i}]"),
                    m.mount_path.as_str(),
                ));
            }
        }
        for (at, path) in mounts {
            if path.trim_end_matches('/') == "/dev/shm" {
                problems.push(format!(
                    "{at} mounts /dev/shm, which extensions.systemSharedMemory provides to every container"
                ));
            }
        }
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035() {
        for ok in ["a", "resnet", "a-1", &"a".repeat(63)] {
            assert!(is_dns1035_label(ok), "{ok}");
        }
        for bad in ["", "1a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns1035_label(bad), "{bad}");
        }
    }

    #[test]
    fn port_names() {
        for ok in ["http", "triton-metrics", "a1", "mls-metrics"] {
            assert!(is_port_name(ok), "{ok}");
        }
        for bad in [
            "",
            "mlserver-metrics",
            "-a",
            "a-",
            "a--b",
            "80",
            "Http",
            "a_b",
        ] {
            assert!(!is_port_name(bad), "{bad}");
        }
    }
}
