//! Schemas for embedded Kubernetes types, used through `#[schemars(schema_with = "...")]` on the
//! fields that hold them. Their full schemas would repeat long descriptions (every Quantity
//! carries a page of text) and grow the CRD past what client-side apply can store, so they are
//! kept open here and validated when the Deployment is created.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::json;

/// An object whose fields are kept as written.
pub(super) fn free_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A list of objects kept as written, atomic.
pub(super) fn objects_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// A list of objects kept as written, each with a unique name (a list-map keyed by name).
pub(super) fn named_objects_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 64,
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {
                "type": "string", "minLength": 1, "maxLength": 253,
                "description": "Name, unique in the list.",
            }},
            "x-kubernetes-preserve-unknown-fields": true,
        },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// A count of pods or a percentage of replicas, as a Deployment's rollingUpdate takes them. A
/// structural schema cannot tell the two forms apart (no types inside anyOf), so which values
/// are allowed is checked when the resource is rendered (`validate::spec`).
pub(super) fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true})
}

/// ResourceRequirements with quantities as integers or strings. Dynamic resource claims are not
/// offered yet (the pod has no resourceClaims to point at).
pub(super) fn resources_schema(_: &mut SchemaGenerator) -> Schema {
    let quantities = |what: &str| {
        json!({
            "description": format!("{what}, by resource name (cpu, memory, nvidia.com/gpu, ...): a quantity such as 500m, 2Gi or 1."),
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {"x-kubernetes-int-or-string": true},
        })
    };
    json_schema!({
        "type": "object",
        "properties": {
            "limits": quantities("Most the container may use"),
            "requests": quantities("What the scheduler reserves for the container"),
        },
    })
}
