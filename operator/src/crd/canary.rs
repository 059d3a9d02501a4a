//! `spec.canary`: a second variant of the service, on pods of its own, given a share of the
//! calls. The split is made per call by the sidecars of the service's pods (docs/operator.md,
//! "Canaries"), so it holds for one gRPC channel and needs no gateway.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{AutoscalingSpec, ModelContainer, ModelSettings};

/// A canary: its model server container, its models, how many pods, and the share of the calls
/// it gets. Promote it by copying its model (and models) to spec.model (spec.models) and
/// removing it; roll it back by removing it. Neither loses a call.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// Percent of the calls given to the canary, 0 to 100, drawn per call (a whole sequence goes
    /// to one variant). Changing it rolls no pod: the sidecars read it again within a minute or
    /// so, as the kubelet updates their ConfigMap.
    #[schemars(range(min = 0, max = 100))]
    pub traffic_percent: i32,
    /// The canary's model server container, as spec.model (the image, its arguments,
    /// storageUri, resources, ...).
    pub model: ModelContainer,
    /// The canary's models, as spec.models. Unset: spec.models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub models: Option<Vec<ModelSettings>>,
    /// Number of canary pods.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The canary's own autoscaler, as spec.autoscaling. Unset: canary.replicas pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
}

fn one() -> i32 {
    1
}
