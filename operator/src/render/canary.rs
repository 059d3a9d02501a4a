//! A canary's objects (`spec.canary`): its pods are the service's, but for the model server
//! container, the models, the count and the autoscaler, which are the canary's. They are
//! rendered from the canary's view of the resource ([`canary_view`]) by the functions that
//! render the service's own, named `<name>-canary...` and labelled
//! `app.kubernetes.io/name: infergate-canary` (`Variant::Canary`), so that neither the service's
//! Deployment nor its client Service selects them: clients reach the canary through the
//! service's sidecars, which split the calls and find the canary's pods through the headless
//! Service `<name>-canary-peers`.
//!
//! | object | name |
//! |---|---|
//! | ConfigMap (the canary's sidecars' configuration) | `<name>-canary-sidecar` |
//! | Deployment | `<name>-canary` |
//! | Service (headless, gRPC) | `<name>-canary-peers` |
//! | HorizontalPodAutoscaler or ScaledObject | `<name>-canary`, with `canary.autoscaling` |

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;

use super::{OperatorSettings, RenderError, Variant};
use crate::crd::InferenceService;

/// The canary's objects, where the resource has a canary.
#[derive(Clone, Debug, PartialEq)]
pub struct CanaryObjects {
    pub config_map: ConfigMap,
    pub deployment: Deployment,
    /// `<name>-canary-peers`, where the service's sidecars find the canary's.
    pub peers_service: Service,
    pub hpa: Option<HorizontalPodAutoscaler>,
    pub scaled_object: Option<DynamicObject>,
}

/// Name of the canary's headless Service.
pub fn canary_peers_name(isvc: &InferenceService) -> String {
    Variant::Canary.name(isvc, "-peers")
}

/// The resource as the canary's pods see it: the canary's model container, models, count and
/// autoscaler in place of the service's, and no canary of its own.
pub fn canary_view(isvc: &InferenceService) -> Option<InferenceService> {
    let canary = isvc.spec.canary.as_ref()?;
    let mut view = isvc.clone();
    view.spec.model = canary.model.clone();
    if let Some(models) = &canary.models {
        view.spec.models = models.clone();
    }
    view.spec.replicas = canary.replicas;
    // The canary keeps its pods: scale to zero is the service's.
    view.spec.scale_to_zero = None;
    view.spec.autoscaling = canary.autoscaling.clone();
    view.spec.canary = None;
    Some(view)
}

pub(super) fn canary_objects(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
) -> Result<Option<CanaryObjects>, RenderError> {
    let Some(view) = canary_view(isvc) else {
        return Ok(None);
    };
    let (config_map, deployment) = super::workload(&view, settings, owner, Variant::Canary)?;
    Ok(Some(CanaryObjects {
        config_map,
        deployment,
        peers_service: super::peers::headless_service(&view, owner, Variant::Canary),
        hpa: super::autoscaling::hpa(&view, owner, Variant::Canary),
        scaled_object: super::autoscaling::scaled_object(&view, owner, Variant::Canary),
    }))
}
