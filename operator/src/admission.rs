//! What the API server does to an InferenceService before it stores it, done offline so that
//! `render` (and the tests) reject what `kubectl apply` would reject: apply the schema's
//! defaults, check the structural schema (types, enums, ranges, lengths, patterns, required and
//! unknown fields, list-map keys), then evaluate the CEL rules (`x-kubernetes-validations`).
//!
//! The structural check covers the subset of OpenAPI the generated CRD uses; the CEL rules are
//! evaluated by `kube::core::cel` (kube-cel), which implements Kubernetes' CEL libraries.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::crd;

/// Admits `object` (one InferenceService as written): returns it with the schema's defaults
/// applied, or every problem found, one line each.
pub fn admit(object: &Value) -> Result<Value, Vec<String>> {
    let schema = crd::openapi_schema().map_err(|e| vec![e])?;
    let defaulted = kube::core::cel::apply_defaults(&schema, object);
    let mut problems = Vec::new();
    check(&schema, &defaulted, "", &mut problems);
    // CEL rules assume a structurally valid object; the API server does not run them otherwise.
    if problems.is_empty()
        && let Err(errors) = kube::core::cel::Validator::new().validate(&schema, &defaulted, None)
    {
        problems.extend(errors.iter().map(|e| e.to_string()));
    }
    if problems.is_empty() {
        Ok(defaulted)
    } else {
        Err(problems)
    }
}

fn at(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

/// Checks `value` against `schema`, appending problems with their JSON path.
fn check(schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    let get = |key: &str| schema.get(key);
    if value.is_null() {
        if get("nullable") != Some(&Value::Bool(true)) && get("type").is_some() {
            problems.push(format!("{}: must not be null", at(path)));
        }
        return;
    }
    let int_or_string = get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            problems.push(format!("{}: must be an integer or a string", at(path)));
        }
        return;
    }
    let type_ok = match get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        let want = get("type").and_then(Value::as_str).unwrap_or("?");
        problems.push(format!("{}: must be of type {want}", at(path)));
        return;
    }
    if let Some(allowed) = get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        problems.push(format!(
            "{}: {value} is not one of {}",
            at(path),
            names.join(", ")
        ));
    }
    match value {
        Value::Number(n) => {
            if let (Some(min), Some(v)) = (get("minimum").and_then(Value::as_f64), n.as_f64())
                && v < min
            {
                problems.push(format!("{}: {n} is less than {min}", at(path)));
            }
            if let (Some(max), Some(v)) = (get("maximum").and_then(Value::as_f64), n.as_f64())
                && v > max
            {
                problems.push(format!("{}: {n} is greater than {max}", at(path)));
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = get("minLength").and_then(Value::as_u64)
                && len < min
            {
                problems.push(format!(
                    "{}: must be at least {min} characters long",
                    at(path)
                ));
            }
            if let Some(max) = get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                problems.push(format!(
                    "{}: must be at most {max} characters long",
                    at(path)
                ));
            }
            if let Some(pattern) = get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => {
                        problems.push(format!("{}: {s:?} does not match {pattern}", at(path)))
                    }
                    Ok(_) => {}
                    Err(e) => problems.push(format!("{}: bad pattern {pattern}: {e}", at(path))),
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                problems.push(format!("{}: too few items (at least {min})", at(path)));
            }
            if let Some(max) = get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                problems.push(format!("{}: must have at most {max} items", at(path)));
            }
            if let Some(item_schema) = get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), problems);
                }
            }
            if get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                let keys: Vec<&str> = get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let key: Vec<String> = keys
                        .iter()
                        .map(|k| item.get(k).map(|v| v.to_string()).unwrap_or_default())
                        .collect();
                    if !seen.insert(key.clone()) {
                        problems.push(format!(
                            "{path}[{i}]: duplicate entry with {} {}",
                            keys.join("/"),
                            key.join("/")
                        ));
                    }
                }
            }
        }
        Value::Object(map) => {
            if let Some(min) = get("minProperties").and_then(Value::as_u64)
                && (map.len() as u64) < min
            {
                problems.push(format!("{}: too few entries (at least {min})", at(path)));
            }
            if let Some(max) = get("maxProperties").and_then(Value::as_u64)
                && map.len() as u64 > max
            {
                problems.push(format!("{}: must have at most {max} entries", at(path)));
            }
            for key in get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(key) {
                    problems.push(format!("{path}.{key}: required"));
                }
            }
            let properties = get("properties").and_then(Value::as_object);
            let additional = get("additionalProperties").filter(|a| a.is_object());
            let preserve = get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            for (key, v) in map {
                let child = format!("{path}.{key}");
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => check(s, v, &child, problems),
                    (None, Some(s)) => check(s, v, &child, problems),
                    // The root's apiVersion, kind and metadata are implicit in every CRD schema.
                    (None, None)
                        if preserve
                            || (path.is_empty()
                                && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")) => {}
                    (None, None) if properties.is_some() => {
                        problems.push(format!("{child}: unknown field"))
                    }
                    (None, None) => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(schema: Value, value: Value) -> Vec<String> {
        let mut out = Vec::new();
        check(&schema, &value, "", &mut out);
        out
    }

    #[test]
    fn structural_checks() {
        let schema = json!({
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"type": "integer", "minimum": 0.0, "maximum": 10.0},
                "b": {"type": "string", "enum": ["x", "y"]},
                "c": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3},
                "d": {"type": "array", "maxItems": 1, "items": {"type": "boolean"}},
                "e": {"type": "object", "additionalProperties": {"type": "string"}},
                "f": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }
        });
        assert!(
            problems(
                schema.clone(),
                json!({"a": 1, "f": [{"name": "p", "z": 1}]})
            )
            .is_empty()
        );
        let p = problems(
            schema,
            json!({"b": "z", "c": "ABCD", "d": [true, 1], "e": {"k": 1}, "g": 1,
                   "f": [{"name": "p"}, {"name": "p"}]}),
        );
        let text = p.join("\n");
        for want in [
            ".a: required",
            ".b: \"z\" is not one of",
            ".c: must be at most 3",
            ".c: \"ABCD\" does not match",
            ".d: must have at most 1 items",
            ".d[1]: must be of type boolean",
            ".e.k: must be of type string",
            ".g: unknown field",
            ".f[1]: duplicate entry with name \"p\"",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert_eq!(
            problems(json!({"type": "integer", "minimum": 0.0}), json!(-1)),
            ["<root>: -1 is less than 0"]
        );
    }
}
