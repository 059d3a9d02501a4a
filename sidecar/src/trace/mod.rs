//! Triton's trace extension, made of OpenTelemetry spans: the settings clients read and change,
//! which requests are sampled, their spans, and the OTLP exporter.
//!
//! A sampled inference is a tree of spans, named as Triton names its own so that the two read
//! alike side by side:
//!
//! - `InferRequest` (server): the request on the wire, with the front end's events
//!   (`HTTP_RECV_START` ... `HTTP_SEND_END`, or `GRPC_*`); under the caller's span when the
//!   request carries a W3C `traceparent`.
//!   - `<model>`: `REQUEST_START`, `QUEUE_START`, `REQUEST_END`; attributes `triton.model_name`,
//!     `triton.model_version` (and, at level TENSORS, each tensor's datatype and shape).
//!     - `compute`: `COMPUTE_START`, `COMPUTE_OUTPUT_START`, `COMPUTE_END`.
//!       - `staging copy`: the inputs written into the upstream's shared-memory slots.
//!       - `upstream` (client): the call to the model server, which gets this span's
//!         `traceparent`, so that its own spans (Triton's in `opentelemetry` mode) join the trace.
//!
//! In Triton's own mode (`triton`, with a `file`), the same events are written as Triton writes
//! them: each sampled request's timestamps (and, at level TENSORS, its tensors) as JSON objects
//! in the trace file (see `file` and `record`).
//!
//! When no level is on (the default), a request pays one relaxed atomic load.

mod export;
mod file;
mod otlp_client;
mod record;
pub mod settings;
pub mod span;
mod tensor_text;
mod update;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use infergate_config::{TraceConfig, TraceLevel, TraceMode};
use parking_lot::Mutex;

pub use export::DEFAULT_SERVICE_NAME;
pub use settings::View;
pub use span::{ContextHeaders, Kind, Scope, Side, Span};
pub use update::{Given, READ_ORDER, Update};

use crate::error::Result;
use crate::protocol::Protocol;
use export::Exporter;
use record::Record;
use settings::Settings;

/// The events of receiving a request and sending its answer, as Triton's front ends name them.
pub fn events(protocol: Protocol) -> [&'static str; 4] {
    match protocol {
        Protocol::Http => [
            "HTTP_RECV_START",
            "HTTP_RECV_END",
            "HTTP_SEND_START",
            "HTTP_SEND_END",
        ],
        Protocol::Grpc => [
            "GRPC_WAITREAD_START",
            "GRPC_WAITREAD_END",
            "GRPC_SEND_START",
            "GRPC_SEND_END",
        ],
    }
}

/// The process's tracing: settings (with the trace file in Triton's mode), and the exporter when
/// the mode is `opentelemetry`.
pub struct Tracing {
    settings: Mutex<Settings>,
    /// Some level is on somewhere (so traces have somewhere to go): the only thing an untraced
    /// request reads.
    enabled: AtomicBool,
    exporter: Option<Exporter>,
}

impl Tracing {
    /// Starts the exporter (in `opentelemetry` mode); its thread sends spans from then on.
    pub fn new(config: TraceConfig) -> std::result::Result<Tracing, String> {
        let exporter = match config.mode {
            TraceMode::OpenTelemetry => Some(Exporter::new(&config)?),
            TraceMode::Triton => None,
        };
        let tracing = Tracing {
            settings: Mutex::new(Settings::new(config)),
            enabled: AtomicBool::new(false),
            exporter,
        };
        tracing.refresh();
        Ok(tracing)
    }

    /// Tracing off, as Triton starts by default.
    pub fn off() -> Tracing {
        Tracing {
            settings: Mutex::new(Settings::new(TraceConfig::default())),
            enabled: AtomicBool::new(false),
            exporter: None,
        }
    }

    fn refresh(&self) {
        let settings = self.settings.lock();
        let on = self.exports_to(&settings) && settings.any_enabled();
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Whether traces have somewhere to go (`mode=opentelemetry`, or Triton's mode with a file);
    /// without, no level can be turned on, as in Triton's mode without a trace file.
    pub fn exports(&self) -> bool {
        self.exports_to(&self.settings.lock())
    }

    fn exports_to(&self, settings: &Settings) -> bool {
        self.exporter.is_some() || settings.file().is_some()
    }

    /// The settings of `model`, or the server's.
    pub fn view(&self, model: Option<&str>) -> View {
        self.settings.lock().view(model)
    }

    /// Changes the settings of `model` (or the server's); answers them as they are then.
    pub fn update(&self, model: Option<&str>, update: &Update, via: Protocol) -> Result<View> {
        let (view, retired) = {
            let mut settings = self.settings.lock();
            let retired = settings.update(model, update, via)?;
            (settings.view(model), retired)
        };
        self.refresh();
        // Trace files: what the replaced settings held is written now, outside the lock.
        drop(retired);
        Ok(view)
    }

    /// The root span of a request to `model`, when it is sampled. `served` tells whether the
    /// model (and version) is served: as in Triton, a request for one that is not is neither
    /// traced nor counted for `trace_rate`. `context` holds the caller's `traceparent` and
    /// `tracestate`, where it sent them.
    pub fn start(
        &self,
        model: &str,
        served: impl FnOnce() -> bool,
        context: impl FnOnce() -> HashMap<String, String>,
        protocol: Protocol,
        received: Instant,
    ) -> Option<Span> {
        if !self.enabled.load(Ordering::Relaxed) || !served() {
            return None;
        }
        let sampled = self.settings.lock().sample(model)?;
        let tensors = sampled.levels.contains(&TraceLevel::Tensors);
        let scope = match (&self.exporter, sampled.collector) {
            (Some(exporter), _) => Scope::root(exporter.tracer.clone(), &context(), tensors),
            (None, Some(collector)) => {
                Scope::file(Record::new(&sampled.levels, collector), tensors)
            }
            (None, None) => return None,
        };
        let mut root = scope.start("InferRequest", Kind::Server, received);
        root.event(events(protocol)[0], received);
        Some(root)
    }

    /// Sends the spans still queued, or writes the traces still held and closes the trace
    /// file; blocks until done or given up.
    pub fn shutdown(&self) {
        if let Some(exporter) = &self.exporter {
            exporter.shutdown();
        }
        let file = {
            let mut settings = self.settings.lock();
            settings.retire();
            settings.file().cloned()
        };
        if let Some(file) = file {
            file.close();
        }
    }
}

/// Ends a request's root span as its answer is handed to the front end to send, with the error
/// the request ended with, if any. The send's start and end are both that moment: Triton's mark
/// the answer handed to its HTTP library (or gRPC's queue) too; its time on the wire is not seen.
pub fn end_root(mut root: Span, protocol: Protocol, failure: Option<&crate::error::Error>) {
    let now = Instant::now();
    if let Some(e) = failure {
        root.fail(&e.message);
    }
    let [_, _, send_start, send_end] = events(protocol);
    root.event(send_start, now);
    root.event(send_end, now);
    root.end(now);
}

/// The trace-context headers of a request, from any header map.
pub fn context_of<'a>(get: impl Fn(&'static str) -> Option<&'a str>) -> HashMap<String, String> {
    [span::TRACEPARENT, span::TRACESTATE]
        .into_iter()
        .filter_map(|name| get(name).map(|v| (name.to_string(), v.to_string())))
        .collect()
}
