//! Desired state: pure functions from an [`InferenceService`] (plus the operator's settings) to the
//! objects that run it. No I/O and no clock: the same input always gives the same objects, so the
//! controller can apply them idempotently and tests can check them directly.
//!
//! | object | name | when |
//! |---|---|---|
//! | ConfigMap (the sidecar's configuration) | `<name>-sidecar` | always |
//! | Deployment (model container + sidecar) | `<name>` | always |
//! | Service (the sidecar's HTTP and gRPC ports only) | `<name>` | always |
//! | PodDisruptionBudget (`maxUnavailable: 1`) | `<name>` | `replicas >= 2` (`autoscaling.minReplicas` with autoscaling) |
//! | HorizontalPodAutoscaler (autoscaling/v2) | `<name>` | `autoscaling.engine: HPA` |
//! | ScaledObject (keda.sh/v1alpha1) | `<name>` | `autoscaling.engine: KEDA` |
//! | PodMonitor (monitoring.coreos.com/v1) | `<name>` | `monitoring.podMonitor` |
//! | HTTPRoute and GRPCRoute (gateway.networking.k8s.io/v1) | `<name>` | `service.gateway` |
//! | NetworkPolicy (ingress to the sidecar's ports) | `<name>` | unless `networkPolicy.enabled: false` |
//! | Certificate (cert-manager.io/v1), kept in the Secret `<name>-tls` | `<name>-tls` | `tls.issuerRef` |
//! | Service (headless, gRPC), Role, RoleBinding | `<name>-peers`, `<name>-sequence-peers` | `extensions.sequence.routing: Sidecar`, or `canary` |
//! | ServiceAccount | `<name>-sequence-peers` | the same, without `pod.serviceAccountName` |
//! | the canary's ConfigMap, Deployment, headless Service, autoscaler (`canary.rs`) | `<name>-canary-sidecar`, `<name>-canary`, `<name>-canary-peers` | `canary` |
//!
//! Every object carries the owner reference of the InferenceService (controller, blocking owner
//! deletion) and the labels of [`labels`]; selectors use only [`selector_labels`], which never
//! change for the life of the resource.

mod activator;
mod autoscaling;
mod canary;
mod certificate;
mod config;
mod deployment;
mod identity;
mod monitoring;
mod network;
mod peers;
mod routes;
mod security;
mod service;
mod storage;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use crate::crd::{InferenceService, ServiceUrls};
use crate::validate;

pub use activator::{
    ACTIVATOR_APP_NAME, ActivatorObjects, SLICE_MANAGER, activator_config, activator_name,
    activator_selector_string, endpoint_slice, endpoint_slice_name, scale_to,
};
pub use autoscaling::{PENDING_METRIC, QUEUE_TIME_METRIC, scaled_object_resource};
pub use canary::{CanaryObjects, canary_peers_name, canary_view};
pub use certificate::certificate_resource;
pub use config::{CONFIG_FILE, CONFIG_KEY, LABELS_DIR, sidecar_config};
pub use deployment::{
    MODEL_CONTAINER, RESERVED_VOLUME_PREFIX, SHM_VOLUME, SIDECAR_CONTAINER, UPSTREAM_PORT_NAME,
    UPSTREAM_REST_PORT_NAME,
};
pub use identity::{IdentityObjects, identity_name};
pub use monitoring::pod_monitor_resource;
pub use peers::{PeerObjects, access_name as peer_access_name, peers_name};
pub use routes::{grpc_route_resource, http_route_resource};
pub use service::no_pod_selector;

/// `app.kubernetes.io/name` of every object.
pub const APP_NAME: &str = "infergate";
/// `app.kubernetes.io/managed-by` of every object.
pub const MANAGER: &str = "infergate-operator";
/// Pod-template annotation holding a hash of the sidecar's configuration, so that a change of
/// configuration rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "infergate.dev/config-hash";

/// Image of the sidecar when neither the resource nor the operator names one.
pub const DEFAULT_SIDECAR_IMAGE: &str = concat!(
    "ghcr.io/infergate/infergate-sidecar:",
    env!("CARGO_PKG_VERSION")
);

/// Image of the init container that fetches `spec.model.storageUri`, when neither the resource
/// nor the operator names one (docker/storage-initializer.Dockerfile).
pub const DEFAULT_STORAGE_INITIALIZER_IMAGE: &str = concat!(
    "ghcr.io/infergate/infergate-storage-initializer:",
    env!("CARGO_PKG_VERSION")
);

