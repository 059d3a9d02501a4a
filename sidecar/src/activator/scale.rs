//! Starting the service: the Deployment's scale subresource raised from 0 when a call is held,
//! and, while calls wait, the InferenceService's status read for a reason its pods cannot start
//! (the operator puts it there: an image that cannot be pulled, a model that cannot be fetched,
//! a container that keeps crashing).
//!
//! What this needs of the API server, and nothing more (the operator's Role for the activator):
//! `get` and `patch` on `deployments/scale` of the one Deployment, `get` on the one
//! InferenceService.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::Value;

use super::hold::{Hold, Phase};

/// How often the scale and the status are looked at while calls are held.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Reasons of the operator's that say the pods are not there yet, not that they cannot start:
/// a node may still come (a cluster autoscaler adding one), so calls wait for it.
const STILL_WAITING: &[&str] = &["NotReady", "Unschedulable", "ScaledToZero"];

pub struct Scaler {
    deployments: Option<(Api<Deployment>, String)>,
    service: Option<(Api<DynamicObject>, String)>,
    scale_to: u32,
    /// The service's failure, as last read; and the last error of the API server, for the
    /// answer of a call whose time is up.
    failure: Mutex<Option<Arc<str>>>,
    trouble: Mutex<Option<String>>,
    scale_ups: std::sync::atomic::AtomicU64,
}

impl Scaler {
    /// `deployment` and `inference_service` as `[NAMESPACE/]NAME`, either optional.
    pub fn new(
        client: kube::Client,
        deployment: Option<(String, String)>,
        inference_service: Option<(String, String)>,
        scale_to: u32,
    ) -> Scaler {
        let deployments = deployment.map(|(namespace, name)| {
            (
                Api::<Deployment>::namespaced(client.clone(), &namespace),
                name,
            )
        });
        let service = inference_service.map(|(namespace, name)| {
            let gvk = GroupVersionKind::gvk("infergate.dev", "v1alpha1", "InferenceService");
            let resource = ApiResource::from_gvk_with_plural(&gvk, "inferenceservices");
            (
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource),
                name,
            )
        });
        Scaler {
            deployments,
            service,
            scale_to,
            failure: Mutex::new(None),
            trouble: Mutex::new(None),
            scale_ups: Default::default(),
        }
    }

    /// The service's failure, as last read.
    pub fn failure(&self) -> Option<Arc<str>> {
        self.failure.lock().clone()
    }

    /// The last error of the API server, if the last look failed.
    pub fn trouble(&self) -> Option<String> {
        self.trouble.lock().clone()
    }

    /// Scales from zero that this activator made.
    pub fn scale_ups(&self) -> u64 {
        self.scale_ups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits for held calls; while there are some (or the service is failing), raises the
    /// scale from zero and reads the failure, every second. Until aborted.
    pub async fn run(self: Arc<Self>, hold: Arc<Hold>) {
        loop {
            hold.demanded().await;
            loop {
                self.look().await;
                let failing = matches!(hold.phase(), Phase::Failed(_));
                if (hold.held().0 == 0 && !failing) || hold.is_ready() {
                    break;
                }
                tokio::time::sleep(LOOK_EVERY).await;
            }
        }
    }

    async fn look(&self) {
        let mut trouble = None;
        if let Err(e) = self.scale_from_zero().await {
            trouble = Some(e);
        }
        match self.read_failure().await {
            Ok(failure) => *self.failure.lock() = failure,
            Err(e) => trouble = trouble.or(Some(e)),
        }
        let mut last = self.trouble.lock();
        if trouble.is_some() && *last != trouble {
            tracing::warn!(
                error = trouble.as_deref().unwrap_or_default(),
                "cannot start the service"
            );
        }
        *last = trouble;
    }

    /// Raises the Deployment's replicas to `scale_to` where they are 0.
    async fn scale_from_zero(&self) -> Result<(), String> {
        let Some((api, name)) = &self.deployments else {
            return Ok(());
        };
        let scale = api
            .get_scale(name)
            .await
            .map_err(|e| format!("reading the scale of deployment {name}: {e}"))?;
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        if replicas > 0 {
            return Ok(());
        }
        let patch = serde_json::json!({"spec": {"replicas": self.scale_to}});
        api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("scaling deployment {name} from zero: {e}"))?;
        self.scale_ups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(deployment = %name, replicas = self.scale_to, "scaled from zero for held calls");
        Ok(())
    }

    async fn read_failure(&self) -> Result<Option<Arc<str>>, String> {
        let Some((api, name)) = &self.service else {
            return Ok(None);
        };
        let object = api
            .get(name)
            .await
            .map_err(|e| format!("reading inferenceservice {name}: {e}"))?;
        let generation = object.metadata.generation;
        Ok(failure_of(object.data.get("status"), generation).map(Arc::from))
    }
}

