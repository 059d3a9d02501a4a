//! `spec.scaleToZero`: the service goes to zero pods when idle and comes back on the first call,
//! which an activator holds meanwhile (docs/operator.md, "Scale to zero").

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Scale to zero: after idleSeconds without an inference call, an open stream or a live
/// sequence, the operator scales the Deployment to 0 and points the client Service at an
/// activator (`<name>-activator`, the sidecar's image in another role), which holds the calls
/// that come, starts a pod, and passes them on once it is ready.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZeroSpec {
    /// Seconds with no inference call, no open stream and no live sequence on any pod before the
    /// service scales to zero.
    #[serde(default = "default_idle_seconds")]
    #[schemars(range(min = 10, max = 86400))]
    pub idle_seconds: i32,
    /// Longest a call waits for a pod, in seconds; then 503 / UNAVAILABLE. Cover the image pull
    /// and the model's load.
    #[serde(default = "default_hold_timeout_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub hold_timeout_seconds: i32,
    /// Most calls the activator holds at once; past it, 503 / UNAVAILABLE with Retry-After.
    #[serde(default = "default_max_held_calls")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_held_calls: i32,
    /// Most request bytes the activator holds at once (the bodies of held calls).
    #[serde(default = "default_max_held_bytes")]
    #[schemars(range(min = 1024, max = 17179869184_i64))]
    pub max_held_bytes: i64,
    /// The activator's pods.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 10))]
    pub activator_replicas: i32,
}

impl Default for ScaleToZeroSpec {
    /// `scaleToZero: {}`, as the schema's defaults make it.
    fn default() -> Self {
        ScaleToZeroSpec {
            idle_seconds: default_idle_seconds(),
            hold_timeout_seconds: default_hold_timeout_seconds(),
            max_held_calls: default_max_held_calls(),
            max_held_bytes: default_max_held_bytes(),
            activator_replicas: one(),
        }
    }
}

fn default_idle_seconds() -> i32 {
    300
}

fn default_hold_timeout_seconds() -> i32 {
    300
}

fn default_max_held_calls() -> i32 {
    256
}

fn default_max_held_bytes() -> i64 {
    64 << 20
}

fn one() -> i32 {
    1
}
