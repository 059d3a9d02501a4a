//! What sidecar routing of sequences needs (`extensions.sequence.routing: Sidecar`), and a
//! canary's split (`canary`): a headless Service whose EndpointSlices list the pods, and the
//! least access that lets the sidecars watch them (the canary's `<name>-canary-peers` too): a Role allowing `list` and `watch` on `endpointslices` in the resource's
//! namespace, bound to the pods' service account (the one `pod.serviceAccountName` names, else
//! `<name>-sequence-peers`, made for it).

use k8s_openapi::api::core::v1::{Service, ServiceAccount, ServicePort, ServiceSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{Variant, child_meta, pods_role, pods_role_binding};
use crate::crd::InferenceService;

/// Name of the headless Service, the Role, the RoleBinding and (where the resource names none)
/// the service account.
pub fn peers_name(isvc: &InferenceService) -> String {
    Variant::Stable.name(isvc, "-peers")
}

/// Name of the Role, the RoleBinding and the service account made for the pods.
pub fn access_name(isvc: &InferenceService) -> String {
    format!("{}-sequence-peers", isvc.name_any())
}

/// The objects, where the resource routes sequences by sidecar.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerObjects {
    pub service: Service,
    /// `None` where `pod.serviceAccountName` names the pods' account.
    pub service_account: Option<ServiceAccount>,
    pub role: Role,
    pub role_binding: RoleBinding,
}

pub(super) fn peer_objects(isvc: &InferenceService, owner: &OwnerReference) -> Option<PeerObjects> {
    if !isvc.spec.sidecars_dial_peers() {
        return None;
    }
    let access = access_name(isvc);
    let account = service_account_name(isvc)?;
    Some(PeerObjects {
        service: headless_service(isvc, owner, Variant::Stable),
        service_account: isvc
            .spec
            .pod
            .service_account_name
            .is_none()
            .then(|| ServiceAccount {
                metadata: child_meta(isvc, access.clone(), owner),
                ..ServiceAccount::default()
            }),
        role: pods_role(
            isvc,
            &access,
            PolicyRule {
                api_groups: Some(vec!["discovery.k8s.io".to_string()]),
                resources: Some(vec!["endpointslices".to_string()]),
                verbs: vec!["list".to_string(), "watch".to_string()],
                ..PolicyRule::default()
            },
            owner,
        ),
        role_binding: pods_role_binding(isvc, &access, account, owner),
    })
}

/// The pods' service account where sidecars watch peers: the resource's own, else ours.
pub(super) fn service_account_name(isvc: &InferenceService) -> Option<String> {
    if !isvc.spec.sidecars_dial_peers() {
        return isvc.spec.pod.service_account_name.clone();
    }
    Some(
        isvc.spec
            .pod
            .service_account_name
            .clone()
            .unwrap_or_else(|| access_name(isvc)),
    )
}

/// `<name>-peers` (the canary's `<name>-canary-peers`): headless (no cluster address, no load
/// balancing), on the sidecars' gRPC port, where the peers reach each other. Only its
/// EndpointSlices are used.
pub(super) fn headless_service(
    isvc: &InferenceService,
    owner: &OwnerReference,
    variant: Variant,
) -> Service {
    Service {
        metadata: child_meta(isvc, variant.name(isvc, "-peers"), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(variant.selector_labels(isvc)),
            ports: Some(vec![ServicePort {
                name: Some("grpc".to_string()),
                port: isvc.spec.sidecar.ports.grpc,
                target_port: Some(IntOrString::String("grpc".to_string())),
                protocol: Some("TCP".to_string()),
                app_protocol: Some("kubernetes.io/h2c".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
