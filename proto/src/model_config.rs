//! The model configuration (`inference.ModelConfig`) in its two textual forms: the protobuf text
//! format of `config.pbtxt` files, and the JSON that Triton's REST `/config` route returns.
//!
//! Triton prints the config with protobuf's JSON printer (proto field names, enum names, every
//! scalar, repeated and map field even when empty, unset sub-messages omitted) and then turns the
//! 64-bit integers it would quote back into numbers. [`to_json`] reproduces that shape, so
//! `perf_analyzer` and `tritonclient` read our configs exactly as they read Triton's.

use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value,
};
use serde_json::{Map, Value as Json};

use crate::inference::ModelConfig;

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(
        || match DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET) {
            Ok(pool) => pool,
            // The descriptor set is produced by this crate's build script from the same files the
            // generated code comes from; failing to decode it is a build defect.
            Err(err) => panic!("embedded file descriptor set is invalid: {err}"),
        },
    )
}

fn model_config_descriptor() -> Result<MessageDescriptor, String> {
    pool()
        .get_message_by_name("inference.ModelConfig")
        .ok_or_else(|| "inference.ModelConfig is missing from the descriptor pool".to_string())
}

/// Parses a `config.pbtxt` (protobuf text format) into a `ModelConfig`.
pub fn parse_text(text: &str) -> Result<ModelConfig, String> {
    let desc = model_config_descriptor()?;
    let text = add_list_colons(text);
    let dynamic = DynamicMessage::parse_text_format(desc, &text).map_err(|e| e.to_string())?;
    ModelConfig::decode(dynamic.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

/// Triton's configs write lists of messages as `input [ { ... } ]`; protobuf's text format allows
/// the colon to be left out there, but our parser wants `input: [ ... ]`. Insert it, outside
/// strings and comments.
fn add_list_colons(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    let mut last_significant: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
                last_significant = Some(c);
            }
            '#' => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '[' => {
                if last_significant.is_some_and(|p| p.is_ascii_alphanumeric() || p == '_') {
                    out.push(':');
                }
                out.push('[');
                last_significant = Some('[');
            }
            c if c.is_whitespace() => out.push(c),
            c => {
                out.push(c);
                last_significant = Some(c);
            }
        }
    }
    out
}

/// `base` with the top-level fields of `overlay` (a JSON object in the form [`to_json`] writes)
/// put in their place: a field the overlay sets replaces the base's whole field.
pub fn overlay(base: &ModelConfig, overlay: &Json) -> Result<ModelConfig, String> {
    let Json::Object(fields) = overlay else {
        return Err("the configuration must be a JSON object".to_string());
    };
    let mut merged = to_json(base);
    if let Json::Object(target) = &mut merged {
        for (k, v) in fields {
            target.insert(k.clone(), v.clone());
        }
    }
    from_json(&merged)
}

