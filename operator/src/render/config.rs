//! The sidecar's configuration and the ConfigMap that carries it.

use std::collections::BTreeMap;

use infergate_proto::config::{BackendConfig, SidecarConfig, UpstreamConfig, UpstreamModel};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::child_meta;
use crate::crd::InferenceService;

/// Key of the configuration in the ConfigMap.
pub const CONFIG_KEY: &str = "config.yaml";
/// Directory the ConfigMap is mounted at in the sidecar.
pub const CONFIG_DIR: &str = "/etc/infergate/config";
/// Path of the configuration file in the sidecar.
pub const CONFIG_FILE: &str = "/etc/infergate/config/config.yaml";
/// Directory under which each model's label files are mounted, one subdirectory per model.
pub const LABELS_DIR: &str = "/etc/infergate/labels";

/// Name of the ConfigMap holding the sidecar's configuration.
pub(super) fn config_map_name(isvc: &InferenceService) -> String {
    format!("{}-sidecar", isvc.name_any())
}

/// Where a model's label files are mounted in the sidecar.
pub(super) fn labels_dir(model: &str) -> String {
    format!("{LABELS_DIR}/{model}")
}

/// The sidecar's configuration for `isvc`: its ports and logging, client shared memory when
/// `extensions.systemSharedMemory` is enabled, and the model server as an upstream on loopback
/// with the per-model settings of `spec.models`.
pub fn sidecar_config(isvc: &InferenceService) -> SidecarConfig {
    let spec = &isvc.spec;
    let mut config = SidecarConfig::default();
    let server = &mut config.server;
    server.host = "0.0.0.0".to_string();
    server.http_port = port(spec.sidecar.ports.http);
    server.grpc_port = port(spec.sidecar.ports.grpc);
    server.metrics_port = port(spec.sidecar.ports.metrics);
    server.admin_port = port(spec.sidecar.ports.admin);
    server.log_level = spec.sidecar.log_level.as_str().to_string();
    server.log_format = spec.sidecar.log_format.as_str().to_string();
    server.allow_client_shm = spec.extensions.system_shared_memory.enabled;

    let mut upstream = UpstreamConfig::new(format!(
        "grpc://127.0.0.1:{}",
        port(spec.upstream.grpc_port)
    ));
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
        })
        .collect();
    config.backend = BackendConfig::Upstream(upstream);
    config
}

/// Ports are range-checked by the schema and by `validate::spec`; 0 (which the sidecar's own
/// validation rejects for an upstream) stands for anything out of range.
fn port(p: i32) -> u16 {
    u16::try_from(p).unwrap_or(0)
}

/// The ConfigMap `<name>-sidecar` with the configuration under [`CONFIG_KEY`].
pub(super) fn config_map(
    isvc: &InferenceService,
    owner: &OwnerReference,
    config_yaml: &str,
) -> ConfigMap {
    ConfigMap {
        metadata: child_meta(isvc, config_map_name(isvc), owner),
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            config_yaml.to_string(),
        )])),
        ..ConfigMap::default()
    }
}