/// The operator's own settings that shape what it renders.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorSettings {
    /// Sidecar image used when `spec.sidecar.image` is unset.
    pub sidecar_image: String,
    /// Storage-initializer image used when `spec.model.storage.initializerImage` is unset.
    pub storage_initializer_image: String,
    /// The operator's own namespace, which rendered NetworkPolicies admit to the admin port;
    /// `None` where it is not known (any namespace is admitted then).
    pub operator_namespace: Option<String>,
    /// Version of the cluster the objects are for: features newer than it are left out.
    pub kubernetes_version: KubernetesVersion,
    /// Hex SHA-256 of the token the operator presents to read sidecars' `/status` from outside
    /// their pods; `None` where it has none (the sidecars then answer `/status` on loopback
    /// only, and the resource's status cannot say which extensions are live).
    pub status_token_sha256: Option<String>,
    /// PEM of the CA whose client certificate the operator presents, over TLS, to read
    /// sidecars' `/status`: each sidecar is given it (`server.status_client_ca`).
    pub status_client_ca: Option<String>,
    /// The cluster's DNS domain (`cluster.local` unless the cluster was set up otherwise), for
    /// the fully qualified name in the Certificates of `tls.issuerRef`.
    pub cluster_domain: String,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        OperatorSettings {
            sidecar_image: DEFAULT_SIDECAR_IMAGE.to_string(),
            storage_initializer_image: DEFAULT_STORAGE_INITIALIZER_IMAGE.to_string(),
            operator_namespace: None,
            kubernetes_version: KubernetesVersion::DEFAULT,
            status_token_sha256: None,
            status_client_ca: None,
            cluster_domain: "cluster.local".to_string(),
        }
    }
}

/// A Kubernetes version, major and minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubernetesVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl KubernetesVersion {
    /// The oldest version the operator supports: native sidecars are on by default from 1.29.
    pub const OLDEST: KubernetesVersion = KubernetesVersion {
        major: 1,
        minor: 29,
    };
    /// What `render` assumes when not told: the version the operator's Kubernetes types model.
    pub const DEFAULT: KubernetesVersion = KubernetesVersion {
        major: 1,
        minor: 33,
    };

    /// Parses `1.29`, `v1.29` or `1.29.3`. Versions older than [`Self::OLDEST`] are refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a Kubernetes version such as 1.29");
        let mut parts = text.trim().trim_start_matches('v').split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts
            .next()
            .and_then(|p| p.trim_end_matches('+').parse().ok())
            .ok_or_else(bad)?;
        let version = KubernetesVersion { major, minor };
        if version < Self::OLDEST {
            return Err(format!(
                "Kubernetes {major}.{minor} is not supported (the oldest is {}.{})",
                Self::OLDEST.major,
                Self::OLDEST.minor
            ));
        }
        Ok(version)
    }
}

/// Why an InferenceService cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    /// The object has no `metadata.name`.
    #[error("the InferenceService has no metadata.name")]
    MissingName,
    /// The object has no `metadata.uid`, so its children cannot point at it.
    #[error("the InferenceService {0} has no metadata.uid (needed for owner references)")]
    MissingUid(String),
    /// The spec breaks rules the schema cannot express.
    #[error("the InferenceService {name} is invalid:\n  {}", .problems.join("\n  "))]
    Invalid {
        /// Name of the resource.
        name: String,
        /// One line per problem.
        problems: Vec<String>,
    },
    /// The sidecar configuration could not be produced.
    #[error("sidecar configuration of {name}: {message}")]
    Config {
        /// Name of the resource.
        name: String,
        /// What went wrong.
        message: String,
    },
}

/// Everything one InferenceService turns into.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// The sidecar's configuration.
    pub config_map: ConfigMap,
    /// Model server + sidecar.
    pub deployment: Deployment,
    /// The client Service.
    pub service: Service,
    /// Present from two replicas up.
    pub pdb: Option<PodDisruptionBudget>,
    /// Present with `autoscaling.engine: HPA`.
    pub hpa: Option<HorizontalPodAutoscaler>,
    /// Present with `autoscaling.engine: KEDA`.
    pub scaled_object: Option<DynamicObject>,
    /// Present with `monitoring.podMonitor`.
    pub pod_monitor: Option<DynamicObject>,
    /// Present with `tls.issuerRef`.
    pub certificate: Option<DynamicObject>,
    /// Present with `networkPolicy`.
    pub network_policy: Option<NetworkPolicy>,
    /// Present with `extensions.sequence.routing: Sidecar`.
    pub peers: Option<PeerObjects>,
    /// Present with `auth.inference.from: Identity`.
    pub identity: Option<IdentityObjects>,
    /// Present with `canary`.
    pub canary: Option<CanaryObjects>,
    /// Present with `service.gateway`.
    pub http_route: Option<DynamicObject>,
    /// Present with `service.gateway`.
    pub grpc_route: Option<DynamicObject>,
    /// Present with `scaleToZero`.
    pub activator: Option<ActivatorObjects>,
}