/// Parses the JSON form (as Triton's REST `/config` returns it; 64-bit integers may be numbers
/// or strings). Unknown fields are ignored: upstream servers add fields of their own.
pub fn from_json(json: &Json) -> Result<ModelConfig, String> {
    let desc = model_config_descriptor()?;
    let opts = prost_reflect::DeserializeOptions::new().deny_unknown_fields(false);
    let dynamic = DynamicMessage::deserialize_with_options(desc, json.clone(), &opts)
        .map_err(|e| e.to_string())?;
    ModelConfig::decode(dynamic.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

/// Renders a `ModelConfig` as Triton's REST `/config` JSON.
pub fn to_json(config: &ModelConfig) -> Json {
    let Ok(desc) = model_config_descriptor() else {
        return Json::Object(Map::new());
    };
    match DynamicMessage::decode(desc, config.encode_to_vec().as_slice()) {
        Ok(message) => message_to_json(&message),
        Err(_) => Json::Object(Map::new()),
    }
}

fn message_to_json(message: &DynamicMessage) -> Json {
    let mut out = Map::new();
    for field in message.descriptor().fields() {
        let in_oneof = field.containing_oneof().is_some();
        let is_singular_message =
            !field.is_list() && !field.is_map() && matches!(field.kind(), Kind::Message(_));
        if (in_oneof || is_singular_message) && !message.has_field(&field) {
            continue;
        }
        let value = message.get_field(&field);
        out.insert(field.name().to_string(), value_to_json(&field, &value));
    }
    Json::Object(out)
}

fn value_to_json(field: &FieldDescriptor, value: &Value) -> Json {
    match value {
        Value::List(items) => Json::Array(items.iter().map(|v| scalar_to_json(field, v)).collect()),
        Value::Map(entries) => {
            let value_field = match field.kind() {
                Kind::Message(entry) => entry.map_entry_value_field(),
                _ => return Json::Object(Map::new()),
            };
            let mut keys: Vec<&MapKey> = entries.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                let key_text = match key {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(v) => v.to_string(),
                    MapKey::I64(v) => v.to_string(),
                    MapKey::U32(v) => v.to_string(),
                    MapKey::U64(v) => v.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                if let Some(v) = entries.get(key) {
                    out.insert(key_text, scalar_to_json(&value_field, v));
                }
            }
            Json::Object(out)
        }
        other => scalar_to_json(field, other),
    }
}

fn scalar_to_json(field: &FieldDescriptor, value: &Value) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(v) => Json::from(*v),
        Value::I64(v) => Json::from(*v),
        Value::U32(v) => Json::from(*v),
        Value::U64(v) => Json::from(*v),
        Value::F32(v) => {
            serde_json::Number::from_f64(f64::from(*v)).map_or(Json::Null, Json::Number)
        }
        Value::F64(v) => serde_json::Number::from_f64(*v).map_or(Json::Null, Json::Number),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64_encode(b)),
        Value::EnumNumber(n) => match field.kind() {
            Kind::Enum(e) => e
                .get_value(*n)
                .map_or_else(|| Json::from(*n), |v| Json::String(v.name().to_string())),
            _ => Json::from(*n),
        },
        Value::Message(m) => message_to_json(m),
        Value::List(_) | Value::Map(_) => value_to_json(field, value),
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIMPLE: &str = r#"
name: "simple"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt" } ]
sequence_batching { max_sequence_idle_microseconds: 5000000 }
"#;

    #[test]
    fn text_format_parses() {
        let cfg = parse_text(SIMPLE).unwrap();
        assert_eq!(cfg.name, "simple");
        assert_eq!(cfg.max_batch_size, 8);
        assert_eq!(cfg.input[0].dims, vec![16]);
        assert!(parse_text("no_such_field: 1").is_err());
    }

    #[test]
    fn json_has_triton_shape() {
        let cfg = parse_text(SIMPLE).unwrap();
        let json = to_json(&cfg);
        assert_eq!(json["name"], "simple");
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["input"][0]["data_type"], "TYPE_INT32");
        assert_eq!(json["input"][0]["format"], "FORMAT_NONE");
        // 64-bit integers are numbers, not strings.
        assert_eq!(json["input"][0]["dims"][0], 16);
        assert_eq!(
            json["sequence_batching"]["max_sequence_idle_microseconds"],
            5_000_000
        );
        // Primitive and repeated fields are always present; unset messages and oneofs are not.
        assert_eq!(json["input"][0]["optional"], false);
        assert_eq!(json["batch_input"], serde_json::json!([]));
        assert_eq!(json["parameters"], serde_json::json!({}));
        assert!(json.get("dynamic_batching").is_none());
        assert!(json.get("model_transaction_policy").is_none());
    }

    #[test]
    fn json_round_trips() {
        let cfg = parse_text(SIMPLE).unwrap();
        assert_eq!(from_json(&to_json(&cfg)).unwrap(), cfg);
    }

    #[test]
    fn base64_matches_standard() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
    }
}
