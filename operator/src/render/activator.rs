//! Scale to zero's objects (`spec.scaleToZero`): the activator, which holds calls while the
//! service has no ready pod (docs/sidecar.md, "Activator"), and the client Service's endpoints,
//! which the operator writes itself: the service's ready pods, or the activator's while there are
//! none (the client Service then selects no pod, `service::no_pod_selector`).
//!
//! | object | name |
//! |---|---|
//! | ConfigMap (the activator's configuration) | `<name>-activator` |
//! | ServiceAccount, Role, RoleBinding | `<name>-activator` |
//! | Deployment (the sidecar's image, `server.activator`) | `<name>-activator` |
//! | Service (headless, gRPC: where the activator finds the service's sidecars) | `<name>-peers` |
//! | EndpointSlice of the client Service | `<name>-infergate` |
//!
//! The activator's Role is exactly what it calls: `list` and `watch` on EndpointSlices, `get` and
//! `patch` on the one Deployment's scale, `get` on the one InferenceService.

use std::collections::BTreeMap;

use infergate_config::{ActivatorSettings, SidecarConfig};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, Service, ServiceAccount, Volume,
    VolumeMount,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::config::{
    CONFIG_DIR, CONFIG_FILE, CONFIG_KEY, STATUS_CLIENT_CA_FILE, STATUS_CLIENT_CA_KEY, port,
    ports_tls,
};
use super::{OperatorSettings, RenderError, Variant, child_meta, pods_role_binding};
use crate::crd::InferenceService;
use crate::pod_names::{CONFIG_VOLUME, TLS_DIR, TLS_VOLUME};

/// `app.kubernetes.io/name` of the activator's pods.
pub const ACTIVATOR_APP_NAME: &str = "infergate-activator";

/// The label kube-proxy finds a Service's EndpointSlices by.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Who writes a slice: the EndpointSlice controller leaves alone those another manager writes.
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Its value for the operator's slices.
pub const SLICE_MANAGER: &str = "infergate.dev-operator";

/// The activator's container.
pub const ACTIVATOR_CONTAINER: &str = "activator";

/// How long a client keeps a connection to the activator: soon after the service's pods are
/// ready, clients that connected while it had none go to them.
const ACTIVATOR_CONNECTION_AGE_SECONDS: u64 = 30;

/// `<name>-activator`: the Deployment, its ConfigMap, service account, Role and RoleBinding.
pub fn activator_name(isvc: &InferenceService) -> String {
    format!("{}-activator", isvc.name_any())
}

/// The client Service's EndpointSlice, `<name>-infergate`.
pub fn endpoint_slice_name(isvc: &InferenceService) -> String {
    format!("{}-infergate", isvc.name_any())
}

/// Labels that select the activator's pods.
pub fn activator_selector_labels(isvc: &InferenceService) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            ACTIVATOR_APP_NAME.to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), isvc.name_any()),
    ])
}

/// The activator's selector as a string, to list its pods.
pub fn activator_selector_string(isvc: &InferenceService) -> String {
    activator_selector_labels(isvc)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The activator's objects, where the resource scales to zero.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivatorObjects {
    pub config_map: ConfigMap,
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: k8s_openapi::api::rbac::v1::RoleBinding,
    pub deployment: Deployment,
    /// `<name>-peers`, where the peers' objects do not already bring it.
    pub peers_service: Option<Service>,
}

/// The replicas a scale from zero asks for: spec.replicas, or the autoscaler's least above 0.
pub fn scale_to(isvc: &InferenceService) -> i32 {
    match &isvc.spec.autoscaling {
        Some(a) => a.min_replicas.max(1),
        None => isvc.spec.replicas.max(1),
    }
}