impl Children {
    /// The objects as JSON values, in apply order (the ConfigMap and the peers' service account
    /// first, so that new pods find them).
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut out = vec![typed(&self.config_map)?];
        // Before the Deployment: its pods mount the Secret cert-manager makes from it.
        if let Some(certificate) = &self.certificate {
            out.push(serde_json::to_value(certificate)?);
        }
        // Before the Deployment: its pods need the service account.
        if let Some(peers) = &self.peers {
            out.push(typed(&peers.service)?);
            if let Some(account) = &peers.service_account {
                out.push(typed(account)?);
            }
            out.push(typed(&peers.role)?);
            out.push(typed(&peers.role_binding)?);
        }
        if let Some(identity) = &self.identity {
            if let Some(account) = &identity.service_account {
                out.push(typed(account)?);
            }
            out.push(typed(&identity.role)?);
            out.push(typed(&identity.role_binding)?);
        }
        out.push(typed(&self.deployment)?);
        out.push(typed(&self.service)?);
        if let Some(pdb) = &self.pdb {
            out.push(typed(pdb)?);
        }
        if let Some(hpa) = &self.hpa {
            out.push(typed(hpa)?);
        }
        for object in self.scaled_object.iter().chain(&self.pod_monitor) {
            out.push(serde_json::to_value(object)?);
        }
        for object in self.http_route.iter().chain(&self.grpc_route) {
            out.push(serde_json::to_value(object)?);
        }
        if let Some(policy) = &self.network_policy {
            out.push(typed(policy)?);
        }
        if let Some(canary) = &self.canary {
            out.push(typed(&canary.config_map)?);
            out.push(typed(&canary.peers_service)?);
            out.push(typed(&canary.deployment)?);
            if let Some(hpa) = &canary.hpa {
                out.push(typed(hpa)?);
            }
            if let Some(object) = &canary.scaled_object {
                out.push(serde_json::to_value(object)?);
            }
        }
        if let Some(activator) = &self.activator {
            out.push(typed(&activator.config_map)?);
            if let Some(service) = &activator.peers_service {
                out.push(typed(service)?);
            }
            out.push(typed(&activator.service_account)?);
            out.push(typed(&activator.role)?);
            out.push(typed(&activator.role_binding)?);
            out.push(typed(&activator.deployment)?);
        }
        Ok(out)
    }

    /// Metadata of every object, in apply order.
    pub fn metas(&self) -> Vec<&ObjectMeta> {
        let mut out = vec![&self.config_map.metadata];
        if let Some(certificate) = &self.certificate {
            out.push(&certificate.metadata);
        }
        if let Some(peers) = &self.peers {
            out.push(&peers.service.metadata);
            if let Some(account) = &peers.service_account {
                out.push(&account.metadata);
            }
            out.push(&peers.role.metadata);
            out.push(&peers.role_binding.metadata);
        }
        if let Some(identity) = &self.identity {
            if let Some(account) = &identity.service_account {
                out.push(&account.metadata);
            }
            out.push(&identity.role.metadata);
            out.push(&identity.role_binding.metadata);
        }
        out.push(&self.deployment.metadata);
        out.push(&self.service.metadata);
        if let Some(pdb) = &self.pdb {
            out.push(&pdb.metadata);
        }
        if let Some(hpa) = &self.hpa {
            out.push(&hpa.metadata);
        }
        for object in self.scaled_object.iter().chain(&self.pod_monitor) {
            out.push(&object.metadata);
        }
        for object in self.http_route.iter().chain(&self.grpc_route) {
            out.push(&object.metadata);
        }
        if let Some(policy) = &self.network_policy {
            out.push(&policy.metadata);
        }
        if let Some(canary) = &self.canary {
            out.push(&canary.config_map.metadata);
            out.push(&canary.peers_service.metadata);
            out.push(&canary.deployment.metadata);
            if let Some(hpa) = &canary.hpa {
                out.push(&hpa.metadata);
            }
            if let Some(object) = &canary.scaled_object {
                out.push(&object.metadata);
            }
        }
        if let Some(activator) = &self.activator {
            out.push(&activator.config_map.metadata);
            if let Some(service) = &activator.peers_service {
                out.push(&service.metadata);
            }
            out.push(&activator.service_account.metadata);
            out.push(&activator.role.metadata);
            out.push(&activator.role_binding.metadata);
            out.push(&activator.deployment.metadata);
        }
        out
    }
}

