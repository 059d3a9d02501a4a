//! The CustomResourceDefinition generated from the types, and the form it is printed and
//! committed in (`infergate-operator crd`, `crds/inferenceservices.infergate.dev.yaml`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::InferenceService;

/// The CustomResourceDefinition, as kube derives it from the types in [`crate::crd`].
pub fn crd() -> CustomResourceDefinition {
    InferenceService::crd()
}

/// The CustomResourceDefinition as JSON, tidied for people who read it: descriptions written as
/// wrapped doc comments become one paragraph per blank-line-separated block, and integral bounds
/// (`minimum: 0.0`) are written as integers.
pub fn crd_json() -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(crd())?;
    tidy(&mut value, None);
    Ok(value)
}

/// The CustomResourceDefinition as YAML: what `infergate-operator crd` prints and
/// `crds/inferenceservices.infergate.dev.yaml` holds.
pub fn crd_yaml() -> Result<String, String> {
    let value = crd_json().map_err(|e| e.to_string())?;
    crate::yaml::to_string(&value)
}

/// The openAPIV3Schema of the (only) version, as JSON.
pub fn openapi_schema() -> Result<serde_json::Value, String> {
    let value = crd_json().map_err(|e| e.to_string())?;
    value
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .ok_or_else(|| "the CRD has no openAPIV3Schema".to_string())
}

fn tidy(value: &mut serde_json::Value, key: Option<&str>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                tidy(v, Some(k.as_str()));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| tidy(v, None)),
        Value::String(s) if key == Some("description") => *s = unwrap_lines(s),
        Value::Number(n) if matches!(key, Some("minimum" | "maximum")) => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *value = Value::from(f as i64);
            }
        }
        _ => {}
    }
}

/// Joins the lines of each paragraph with spaces; paragraphs stay separated by a blank line.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}
