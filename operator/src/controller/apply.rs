//! Server-side apply of the children, with one field manager, skipped when the stored object
//! already holds every field we would set (so an unchanged resource causes no write at all).

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The one field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "infergate-operator";

/// Annotation on every child: a hash of what the operator last applied. Comparing the stored
/// object with the desired one finds fields that differ or are missing, but not a field the
/// operator set before and no longer wants (a nodeSelector removed from the spec): the stored
/// object still has it, as server additions are kept. A changed hash says the desired object
/// changed, so it is applied, and server-side apply removes the fields the manager dropped.
pub const APPLIED_HASH_ANNOTATION: &str = "infergate.dev/applied-hash";

/// What happened to one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Created or changed.
    Written,
    /// Already as desired: no request sent beyond the read.
    Unchanged,
    /// Deleted (an object the spec no longer asks for).
    Deleted,
    /// Nothing to delete.
    Absent,
}

/// Why a child was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object of the child's kind and name exists that this resource does not control.
    /// Applying would take it over, and deleting the resource would then delete it.
    #[error(
        "{kind} '{name}' already exists and is not controlled by this InferenceService \
         ({holder}): it is left as it is; delete or rename it, or rename the InferenceService"
    )]
    NotControlled {
        kind: String,
        name: String,
        holder: String,
    },
    /// The API server refused the object itself (invalid, forbidden by admission or quota): no
    /// retry can succeed until the spec, or the cluster's policy, changes.
    #[error("the API server refused {kind} '{name}' ({code}): {message}")]
    Rejected {
        kind: String,
        name: String,
        code: u16,
        message: String,
    },
}

/// Whether `actual` holds every field of `desired` with the same value. Fields the server adds
/// (defaults, status, metadata) are ignored; an empty list, map or null in `desired` matches a
/// missing field, because the server drops those.
pub fn contains(actual: Option<&Value>, desired: &Value) -> bool {
    match (actual, desired) {
        (None | Some(Value::Null), Value::Null) => true,
        (None, Value::Array(a)) => a.is_empty(),
        (None, Value::Object(o)) => o.is_empty(),
        (None, _) => false,
        (Some(Value::Object(a)), Value::Object(d)) => d.iter().all(|(k, v)| contains(a.get(k), v)),
        (Some(Value::Array(a)), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(x, y)| contains(Some(x), y))
        }
        (Some(a), d) => a == d,
    }
}

/// `desired` as it is applied: with its hash in the `APPLIED_HASH_ANNOTATION` annotation.
pub fn as_applied<K: Serialize>(desired: &K) -> serde_json::Result<Value> {
    let mut value = serde_json::to_value(desired)?;
    let digest = crate::render::config_hash(value.to_string().as_bytes());
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_HASH_ANNOTATION.to_string(), Value::String(digest));
        }
    }
    Ok(value)
}

/// The `APPLIED_HASH_ANNOTATION` of an object, if it has one.
fn applied_hash(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/annotations")?
        .get(APPLIED_HASH_ANNOTATION)?
        .as_str()
}

/// Applies `desired` unless the stored object already matches it; returns the object as the
/// server now holds it (so the caller need not read it again). An object of the same name that
/// the controller named in `desired`'s owner references does not control is never written.
pub async fn apply<K>(api: &Api<K>, desired: &K) -> Result<(Outcome, K), ApplyError>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
    <K as Resource>::DynamicType: Default,
{
    apply_typed(api, desired, &Default::default()).await
}