/// `object` as JSON with its type's `apiVersion` and `kind` (k8s-openapi's constants), first for
/// readable output.
fn typed<K: k8s_openapi::Resource + serde::Serialize>(
    object: &K,
) -> serde_json::Result<serde_json::Value> {
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), K::API_VERSION.into());
    out.insert("kind".into(), K::KIND.into());
    if let serde_json::Value::Object(map) = serde_json::to_value(object)? {
        for (k, v) in map {
            if k != "apiVersion" && k != "kind" {
                out.insert(k, v);
            }
        }
    }
    Ok(serde_json::Value::Object(out))
}

/// Builds every child of `isvc`. Fails when the resource has no name or uid, or breaks a rule that
/// [`validate::spec`] checks.
pub fn build_children(
    isvc: &InferenceService,
    settings: &OperatorSettings,
) -> Result<Children, RenderError> {
    let name = isvc.metadata.name.clone().ok_or(RenderError::MissingName)?;
    validate::spec(isvc).map_err(|problems| RenderError::Invalid {
        name: name.clone(),
        problems,
    })?;
    let owner = owner_reference(isvc).ok_or_else(|| RenderError::MissingUid(name.clone()))?;
    let (config_map, deployment) = workload(isvc, settings, &owner, Variant::Stable)?;
    let service = service::service(isvc, &owner);
    let pdb = service::pdb(isvc, &owner);
    Ok(Children {
        config_map,
        deployment,
        service,
        pdb,
        hpa: autoscaling::hpa(isvc, &owner, Variant::Stable),
        scaled_object: autoscaling::scaled_object(isvc, &owner, Variant::Stable),
        pod_monitor: monitoring::pod_monitor(isvc, &owner),
        certificate: certificate::certificate(isvc, &owner, &settings.cluster_domain),
        network_policy: network::network_policy(isvc, settings, &owner),
        peers: peers::peer_objects(isvc, &owner),
        identity: identity::identity_objects(isvc, &owner),
        canary: canary::canary_objects(isvc, settings, &owner)?,
        http_route: routes::http_route(isvc, &owner),
        grpc_route: routes::grpc_route(isvc, &owner),
        activator: activator::activator_objects(isvc, settings, &owner)?,
    })
}

/// The sidecar's ConfigMap and the Deployment of one variant's pods.
fn workload(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
    variant: Variant,
) -> Result<(ConfigMap, Deployment), RenderError> {
    let name = isvc.name_any();
    let config = sidecar_config(isvc, settings, variant);
    config.validate(&[]).map_err(|errors| RenderError::Config {
        name: name.clone(),
        message: errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    let config_text = infergate_config::yaml::to_string(&config)
        .map_err(|message| RenderError::Config { name, message })?;
    let config_map = config::config_map(
        isvc,
        owner,
        &config_text,
        settings.status_client_ca.as_deref(),
        variant,
    );
    let hash = config_hash(config_text.as_bytes());
    let deployment = deployment::deployment(isvc, settings, owner, &hash, variant);
    Ok((config_map, deployment))
}

/// The owner reference every child carries: controller, blocking owner deletion (so that a
/// foreground deletion of the InferenceService waits for its children). `None` when the resource
/// has no uid (it was never stored by an API server).
pub fn owner_reference(isvc: &InferenceService) -> Option<OwnerReference> {
    Some(OwnerReference {
        block_owner_deletion: Some(true),
        ..isvc.controller_owner_ref(&())?
    })
}

/// Labels that select the pods. Only the name of the application and of the instance: they never
/// change, because a Deployment's selector cannot.
pub fn selector_labels(isvc: &InferenceService) -> BTreeMap<String, String> {
    Variant::Stable.selector_labels(isvc)
}

/// `app.kubernetes.io/name` of the canary's pods: a value of their own, so that neither the
/// service's Deployment nor its client Service selects them (clients reach the canary only
/// through the service's sidecars, which split the calls).
pub const CANARY_APP_NAME: &str = "infergate-canary";

/// Whose pods an object is for: the service's own, or its canary's (`spec.canary`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The service's pods, `<name>`.
    Stable,
    /// The canary's, `<name>-canary`.
    Canary,
}

impl Variant {
    /// The name of one of the variant's objects: `<name><suffix>` or `<name>-canary<suffix>`.
    pub fn name(self, isvc: &InferenceService, suffix: &str) -> String {
        match self {
            Variant::Stable => format!("{}{suffix}", isvc.name_any()),
            Variant::Canary => format!("{}-canary{suffix}", isvc.name_any()),
        }
    }

    /// Labels that select the variant's pods: the application's name (the canary's own) and
    /// the instance, the resource's name.
    pub fn selector_labels(self, isvc: &InferenceService) -> BTreeMap<String, String> {
        let app = match self {
            Variant::Stable => APP_NAME,
            Variant::Canary => CANARY_APP_NAME,
        };
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), app.to_string()),
            ("app.kubernetes.io/instance".to_string(), isvc.name_any()),
        ])
    }

    /// Labels of the variant's pods: its selector labels and the manager.
    pub fn pod_labels(self, isvc: &InferenceService) -> BTreeMap<String, String> {
        let mut labels = self.selector_labels(isvc);
        labels.insert(
            "app.kubernetes.io/managed-by".to_string(),
            MANAGER.to_string(),
        );
        labels
    }
}