pub(super) fn activator_objects(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
) -> Result<Option<ActivatorObjects>, RenderError> {
    let Some(zero) = &isvc.spec.scale_to_zero else {
        return Ok(None);
    };
    let name = activator_name(isvc);
    let config = activator_config(isvc, settings);
    config.validate(&[]).map_err(|errors| RenderError::Config {
        name: name.clone(),
        message: errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    let text =
        infergate_config::yaml::to_string(&config).map_err(|message| RenderError::Config {
            name: name.clone(),
            message,
        })?;
    let hash = super::config_hash(text.as_bytes());
    let mut data = BTreeMap::from([(CONFIG_KEY.to_string(), text)]);
    if let Some(ca) = &settings.status_client_ca {
        data.insert(STATUS_CLIENT_CA_KEY.to_string(), ca.to_string());
    }
    let config_map = ConfigMap {
        metadata: child_meta(isvc, name.clone(), owner),
        data: Some(data),
        ..ConfigMap::default()
    };
    let rules = vec![
        PolicyRule {
            api_groups: Some(vec!["discovery.k8s.io".to_string()]),
            resources: Some(vec!["endpointslices".to_string()]),
            verbs: vec!["list".to_string(), "watch".to_string()],
            ..PolicyRule::default()
        },
        PolicyRule {
            api_groups: Some(vec!["apps".to_string()]),
            resources: Some(vec!["deployments/scale".to_string()]),
            resource_names: Some(vec![isvc.name_any()]),
            verbs: vec!["get".to_string(), "patch".to_string()],
            ..PolicyRule::default()
        },
        PolicyRule {
            api_groups: Some(vec!["infergate.dev".to_string()]),
            resources: Some(vec!["inferenceservices".to_string()]),
            resource_names: Some(vec![isvc.name_any()]),
            verbs: vec!["get".to_string()],
            ..PolicyRule::default()
        },
    ];
    Ok(Some(ActivatorObjects {
        config_map,
        service_account: ServiceAccount {
            metadata: child_meta(isvc, name.clone(), owner),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: child_meta(isvc, name.clone(), owner),
            rules: Some(rules),
        },
        role_binding: pods_role_binding(isvc, &name, name.clone(), owner),
        deployment: deployment(isvc, settings, owner, &hash, zero.activator_replicas),
        peers_service: (!isvc.spec.sidecars_dial_peers())
            .then(|| super::peers::headless_service(isvc, owner, Variant::Stable)),
    }))
}

/// The activator's configuration: the service's ports, TLS and logging, `server.activator`
/// from `spec.scaleToZero`.
pub fn activator_config(isvc: &InferenceService, settings: &OperatorSettings) -> SidecarConfig {
    let spec = &isvc.spec;
    let zero = spec.scale_to_zero.clone().unwrap_or_default();
    let mut config = SidecarConfig::default();
    let server = &mut config.server;
    server.host = "::".to_string();
    server.http_port = port(spec.sidecar.ports.http);
    server.grpc_port = port(spec.sidecar.ports.grpc);
    server.metrics_port = port(spec.sidecar.ports.metrics);
    server.admin_port = port(spec.sidecar.ports.admin);
    server.log_level = spec.sidecar.log_level.as_str().to_string();
    server.log_format = spec.sidecar.log_format.as_str().to_string();
    // `/status` on the admin port to the operator, as the sidecars' (no credential in the pod).
    server.status_token_sha256 = settings.status_token_sha256.iter().cloned().collect();
    server.status_client_ca = settings
        .status_client_ca
        .as_ref()
        .map(|_| STATUS_CLIENT_CA_FILE.to_string());
    let tls = ports_tls(isvc);
    if let Some(tls) = &tls {
        server.http_tls = tls.client.clone();
        server.grpc_tls = tls.client.clone();
        if let Some(metrics) = &tls.metrics {
            server.metrics_tls = metrics.clone();
        }
    }
    let slice_labels = super::labels(isvc)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    server.activator = Some(ActivatorSettings {
        service: Some(super::peers_name(isvc)),
        labels: Some(slice_labels),
        upstream_http_port: port(spec.sidecar.ports.http),
        deployment: Some(isvc.name_any()),
        scale_to: u32::try_from(scale_to(isvc)).unwrap_or(1),
        inference_service: Some(isvc.name_any()),
        hold_timeout_seconds: u64::try_from(zero.hold_timeout_seconds).unwrap_or(300),
        max_held_calls: u32::try_from(zero.max_held_calls).unwrap_or(256),
        max_held_bytes: u64::try_from(zero.max_held_bytes).unwrap_or(64 << 20),
        tls: tls.map(|t| t.peers).unwrap_or_default(),
        ..ActivatorSettings::default()
    });
    config.limits.max_connection_age_seconds = ACTIVATOR_CONNECTION_AGE_SECONDS;
    config
}

fn tcp_port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: number,
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }
}

