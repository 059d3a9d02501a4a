//! Where spans go: the OpenTelemetry SDK's batch processor, which queues finished spans and
//! sends them over OTLP/HTTP (protobuf) from a thread of its own, so a request only pays for
//! handing its spans over; a full queue drops spans rather than slowing requests. An
//! `https://` collector is reached over TLS ([`super::otlp_client`]).

use std::time::Duration;

use infergate_config::TraceConfig;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};

/// The service name spans carry unless the configuration or `OTEL_SERVICE_NAME` names one.
pub const DEFAULT_SERVICE_NAME: &str = "infergate-sidecar";

/// How long an export may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter of one process.
pub struct Exporter {
    provider: SdkTracerProvider,
    pub(super) tracer: SdkTracer,
}

impl Exporter {
    pub fn new(config: &TraceConfig) -> Result<Exporter, String> {
        let client = super::otlp_client::OtlpHttpClient::new(config, EXPORT_TIMEOUT)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.endpoint())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
        let batching = BatchConfigBuilder::default()
            .with_max_queue_size(config.bsp_max_queue_size as usize)
            .with_max_export_batch_size(config.bsp_max_export_batch_size as usize)
            .with_scheduled_delay(Duration::from_millis(u64::from(
                config.bsp_schedule_delay_ms,
            )))
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batching)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            // Which requests are traced is decided before a span starts (trace_rate,
            // trace_count), whatever the caller's sampled flag says, as Triton decides.
            .with_sampler(Sampler::AlwaysOn)
            .with_resource(resource(config))
            .build();
        let tracer = provider.tracer("infergate");
        Ok(Exporter { provider, tracer })
    }

    /// Sends what is queued and stops the processor's thread; blocks until done.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "trace spans may have been lost at shutdown");
        }
    }
}

/// The resource: the configured attributes over `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`, over the default service name.
fn resource(config: &TraceConfig) -> Resource {
    let mut builder = Resource::builder();
    let named_by_env = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| {
            a.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    if !named_by_env {
        builder = builder.with_service_name(DEFAULT_SERVICE_NAME);
    }
    builder
        .with_attributes(
            config
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .build()
}