/// A selector of every pod of the resource, its canary's and its activator's too where it has
/// them (the NetworkPolicy's, the PodMonitor's).
pub fn all_pods_selector(isvc: &InferenceService) -> LabelSelector {
    let mut apps = vec![APP_NAME.to_string()];
    if isvc.spec.canary.is_some() {
        apps.push(CANARY_APP_NAME.to_string());
    }
    if isvc.spec.scale_to_zero.is_some() {
        apps.push(ACTIVATOR_APP_NAME.to_string());
    }
    if apps.len() == 1 {
        return LabelSelector {
            match_labels: Some(selector_labels(isvc)),
            ..LabelSelector::default()
        };
    }
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "app.kubernetes.io/instance".to_string(),
            isvc.name_any(),
        )])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app.kubernetes.io/name".to_string(),
            operator: "In".to_string(),
            values: Some(apps),
        }]),
    }
}

/// Labels of every child and of the pods: the selector labels plus the manager.
pub fn labels(isvc: &InferenceService) -> BTreeMap<String, String> {
    let mut labels = selector_labels(isvc);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        MANAGER.to_string(),
    );
    labels
}

/// The selector in string form, as the scale subresource wants it in `status.selector`.
pub fn selector_string(isvc: &InferenceService) -> String {
    selector_labels(isvc)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The addresses clients use inside the cluster, for `status.url`.
pub fn service_urls(isvc: &InferenceService) -> ServiceUrls {
    let host = match isvc.namespace() {
        Some(ns) => format!("{}.{ns}.svc", isvc.name_any()),
        None => isvc.name_any(),
    };
    let ports = &isvc.spec.sidecar.ports;
    let scheme = if isvc.spec.tls.is_some() {
        "https"
    } else {
        "http"
    };
    ServiceUrls {
        rest: format!("{scheme}://{host}:{}", ports.http),
        grpc: format!("{host}:{}", ports.grpc),
    }
}

/// Metadata of a child: name, the resource's namespace, labels, owner reference.
fn child_meta(isvc: &InferenceService, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: isvc.meta().namespace.clone(),
        labels: Some(labels(isvc)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// A Role `name` of the pods' access: `rule` alone.
fn pods_role(
    isvc: &InferenceService,
    name: &str,
    rule: PolicyRule,
    owner: &OwnerReference,
) -> Role {
    Role {
        metadata: child_meta(isvc, name.to_string(), owner),
        rules: Some(vec![rule]),
    }
}

/// The RoleBinding `name` of the Role `name` to the service account `account` of the
/// resource's namespace.
fn pods_role_binding(
    isvc: &InferenceService,
    name: &str,
    account: String,
    owner: &OwnerReference,
) -> RoleBinding {
    RoleBinding {
        metadata: child_meta(isvc, name.to_string(), owner),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: name.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: account,
            namespace: isvc.namespace(),
            ..Subject::default()
        }]),
    }
}

/// 64-bit FNV-1a of the configuration, as 16 hex digits. Stable across Rust releases (unlike
/// `DefaultHasher`), which matters: a different hash would roll every pod after an upgrade.
pub fn config_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_values() {
        assert_eq!(config_hash(b""), "cbf29ce484222325");
        assert_eq!(config_hash(b"a"), "af63dc4c8601ec8c");
        assert_eq!(config_hash(b"foobar"), "85944171f73967e8");
    }
}
