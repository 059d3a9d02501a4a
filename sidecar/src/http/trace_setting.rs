//! `GET`/`POST /v2/trace/setting` and `/v2/models/{m}/trace/setting`: the trace settings as
//! Triton's HTTP front end reads and answers them (strings, `trace_level` a list, `null` to fall
//! back to the server's setting).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Map, Value as J};

use super::answer::json_ok;
use super::request_body::{body_json_error, read_body};
use crate::error::Result;
use crate::json::{self, Value};
use crate::protocol::Protocol;
use crate::state::SharedState;
use crate::trace::{Given, READ_ORDER, Update, View};

/// Largest settings body: a handful of short strings.
const MAX_BODY_BYTES: u64 = 64 * 1024;

pub async fn get_server(State(st): State<SharedState>) -> Response {
    json_ok(&view_json(&st.tracing.view(None)))
}

pub async fn get_model(
    State(st): State<SharedState>,
    Path(model): Path<String>,
) -> Result<Response> {
    st.check_trace_model(&model)?;
    Ok(json_ok(&view_json(&st.tracing.view(Some(&model)))))
}

pub async fn post_server(State(st): State<SharedState>, body: Body) -> Result<Response> {
    Ok(json_ok(&view_json(&post(&st, None, body).await?)))
}

pub async fn post_model(
    State(st): State<SharedState>,
    Path(model): Path<String>,
    body: Body,
) -> Result<Response> {
    Ok(json_ok(&view_json(&post(&st, Some(&model), body).await?)))
}

async fn post(st: &SharedState, model: Option<&str>, body: Body) -> Result<View> {
    if let Some(model) = model {
        st.check_trace_model(model)?;
    }
    let raw = read_body(body, MAX_BODY_BYTES, None, &st.limits).await?;
    // An empty body is a syntax error here, as in Triton ("The document is empty.").
    let doc = json::parse(&raw, 16).map_err(body_json_error)?;
    let update = update_of(&doc);
    st.tracing.update(model, &update, Protocol::Http)
}

/// The settings a body names, each read with Triton's JSON accessors (a value of the wrong type
/// is kept with their words, to be refused in Triton's reading order). Anything but an object
/// names none.
fn update_of(doc: &Value<'_>) -> Update {
    let Value::Object(members) = doc else {
        return Update::new();
    };
    let mut update = Update::new();
    for (key, value) in members {
        let key = String::from_utf8_lossy(key).into_owned();
        // Others are ignored whatever their type.
        if !READ_ORDER.contains(&key.as_str()) {
            continue;
        }
        let given = match value {
            Value::Null => Given::Clear,
            _ if key == "trace_level" => match value {
                Value::Array(items) => items
                    .iter()
                    .map(string)
                    .collect::<Option<Vec<_>>>()
                    .map_or(Given::Unreadable(NOT_A_STRING), Given::Values),
                _ => Given::Unreadable("attempt to access JSON non-array as array"),
            },
            _ => string(value).map_or(Given::Unreadable(NOT_A_STRING), |s| Given::Values(vec![s])),
        };
        update.push((key, given));
    }
    update
}

const NOT_A_STRING: &str = "attempt to access JSON non-string as string";

fn string(value: &Value<'_>) -> Option<String> {
    match value {
        Value::String(s) => Some(String::from_utf8_lossy(s).into_owned()),
        _ => None,
    }
}

fn view_json(view: &View) -> J {
    let mut object = Map::new();
    for (key, values) in view {
        let value = if *key == "trace_level" {
            J::Array(values.iter().cloned().map(J::String).collect())
        } else {
            J::String(values.first().cloned().unwrap_or_default())
        };
        object.insert((*key).to_string(), value);
    }
    J::Object(object)
}