/// [`apply`] for a resource whose type is known at run time (`dt`), such as a custom resource
/// of another project (KEDA's ScaledObject, the Prometheus Operator's PodMonitor). A kind the
/// cluster does not serve is refused (404) with a message that says so.
pub async fn apply_typed<K>(
    api: &Api<K>,
    desired: &K,
    dt: &K::DynamicType,
) -> Result<(Outcome, K), ApplyError>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = desired.name_any();
    let wanted = as_applied(desired).map_err(kube::Error::SerdeError)?;
    let digest = applied_hash(&wanted);
    if let Some(current) = read(api, &name).await? {
        if let Some(holder) = foreign_holder(&current, desired) {
            return Err(ApplyError::NotControlled {
                kind: K::kind(dt).to_string(),
                name,
                holder,
            });
        }
        let stored = serde_json::to_value(&current).map_err(kube::Error::SerdeError)?;
        if applied_hash(&stored) == digest && contains(Some(&stored), &wanted) {
            return Ok((Outcome::Unchanged, current));
        }
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(&wanted)).await {
        Ok(written) => Ok((Outcome::Written, written)),
        // 400 Bad Request, 403 Forbidden (admission webhooks, quotas, policy) and 422 Invalid
        // are answers about the object; anything else (timeouts, 5xx, conflicts) is retried.
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
            Err(ApplyError::Rejected {
                kind: K::kind(dt).to_string(),
                name,
                code: e.code,
                message: e.message,
            })
        }
        // The object was read as absent and its kind cannot be written: the cluster does not
        // serve that API (a custom resource whose CRD is not installed).
        Err(kube::Error::Api(e)) if e.code == 404 => Err(ApplyError::Rejected {
            kind: K::kind(dt).to_string(),
            name,
            code: e.code,
            message: format!(
                "the cluster does not serve {} {} (is the project that defines it installed?): {}",
                K::api_version(dt),
                K::kind(dt),
                e.message
            ),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The stored object, `None` when there is none. Any 404 counts: a kind the cluster does not
/// serve answers a plain "404 page not found", not the API's NotFound status.
pub async fn read<K>(api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Who holds `current` when the controller that `desired` names does not: its controller, or
/// its field managers where it has none. `None` when it is ours (or `desired` names no
/// controller, so there is nobody to compare with).
fn foreign_holder<K: Resource>(current: &K, desired: &K) -> Option<String> {
    let ours = desired
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let controller = current
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(c) if c.uid == ours.uid => None,
        Some(c) => Some(format!("controlled by {} '{}'", c.kind, c.name)),
        None => {
            let mut managers: Vec<&str> = current
                .meta()
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.as_deref())
                .collect();
            managers.dedup();
            Some(if managers.is_empty() {
                "no controller".to_string()
            } else {
                format!("no controller; written by {}", managers.join(", "))
            })
        }
    }
}

/// Deletes `name` if it exists and the resource with `owner_uid` controls it (never an object
/// someone else made with the same name).
pub async fn delete_owned<K>(
    api: &Api<K>,
    name: &str,
    owner_uid: &str,
) -> Result<Outcome, kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    // A kind the cluster does not serve has nothing to delete (its read answers 404 too).
    let Some(current) = read(api, name).await? else {
        return Ok(Outcome::Absent);
    };
    let ours = current
        .owner_references()
        .iter()
        .any(|o| o.uid == owner_uid && o.controller == Some(true));
    if !ours {
        return Ok(Outcome::Absent);
    }
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(Outcome::Deleted),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Outcome::Absent),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn server_additions_are_ignored_and_changes_are_seen() {
        let desired =
            json!({"spec": {"replicas": 2, "args": [], "template": {"labels": {"a": "1"}}}});
        let stored = json!({"spec": {"replicas": 2, "paused": false, "template": {"labels": {"a": "1", "b": "2"}}}, "status": {}});
        assert!(contains(Some(&stored), &desired));
        let scaled = json!({"spec": {"replicas": 3, "template": {"labels": {"a": "1"}}}});
        assert!(!contains(Some(&scaled), &desired));
        let relabelled = json!({"spec": {"replicas": 2, "template": {"labels": {"a": "2"}}}});
        assert!(!contains(Some(&relabelled), &desired));
    }

    #[test]
    fn lists_compare_item_by_item() {
        let desired = json!([{"name": "a", "port": 1}]);
        assert!(contains(
            Some(&json!([{"name": "a", "port": 1, "protocol": "TCP"}])),
            &desired
        ));
        assert!(!contains(
            Some(&json!([{"name": "a", "port": 1}, {"name": "b"}])),
            &desired
        ));
        assert!(!contains(None, &desired));
    }
}