/// The reason an InferenceService's pods cannot start, from its status: its `Ready` condition
/// false for the failure in `lastFailureInfo` (the operator sets both from the same finding), a
/// reason that is not one of waiting, first seen at the resource's current `generation`. A
/// failure first seen under an earlier spec is the old pods' (the user has changed the spec
/// since, to mend it, and its pods are being replaced): calls wait for the new ones.
pub fn failure_of(status: Option<&Value>, generation: Option<i64>) -> Option<String> {
    let status = status?;
    let ready = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    if ready.get("status").and_then(Value::as_str) != Some("False") {
        return None;
    }
    let reason = ready.get("reason").and_then(Value::as_str)?;
    if STILL_WAITING.contains(&reason) {
        return None;
    }
    let info = status
        .get("lastFailureInfo")
        .filter(|i| i.get("reason").and_then(Value::as_str) == Some(reason))?;
    let seen_at = info.get("generation").and_then(Value::as_i64);
    if seen_at.is_some() && generation.is_some() && seen_at != generation {
        return None;
    }
    let message = info
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message");
    let location = info
        .get("location")
        .and_then(Value::as_str)
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    Some(format!("{reason}: {message}{location}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(reason: &str, info_reason: &str) -> Value {
        json!({
            "conditions": [
                {"type": "Available", "status": "False", "reason": "x", "message": "y"},
                {"type": "Ready", "status": "False", "reason": reason, "message": "from the condition"},
            ],
            "lastFailureInfo": {"reason": info_reason, "message": "image \"no/such:1\" cannot be pulled",
                                "location": "pod/p container/model", "generation": 4},
        })
    }

    #[test]
    fn a_failure_the_ready_condition_names_is_the_reason() {
        let s = status("ImagePullFailed", "ImagePullFailed");
        assert_eq!(
            failure_of(Some(&s), Some(4)).as_deref(),
            Some("ImagePullFailed: image \"no/such:1\" cannot be pulled (pod/p container/model)")
        );
    }

    #[test]
    fn a_failure_of_an_earlier_spec_is_waited_out() {
        let s = status("ImagePullFailed", "ImagePullFailed");
        assert_eq!(
            failure_of(Some(&s), Some(5)),
            None,
            "the spec changed since: new pods"
        );
        assert!(failure_of(Some(&s), None).is_some());
    }

    #[test]
    fn waiting_is_not_failing() {
        for reason in STILL_WAITING {
            assert_eq!(
                failure_of(Some(&status(reason, reason)), Some(4)),
                None,
                "{reason}"
            );
        }
        let mut ready = status("Ready", "ImagePullFailed");
        ready["conditions"][1]["status"] = json!("True");
        assert_eq!(failure_of(Some(&ready), Some(4)), None);
        let unmatched = status("ContainerCrashing", "ImagePullFailed");
        assert_eq!(failure_of(Some(&unmatched), Some(4)), None);
        assert_eq!(failure_of(None, None), None);
        assert_eq!(failure_of(Some(&json!({})), None), None);
    }
}