fn admin_probe(path: &str, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String("admin".to_string()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn deployment(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
    config_hash: &str,
    replicas: i32,
) -> Deployment {
    let spec = &isvc.spec;
    let side = &spec.sidecar;
    let name = activator_name(isvc);
    let mut volumes = vec![Volume {
        name: CONFIG_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: name.clone(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: CONFIG_VOLUME.to_string(),
        mount_path: CONFIG_DIR.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    if let Some(tls) = &spec.tls {
        volumes.push(Volume {
            name: TLS_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret(&isvc.name_any())),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: TLS_VOLUME.to_string(),
            mount_path: TLS_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let container = Container {
        name: ACTIVATOR_CONTAINER.to_string(),
        image: Some(
            side.image
                .clone()
                .unwrap_or_else(|| settings.sidecar_image.clone()),
        ),
        image_pull_policy: side.image_pull_policy.map(|p| p.as_str().to_string()),
        args: Some(vec!["--config".to_string(), CONFIG_FILE.to_string()]),
        ports: Some(vec![
            tcp_port("http", side.ports.http),
            tcp_port("grpc", side.ports.grpc),
            tcp_port("metrics", side.ports.metrics),
            tcp_port("admin", side.ports.admin),
        ]),
        liveness_probe: Some(admin_probe("/livez", 10)),
        readiness_probe: Some(admin_probe("/readyz", 2)),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("50m".to_string())),
                ("memory".to_string(), Quantity("64Mi".to_string())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(super::deployment::sidecar_security_context(
            side.run_as_user,
        )),
        env: Some(vec![EnvVar {
            name: "POD_NAMESPACE".to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.namespace".to_string(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let mut labels = activator_selector_labels(isvc);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        super::MANAGER.to_string(),
    );
    Deployment {
        metadata: child_meta(isvc, name.clone(), owner),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(activator_selector_labels(isvc)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(BTreeMap::from([(
                        super::CONFIG_HASH_ANNOTATION.to_string(),
                        config_hash.to_string(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    service_account_name: Some(name.clone()),
                    service_account: Some(name),
                    automount_service_account_token: Some(true),
                    image_pull_secrets: (!spec.pod.image_pull_secrets.is_empty())
                        .then(|| spec.pod.image_pull_secrets.clone()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_string(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The client Service's EndpointSlice: `addresses` (pod IPs, one family: the first's) on the
/// Service's ports, every one ready. Empty: the Service has no endpoint (calls are refused,
/// which only happens while neither a pod nor the activator is ready).
pub fn endpoint_slice(
    isvc: &InferenceService,
    owner: &OwnerReference,
    addresses: &[String],
) -> EndpointSlice {
    let ipv6 = addresses.first().is_some_and(|a| a.contains(':'));
    let mut labels = super::labels(isvc);
    labels.insert(SERVICE_NAME_LABEL.to_string(), isvc.name_any());
    labels.insert(MANAGED_BY_LABEL.to_string(), SLICE_MANAGER.to_string());
    let ports = super::service::service_ports(isvc)
        .into_iter()
        .map(|p| EndpointPort {
            name: p.name,
            port: Some(p.port),
            protocol: p.protocol,
            app_protocol: p.app_protocol,
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            labels: Some(labels),
            ..child_meta(isvc, endpoint_slice_name(isvc), owner)
        },
        address_type: if ipv6 { "IPv6" } else { "IPv4" }.to_string(),
        endpoints: addresses
            .iter()
            .filter(|a| a.contains(':') == ipv6)
            .map(|a| Endpoint {
                addresses: vec![a.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: Some(ports),
    }
}
