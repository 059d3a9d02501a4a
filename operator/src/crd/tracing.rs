//! `spec.sidecar.tracing`: OpenTelemetry spans of the sidecar's requests (Triton's trace
//! extension, `--trace-config mode=opentelemetry`), exported over OTLP/HTTP.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tracing of sampled requests: a tree of spans per request (named as Triton names its own),
/// under the caller's W3C traceparent, whose call to the model server carries a traceparent of
/// its own so that the model server's spans join the trace. Level, rate and count can still be
/// changed at run time through the trace settings API (/v2/trace/setting).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TracingSpec {
    /// The OTLP/HTTP traces endpoint, e.g. http://otel-collector.observability:4318/v1/traces
    /// (plain HTTP; http:// is assumed without a scheme).
    #[schemars(length(min = 1))]
    pub endpoint: String,
    /// TIMESTAMPS: the spans and their events. TENSORS: also each input's and output's datatype
    /// and shape (never the data).
    #[serde(default)]
    pub level: TraceLevel,
    /// One request in `rate` is traced.
    #[serde(default = "default_rate")]
    #[schemars(range(min = 1))]
    pub rate: u32,
    /// Attributes added to the spans' resource. The operator adds k8s.namespace.name,
    /// k8s.pod.name and infergate.inference_service; service.name is infergate-sidecar unless
    /// given here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_attributes: BTreeMap<String, String>,
}

fn default_rate() -> u32 {
    1000
}

/// What a traced request records.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceLevel {
    #[default]
    #[serde(rename = "TIMESTAMPS")]
    Timestamps,
    #[serde(rename = "TENSORS")]
    Tensors,
}

impl TracingSpec {
    /// The sidecar's `--trace-config` settings, in Triton's syntax.
    pub fn trace_config(&self, namespace: &str, name: &str) -> Vec<String> {
        let mut settings = vec![
            "mode=opentelemetry".to_string(),
            "level=TIMESTAMPS".to_string(),
        ];
        if self.level == TraceLevel::Tensors {
            settings.push("level=TENSORS".to_string());
        }
        settings.push(format!("rate={}", self.rate));
        settings.push(format!("opentelemetry,url={}", self.endpoint));
        let mut resource = BTreeMap::from([
            ("k8s.namespace.name".to_string(), namespace.to_string()),
            ("infergate.inference_service".to_string(), name.to_string()),
        ]);
        resource.extend(self.resource_attributes.clone());
        settings.extend(
            resource
                .iter()
                .map(|(k, v)| format!("opentelemetry,resource={k}={v}")),
        );
        settings
    }
}
