//! `spec.rollout`: how a change of the pods rolls out (the Deployment's strategy), and the checks
//! on its limits that the schema cannot make.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::int_or_percent;

/// How a change of the pods rolls out (the Deployment's strategy).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.strategy == 'RollingUpdate' || (!has(self.maxSurge) && !has(self.maxUnavailable))")
        .message("maxSurge and maxUnavailable apply to strategy RollingUpdate only"),
)]
pub struct RolloutSpec {
    /// RollingUpdate replaces the pods a few at a time; Recreate stops them all, then starts the
    /// new ones (a gap in service).
    #[serde(default)]
    pub strategy: RolloutStrategy,
    /// Pods that may run above replicas during a rollout: a number or a percentage. Unset: 0
    /// when the model requests a GPU (a rollout then needs no spare GPU), else 25%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_surge: Option<IntOrString>,
    /// Pods that may be unavailable during a rollout: a number or a percentage. Unset: 1 when the
    /// model requests a GPU (with one replica, the old pod stops before the new one starts),
    /// else 25%. maxSurge and maxUnavailable may not both be 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_unavailable: Option<IntOrString>,
    /// Seconds a rollout may go without progress before the Deployment reports
    /// ProgressDeadlineExceeded, which status shows in RolledOut and lastFailureInfo. Unset: the
    /// Deployment's default, 600. Pods that pull large images or load large models need more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,
}

impl RolloutSpec {
    /// The rolling update's (maxSurge, maxUnavailable), `None` for Recreate. Unset ones follow
    /// the model's resources: with a GPU, Kubernetes' default (25% each, so one extra pod for one
    /// replica) would need a spare GPU for every rollout and wait for ever where there is none,
    /// so the old pod goes first (surge 0, unavailable 1).
    pub fn rolling_limits(&self, gpu: bool) -> Option<(IntOrString, IntOrString)> {
        if self.strategy == RolloutStrategy::Recreate {
            return None;
        }
        let default = |with_gpu: i32| {
            if gpu {
                IntOrString::Int(with_gpu)
            } else {
                IntOrString::String("25%".to_string())
            }
        };
        Some((
            self.max_surge.clone().unwrap_or_else(|| default(0)),
            self.max_unavailable.clone().unwrap_or_else(|| default(1)),
        ))
    }
}

/// Whether a rollout limit is a count of at least 0 or a whole percentage ("25%").
pub fn is_rollout_limit(limit: &IntOrString) -> bool {
    match limit {
        IntOrString::Int(n) => *n >= 0,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())),
    }
}

/// Whether a rollout limit lets no pod through (0 or 0%).
pub fn is_zero(limit: &IntOrString) -> bool {
    match limit {
        IntOrString::Int(n) => *n == 0,
        IntOrString::String(s) => s.trim_end_matches('%').parse::<u64>() == Ok(0),
    }
}

/// The Deployment strategy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutStrategy {
    /// Replace pods a few at a time (maxSurge, maxUnavailable).
    #[default]
    RollingUpdate,
    /// Stop every pod, then start the new ones.
    Recreate,
}
