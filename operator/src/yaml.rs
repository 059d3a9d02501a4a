//! The only place the operator reads or writes YAML, so the YAML library can be swapped in one
//! module. (The sidecar's configuration goes through `infergate_config::yaml`.)

use serde::{Deserialize, Serialize};

/// Parses a YAML stream (documents separated by `---`) into JSON values. Empty documents are
/// skipped.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            serde_json::Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Renders one value as a YAML document (without the leading `---`).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    serde_yaml::to_string(value).map_err(|e| e.to_string())
}

/// Renders values as a YAML stream, each document introduced by `---`.
pub fn to_stream<T: Serialize>(values: &[T]) -> Result<String, String> {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        out.push_str(&to_string(value)?);
    }
    Ok(out)
}
