//! Reading InferenceService manifests offline, as `render` does: YAML documents → admission
//! (defaults, schema, CEL rules) → typed resources.

use serde_json::Value;

use crate::admission;
use crate::crd::{GROUP, InferenceService, KIND, VERSION};
use crate::yaml;

/// One document of a manifest stream.
#[derive(Debug)]
pub enum Document {
    /// An InferenceService that passed admission, with the schema's defaults applied.
    InferenceService(Box<InferenceService>),
    /// Any other object (a ConfigMap of label files, say), left alone.
    Other {
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
}

/// Parses a YAML stream. Every InferenceService in it goes through [`admission::admit`]; the
/// problems of all documents are reported together, each prefixed with its document number.
pub fn parse(text: &str) -> Result<Vec<Document>, Vec<String>> {
    let values = yaml::documents(text).map_err(|e| vec![e])?;
    let mut docs = Vec::new();
    let mut problems = Vec::new();
    for (i, value) in values.iter().enumerate() {
        match parse_one(value) {
            Ok(doc) => docs.push(doc),
            Err(errs) => {
                problems.extend(errs.into_iter().map(|e| format!("document {}: {e}", i + 1)))
            }
        }
    }
    if problems.is_empty() {
        Ok(docs)
    } else {
        Err(problems)
    }
}

fn parse_one(value: &Value) -> Result<Document, Vec<String>> {
    let field = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if kind != KIND || !api_version.starts_with(&format!("{GROUP}/")) {
        return Ok(Document::Other {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    if api_version != format!("{GROUP}/{VERSION}") {
        return Err(vec![format!(
            "apiVersion {api_version} is not served (this operator serves {GROUP}/{VERSION})"
        )]);
    }
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string();
    let admitted = admission::admit(value).map_err(|errs| {
        errs.into_iter()
            .map(|e| format!("{name}: {e}"))
            .collect::<Vec<_>>()
    })?;
    let isvc: InferenceService =
        serde_json::from_value(admitted).map_err(|e| vec![format!("{name}: {e}")])?;
    Ok(Document::InferenceService(Box::new(isvc)))
}
