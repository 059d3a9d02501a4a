//! `GET`/`POST /v2/logging`: the logging extension's settings.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::{Value as J, json};

use super::answer::json_ok;
use super::request_body::{body_json_error, read_body};
use crate::error::Result;
use crate::json::{self, Value};
use crate::log::LogSettings;
use crate::log::update::{self, LogValue};
use crate::protocol::Protocol;
use crate::state::SharedState;

fn logging_json(s: &LogSettings) -> J {
    json!({
        "log_file": s.log_file, "log_info": s.log_info, "log_warning": s.log_warning, "log_error": s.log_error,
        "log_verbose_level": s.log_verbose_level, "log_format": s.log_format,
    })
}

pub(super) async fn logging_get(State(st): State<SharedState>) -> Response {
    json_ok(&logging_json(&st.log.get()))
}

pub(super) async fn logging_post(State(st): State<SharedState>, body: Body) -> Result<Response> {
    let raw = read_body(body, 1 << 20, None, &st.limits).await?;
    // An empty body changes nothing; neither does anything but an object (Triton looks each
    // setting up by name and finds none).
    let doc = if raw.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        json::parse(&raw, 16).map_err(body_json_error)?
    };
    let mut settings = st.log.get();
    let result = update::update(&mut settings, Protocol::Http, |key| {
        doc.get(key).map(|v| match v {
            Value::Null => LogValue::Null,
            Value::Bool(b) => LogValue::Bool(*b),
            Value::Number(json::Number::Uint(u)) => LogValue::Uint(*u),
            Value::String(s) => LogValue::String(String::from_utf8_lossy(s).into_owned()),
            _ => LogValue::Other,
        })
    });
    // What was applied before an invalid setting stays applied, as in Triton.
    st.log.set(settings.clone());
    tracing::info!(level = settings.filter(), "log settings changed");
    result.map(|()| json_ok(&logging_json(&settings)))
}
