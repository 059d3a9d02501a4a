//! What calls by Kubernetes identity need (`auth.inference.from: Identity`,
//! `auth.controlAPIs.from: Identity`): the sidecar
//! checks callers' tokens against the cluster's issuer keys (which every ServiceAccount may read)
//! and asks the API server whether a caller may use the verb, with a LocalSubjectAccessReview.
//! So the pods run with a ServiceAccount token (the one `pod.serviceAccountName` names, else the
//! sequence peers' account where there is one, else `<name>-identity`, made for it), and a Role
//! allows that account `create` on `localsubjectaccessreviews` in the namespace, and nothing
//! else.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::{child_meta, pods_role, pods_role_binding};
use crate::crd::InferenceService;

/// Name of the Role, the RoleBinding and the service account made for the pods.
pub fn identity_name(isvc: &InferenceService) -> String {
    format!("{}-identity", isvc.name_any())
}

/// The audience callers' tokens must be bound to.
pub fn audience(isvc: &InferenceService) -> String {
    isvc.spec
        .auth
        .inference
        .audience
        .clone()
        .unwrap_or_else(|| {
            format!(
                "infergate.dev/{}/{}",
                isvc.namespace().unwrap_or_default(),
                isvc.name_any()
            )
        })
}

/// The objects, where inference or the control APIs take an identity.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityObjects {
    /// `None` where the pods run with another account (the resource's, or the peers').
    pub service_account: Option<ServiceAccount>,
    pub role: Role,
    pub role_binding: RoleBinding,
}

pub(super) fn identity_objects(
    isvc: &InferenceService,
    owner: &OwnerReference,
) -> Option<IdentityObjects> {
    if !isvc.spec.auth.by_identity() {
        return None;
    }
    let name = identity_name(isvc);
    let account = pods_service_account(isvc)?;
    Some(IdentityObjects {
        service_account: (account == name).then(|| ServiceAccount {
            metadata: child_meta(isvc, name.clone(), owner),
            ..ServiceAccount::default()
        }),
        role: pods_role(
            isvc,
            &name,
            PolicyRule {
                api_groups: Some(vec!["authorization.k8s.io".to_string()]),
                resources: Some(vec!["localsubjectaccessreviews".to_string()]),
                verbs: vec!["create".to_string()],
                ..PolicyRule::default()
            },
            owner,
        ),
        role_binding: pods_role_binding(isvc, &name, account, owner),
    })
}

/// The pods' service account: the resource's own, else the sequence peers', else ours where
/// an API takes an identity; none (the namespace's default) otherwise.
pub(super) fn pods_service_account(isvc: &InferenceService) -> Option<String> {
    super::peers::service_account_name(isvc)
        .or_else(|| isvc.spec.auth.by_identity().then(|| identity_name(isvc)))
}

/// Whether the pods need a ServiceAccount token: to watch peers (a canary's included), or to
/// check identities.
pub(super) fn pods_need_token(isvc: &InferenceService) -> bool {
    isvc.spec.sidecars_dial_peers() || isvc.spec.auth.by_identity()
}
