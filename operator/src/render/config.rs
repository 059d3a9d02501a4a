//! The sidecar's configuration and the ConfigMap that carries it.

use std::collections::BTreeMap;

use infergate_config::{
    BackendConfig, CanarySettings, IdentityAuthorization, IdentitySettings, PeerTlsSettings,
    SidecarConfig, TlsSettings, TokenVerification, UpstreamConfig, UpstreamModel,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::child_meta;
use super::{OperatorSettings, Variant};
use crate::crd::{CONTROL_APIS, ControlFrom, InferenceService, UpstreamProtocol};

/// Key of the configuration in the ConfigMap.
pub const CONFIG_KEY: &str = "config.yaml";
/// Directory the ConfigMap is mounted at in the sidecar.
pub const CONFIG_DIR: &str = "/etc/infergate/config";
/// Path of the configuration file in the sidecar.
pub const CONFIG_FILE: &str = "/etc/infergate/config/config.yaml";
/// The key of the operator's client CA in the ConfigMap, beside the configuration.
pub const STATUS_CLIENT_CA_KEY: &str = "status-client-ca.crt";
/// Where the sidecar reads it: a file of the mounted ConfigMap, so a new CA reaches the
/// running sidecar, which reads it again (no pod restart).
pub const STATUS_CLIENT_CA_FILE: &str = "/etc/infergate/config/status-client-ca.crt";
/// The key of the canary's share in the service's ConfigMap, beside the configuration: not in
/// the configuration, whose hash rolls the pods, so that a new share rolls none.
pub const CANARY_PERCENT_KEY: &str = "canary-traffic-percent";
/// Where the service's sidecars read it, again every second.
pub const CANARY_PERCENT_FILE: &str = "/etc/infergate/config/canary-traffic-percent";
/// Directory under which each model's label files are mounted, one subdirectory per model.
pub const LABELS_DIR: &str = "/etc/infergate/labels";

/// Name of the ConfigMap holding the sidecar's configuration: `<name>-sidecar`, the canary's
/// `<name>-canary-sidecar`.
pub(super) fn config_map_name(isvc: &InferenceService, variant: Variant) -> String {
    variant.name(isvc, "-sidecar")
}

/// Where a model's label files are mounted in the sidecar.
pub(super) fn labels_dir(model: &str) -> String {
    format!("{LABELS_DIR}/{model}")
}

/// The sidecar's configuration for `isvc`: its ports and logging, client shared memory when
/// `extensions.systemSharedMemory` is enabled, and the model server as an upstream on loopback
/// with the per-model settings of `spec.models`. From `settings`: the operator's credential for
/// `/status` from outside the pod, its client certificate's CA (in the ConfigMap beside the
/// configuration) or its status token's digest. The canary's sidecars (`variant` Canary, from
/// the canary's view of the resource) route sequences among the canary's pods; the service's,
/// where it has a canary, give it its share.
pub fn sidecar_config(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    variant: Variant,
) -> SidecarConfig {
    let spec = &isvc.spec;
    let mut config = SidecarConfig::default();
    let server = &mut config.server;
    // The admin port's rules (docs/sidecar.md, "The admin port"): the operator's credential by
    // its CA or digest (no credential in the pod), drains bounded by the pod's grace period,
    // and the preStop hook copied where the model container can run it.
    server.status_token_sha256 = settings.status_token_sha256.iter().cloned().collect();
    server.status_client_ca = settings
        .status_client_ca
        .as_ref()
        .map(|_| STATUS_CLIENT_CA_FILE.to_string());
    server.max_drain_seconds =
        u64::try_from(spec.pod.termination_grace_period_seconds).unwrap_or(0);
    server.drain_hook_dir = Some(crate::pod_names::HOOK_DIR.to_string());
    // Both families: the pod's address may be IPv4, IPv6 or both (the sidecar falls back to
    // IPv4 alone where the pod has no IPv6).
    server.host = "::".to_string();
    server.http_port = port(spec.sidecar.ports.http);
    server.grpc_port = port(spec.sidecar.ports.grpc);
    server.metrics_port = port(spec.sidecar.ports.metrics);
    server.admin_port = port(spec.sidecar.ports.admin);
    server.log_level = spec.sidecar.log_level.as_str().to_string();
    server.log_format = spec.sidecar.log_format.as_str().to_string();
    server.allow_client_shm = spec.extensions.system_shared_memory.enabled;
    // Who may change what the service does for everyone (spec.auth); shared memory is the pod's
    // alone either way (the sidecar serves it on loopback only).
    let control = &spec.auth.control_apis;
    match (control.from, &control.key) {
        (ControlFrom::Pod, _) => server.pod_only_api = vec![CONTROL_APIS.to_string()],
        (ControlFrom::Key, Some(key)) => {
            let file = format!("{}/{}", crate::pod_names::AUTH_DIR, key.secret_key);
            let setting = format!("{CONTROL_APIS}:{}={file}", key.header);
            server.http_restricted_api_file = vec![setting.clone()];
            server.grpc_restricted_protocol_file = vec![setting];
        }
        // Identity: `server.identity` below. Key without a key: refused by the schema and by
        // `validate::spec`.
        (ControlFrom::Identity, _) | (ControlFrom::Key, None) | (ControlFrom::Anyone, _) => {}
    }
    // Calls by Kubernetes identity: the token's audience, and the verbs on this resource as the
    // namespace's Roles grant them (one for inference, one for the control APIs).
    if spec.auth.by_identity() {
        let (inference, control) = (&spec.auth.inference, &spec.auth.control_apis);
        let mut apis = Vec::new();
        if inference.by_identity() {
            apis.push("inference".to_string());
        }
        if control.by_identity() {
            apis.push(CONTROL_APIS.to_string());
        }
        // One verb for every API it guards, unless both take an identity: then the control
        // APIs ask theirs (`authorize.verbs`).
        let mut verbs = BTreeMap::new();
        let verb = if inference.by_identity() {
            if control.by_identity() {
                for api in CONTROL_APIS.split(',') {
                    verbs.insert(api.to_string(), control.verb().to_string());
                }
            }
            inference.verb()
        } else {
            control.verb()
        };
        server.identity = Some(IdentitySettings {
            apis,
            audience: super::identity::audience(isvc),
            verify: TokenVerification::Jwks,
            authorize: Some(IdentityAuthorization {
                namespace: isvc.namespace().unwrap_or_default(),
                name: isvc.name_any(),
                verb: verb.to_string(),
                verbs,
                group: "infergate.dev".to_string(),
                resource: "inferenceservices".to_string(),
            }),
            cache_seconds: 60,
        });
    }
    let tls = ports_tls(isvc);
    if let Some(tls) = &tls {
        server.http_tls = tls.client.clone();
        server.grpc_tls = tls.client.clone();
        if let Some(metrics) = &tls.metrics {
            server.metrics_tls = metrics.clone();
        }
    }
    let peer_tls = tls.map(|t| t.peers).unwrap_or_default();
    if let Some(threads) = spec.sidecar.worker_threads {
        server.worker_threads = threads;
    }
    if let Some(age) = spec.sidecar.max_connection_age_seconds {
        config.limits.max_connection_age_seconds = u64::from(age);
    }
    if let Some(grace) = spec.sidecar.max_connection_age_grace_seconds {
        config.limits.max_connection_age_grace_seconds = u64::from(grace);
    }
    let server = &mut config.server;
    if let Some(tracing) = &spec.sidecar.tracing {
        let namespace = isvc.namespace().unwrap_or_default();
        server.trace_config = tracing.trace_config(&namespace, &isvc.name_any());
    }
    // The peers Services' labels, which their EndpointSlices carry too.
    let slice_labels = super::labels(isvc)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if spec.extensions.sequence.routed_by_sidecars() {
        // In the pod's namespace ($POD_NAMESPACE): the variant's own pods.
        server.sequence_peers_service = Some(match variant {
            Variant::Stable => super::peers_name(isvc),
            Variant::Canary => super::canary_peers_name(isvc),
        });
        server.sequence_peers_labels = Some(slice_labels.clone());
        server.sequence_peers_tls = peer_tls.clone();
    }
    if spec.canary.is_some() && variant == Variant::Stable {
        server.canary = Some(CanarySettings {
            service: Some(super::canary_peers_name(isvc)),
            labels: Some(slice_labels),
            // The share is the file's (`CANARY_PERCENT_KEY`), kept out of the configuration.
            traffic_percent: 0,
            traffic_percent_file: Some(CANARY_PERCENT_FILE.to_string()),
            tls: peer_tls,
            ..CanarySettings::default()
        });
    }

    let rest_only = spec.upstream.protocol == UpstreamProtocol::Rest;
    let mut upstream = match (rest_only, spec.upstream.rest_port) {
        (true, Some(rest)) => UpstreamConfig::new(format!("http://127.0.0.1:{}", port(rest))),
        _ => UpstreamConfig::new(format!(
            "grpc://127.0.0.1:{}",
            port(spec.upstream.grpc_port)
        )),
    };
    upstream.models = spec
        .models
        .iter()
        .map(|m| UpstreamModel {
            name: m.name.clone(),
            max_batch_size: m.max_batch_size.and_then(|n| u32::try_from(n).ok()),
            labels: m
                .labels
                .as_ref()
                .map(|l| {
                    l.outputs
                        .iter()
                        .map(|(output, key)| {
                            (output.clone(), format!("{}/{key}", labels_dir(&m.name)))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            // The one configuration field the resource sets; the rest comes from the model
            // server. Sequences follow its own batcher or, without one, the sidecar's.
            config: m
                .dynamic_batching
                .as_ref()
                .map(|b| serde_json::json!({"dynamic_batching": b.to_config()})),
            sequence: None,
        })
        .collect();
    upstream.staging_shm_bytes = staging_bytes(spec);
    // Beside gRPC, REST carries the small calls; a REST-only upstream has it as its url.
    upstream.rest_url = spec
        .upstream
        .rest_port
        .filter(|_| !rest_only)
        .map(|p| format!("http://127.0.0.1:{}", port(p)));
    config.backend = BackendConfig::Upstream(upstream);
    config
}

/// The TLS of a sidecar's ports (and of the activator's, which serves the same certificate),
/// and how other sidecars are dialled.
pub(super) struct PortsTls {
    /// The HTTP and gRPC ports'.
    pub client: TlsSettings,
    /// The metrics port's, unless tls.metrics is false.
    pub metrics: Option<TlsSettings>,
    /// Towards the service's sidecars.
    pub peers: PeerTlsSettings,
}

/// From `spec.tls`, where it is set.
pub(super) fn ports_tls(isvc: &InferenceService) -> Option<PortsTls> {
    let tls = isvc.spec.tls.as_ref()?;
    // Both client ports (and the metrics port, unless tls.metrics is false) serve the Secret's
    // certificate; the sidecar re-reads the files as the kubelet updates the mounted Secret
    // (server.tls_reload_seconds).
    let client = TlsSettings {
        use_ssl: true,
        use_ssl_mutual: tls.mutual,
        server_cert: Some(tls_file("tls.crt")),
        server_key: Some(tls_file("tls.key")),
        root_cert: tls.mutual.then(|| tls_file("ca.crt")),
    };
    // Scrapers present no certificate: the metrics port never asks for one.
    let metrics = tls.metrics.then(|| TlsSettings {
        use_ssl_mutual: false,
        root_cert: None,
        ..client.clone()
    });
    // Peers (the canary's sidecars, the service's for its activator) are dialled over TLS too,
    // and trusted only with the service's certificate for the peers Service's name; where their
    // ports are mutual, the dialler presents the same certificate.
    let peers = PeerTlsSettings {
        root_cert: Some(tls_file("ca.crt")),
        server_name: Some(peers_host(isvc)),
        client_cert: tls.mutual.then(|| tls_file("tls.crt")),
        client_key: tls.mutual.then(|| tls_file("tls.key")),
    };
    Some(PortsTls {
        client,
        metrics,
        peers,
    })
}

/// The peers Service's name inside the cluster, which the peers' certificates carry.
pub(super) fn peers_host(isvc: &InferenceService) -> String {
    let peers = super::peers_name(isvc);
    match isvc.namespace() {
        Some(ns) => format!("{peers}.{ns}.svc"),
        None => peers,
    }
}

/// A key of the `spec.tls` Secret, as the sidecar finds it.
pub(super) fn tls_file(key: &str) -> String {
    format!("{}/{key}", crate::pod_names::TLS_DIR)
}

/// Largest staging pool the operator asks for.
const MAX_STAGING_BYTES: u64 = 256 << 20;

/// The sidecar's staging pool: only where the pod has one shared `/dev/shm` (without it each
/// container sees its own, and the model server could not open the pool), a quarter of it, so
/// client regions keep the rest.
fn staging_bytes(spec: &crate::crd::InferenceServiceSpec) -> u64 {
    let shm = &spec.extensions.system_shared_memory;
    if !shm.enabled {
        return 0;
    }
    shm.size
        .as_deref()
        .and_then(quantity_bytes)
        .map_or(0, |size| (size / 4).min(MAX_STAGING_BYTES))
}

/// Bytes of a Kubernetes quantity such as `2Gi`, `512Mi`, `1G` or `1000000`; `None` for forms a
/// memory size does not take (fractions, milli-units, exponents).
fn quantity_bytes(quantity: &str) -> Option<u64> {
    let split = quantity
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(quantity.len());
    let (digits, suffix) = quantity.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// Ports are range-checked by the schema and by `validate::spec`; 0 (which the sidecar's own
/// validation rejects for an upstream) stands for anything out of range.
pub(super) fn port(p: i32) -> u16 {
    u16::try_from(p).unwrap_or(0)
}

/// The ConfigMap `<name>-sidecar` (the canary's `<name>-canary-sidecar`) with the
/// configuration under [`CONFIG_KEY`], the operator's client CA under [`STATUS_CLIENT_CA_KEY`]
/// where it has one, and the canary's share under [`CANARY_PERCENT_KEY`] where there is one.
pub(super) fn config_map(
    isvc: &InferenceService,
    owner: &OwnerReference,
    config_yaml: &str,
    status_client_ca: Option<&str>,
    variant: Variant,
) -> ConfigMap {
    let mut data = BTreeMap::from([(CONFIG_KEY.to_string(), config_yaml.to_string())]);
    if let Some(ca) = status_client_ca {
        data.insert(STATUS_CLIENT_CA_KEY.to_string(), ca.to_string());
    }
    if let (Some(canary), Variant::Stable) = (&isvc.spec.canary, variant) {
        data.insert(
            CANARY_PERCENT_KEY.to_string(),
            format!("{}\n", canary.traffic_percent.clamp(0, 100)),
        );
    }
    ConfigMap {
        metadata: child_meta(isvc, config_map_name(isvc, variant), owner),
        data: Some(data),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod staging_tests {
    use super::quantity_bytes;

    #[test]
    fn quantities() {
        assert_eq!(quantity_bytes("2Gi"), Some(2 << 30));
        assert_eq!(quantity_bytes("512Mi"), Some(512 << 20));
        assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
        assert_eq!(quantity_bytes("4096"), Some(4096));
        assert_eq!(quantity_bytes("1.5Gi"), None);
        assert_eq!(quantity_bytes("Gi"), None);
        assert_eq!(quantity_bytes("99999999999Ti"), None);
    }
}
