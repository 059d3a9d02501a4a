//! The field reference of `docs/operator.md`, generated from the CRD's schema (so from the same doc
//! comments `kubectl explain` prints). A test keeps the document in step with the types.

use serde_json::Value;

/// Marker before the generated part of `docs/operator.md`.
pub const BEGIN: &str = "<!-- BEGIN GENERATED FIELD REFERENCE (operator/src/reference.rs) -->";
/// Marker after the generated part.
pub const END: &str = "<!-- END GENERATED FIELD REFERENCE -->";

/// Markdown tables of the spec's and the status's fields: path, type, default, description.
pub fn markdown(schema: &Value) -> String {
    let mut out = String::new();
    for (title, root) in [("spec", "spec"), ("status", "status")] {
        out.push_str(&format!(
            "\n### `{title}`\n\n| field | type | default | description |\n|---|---|---|---|\n"
        ));
        if let Some(node) = schema.pointer(&format!("/properties/{root}")) {
            rows(node, root, &mut out);
        }
    }
    out
}

fn rows(node: &Value, path: &str, out: &mut String) {
    let Some(props) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, prop) in props {
        let field = format!("{path}.{name}");
        let mut description = prop
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .replace("\n\n", " ")
            .replace('\n', " ")
            .replace('|', "\\|");
        if required.contains(&name.as_str()) {
            description = format!("**Required.** {description}");
        }
        if let Some(values) = prop.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values
                .iter()
                .filter_map(Value::as_str)
                .map(|v| format!("`{v}`"))
                .collect();
            description.push_str(&format!(" One of {}.", values.join(", ")));
        }
        let default = match prop.get("default") {
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => format!("`{v}`"),
            Some(Value::Array(a)) if a.is_empty() => "`[]`".to_string(),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| `{field}` | {} | {default} | {description} |\n",
            type_of(prop)
        ));
        rows(prop, &field, out);
        if let Some(items) = prop.get("items") {
            rows(items, &format!("{field}[]"), out);
        }
    }
}

fn type_of(prop: &Value) -> String {
    if prop.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int or string".to_string();
    }
    match prop.get("type").and_then(Value::as_str) {
        Some("array") => {
            let item = prop.get("items").map(type_of).unwrap_or_default();
            format!("[]{item}")
        }
        Some("object") => {
            if let Some(additional) = prop.get("additionalProperties")
                && additional.is_object()
            {
                format!("map[string]{}", type_of(additional))
            } else {
                "object".to_string()
            }
        }
        Some(t) => t.to_string(),
        None if prop.get("x-kubernetes-int-or-string").is_some() => "int or string".to_string(),
        None => "any".to_string(),
    }
}

/// Replaces the generated part of `doc` (between [`BEGIN`] and [`END`]) with `generated`.
/// `None` when the markers are missing.
pub fn splice(doc: &str, generated: &str) -> Option<String> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = doc.find(END)?;
    (start <= end).then(|| format!("{}\n{}\n{}", &doc[..start], generated.trim(), &doc[end..]))
}
