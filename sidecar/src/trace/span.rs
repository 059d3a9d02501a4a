//! A traced request's spans: started and ended at the `Instant`s the request path already takes
//! (so a span costs nothing until the request is sampled), named and stamped as Triton names
//! its own, and carried to the upstream as a W3C `traceparent`; or, in Triton's own mode, the
//! same events written as the request's timestamps in its trace file.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

use super::record::Record;
use crate::tensor::Tensor;

pub use opentelemetry::trace::SpanKind as Kind;

/// The W3C trace-context headers (`traceparent`, `tracestate`).
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// Trace-context headers for a call to another server: name and value.
pub type ContextHeaders = [(&'static str, String)];

/// Wall-clock time for an `Instant`: spans carry wall-clock times, the request path measures
/// with the monotonic clock.
#[derive(Clone, Copy, Debug)]
struct Clock {
    instant: Instant,
    system: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    fn at(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.system + after,
            None => self.system - self.instant.duration_since(at),
        }
    }
}

/// Where new spans go: under a parent span, of one traced request. Cheap to clone.
#[derive(Clone)]
pub struct Scope {
    to: Destination,
    tensors: bool,
}

/// Where a traced request's spans end up.
#[derive(Clone)]
enum Destination {
    /// OpenTelemetry spans, under `parent`.
    Otel {
        tracer: SdkTracer,
        parent: Context,
        clock: Clock,
    },
    /// Triton's trace file: every span of the request adds to one record.
    File(Arc<Record>),
}

impl Scope {
    /// A request's root scope: under the caller's span when its headers carry one.
    pub(super) fn root(
        tracer: SdkTracer,
        headers: &HashMap<String, String>,
        tensors: bool,
    ) -> Scope {
        let parent = TraceContextPropagator::new().extract(headers);
        Scope {
            to: Destination::Otel {
                tracer,
                parent,
                clock: Clock::now(),
            },
            tensors,
        }
    }

    /// A request traced into Triton's trace file.
    pub(super) fn file(record: Record, tensors: bool) -> Scope {
        Scope {
            to: Destination::File(Arc::new(record)),
            tensors,
        }
    }

    /// Starts a span under this scope's parent, at `at`.
    pub fn start(&self, name: impl Into<Cow<'static, str>>, kind: SpanKind, at: Instant) -> Span {
        let Destination::Otel {
            tracer,
            parent,
            clock,
        } = &self.to
        else {
            // A trace file has no spans, only the request's timestamps.
            return Span {
                otel: None,
                scope: self.clone(),
            };
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(clock.at(at))
            .start_with_context(tracer, parent);
        let parent = Context::new().with_remote_span_context(span.span_context().clone());
        Span {
            otel: Some(span),
            scope: Scope {
                to: Destination::Otel {
                    tracer: tracer.clone(),
                    parent,
                    clock: *clock,
                },
                tensors: self.tensors,
            },
        }
    }

    /// Whether the level TENSORS is on: spans then describe the tensors too.
    pub fn tensors(&self) -> bool {
        self.tensors
    }

    /// Whether the tensors' data is traced (Triton's trace file at level TENSORS), not only their
    /// datatypes and shapes.
    pub fn tensor_data(&self) -> bool {
        self.tensors && matches!(self.to, Destination::File(_))
    }
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("Scope");
        match &self.to {
            Destination::Otel { parent, .. } => {
                let parent = parent.span().span_context().clone();
                out.field("trace_id", &parent.trace_id())
                    .field("parent_span_id", &parent.span_id());
            }
            Destination::File(record) => {
                out.field("trace_id", &record.id());
            }
        }
        out.field("tensors", &self.tensors).finish()
    }
}

/// One span, ended when `end` is called (or, failing that, when dropped). In Triton's trace
/// file a span is only its events, each a timestamp of the request.
pub struct Span {
    otel: Option<SdkSpan>,
    scope: Scope,
}

/// Which tensors of a request are described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Input,
    Output,
}

impl Span {
    fn record(&self) -> Option<&Record> {
        match &self.scope.to {
            Destination::File(record) => Some(record),
            Destination::Otel { .. } => None,
        }
    }

    /// Marks a moment of the span, with Triton's names (`REQUEST_START`, `COMPUTE_END`, ...).
    pub fn event(&mut self, name: &'static str, at: Instant) {
        if let Some(span) = &mut self.otel {
            let Destination::Otel { clock, .. } = &self.scope.to else {
                return;
            };
            span.add_event_with_timestamp(name, clock.at(at), Vec::new());
        } else if let Some(record) = self.record() {
            record.timestamp(name, at);
        }
    }

    /// The model a request is for (and the request's id), as Triton marks a model's span (an
    /// OpenTelemetry span's attributes; a trace file's header of the request).
    pub fn model(&mut self, name: &str, version: i64, request_id: &str) {
        if let Some(span) = &mut self.otel {
            span.set_attribute(KeyValue::new("triton.model_name", name.to_string()));
            span.set_attribute(KeyValue::new("triton.model_version", version));
            if !request_id.is_empty() {
                span.set_attribute(KeyValue::new("triton.request_id", request_id.to_string()));
            }
        } else if let Some(record) = self.record() {
            record.model(name, version, request_id);
        }
    }

    /// At level TENSORS, a request's inputs as the model received them or its outputs as the
    /// model produced them: an OpenTelemetry span gets each one's datatype and shape
    /// (`infergate.input.<name>` = `"FP32 [1, 16]"`), a trace file each one's data too, as
    /// Triton's `TENSOR_QUEUE_INPUT` and `TENSOR_BACKEND_OUTPUT` activities.
    pub fn tensors(&mut self, side: Side, tensors: &[Tensor]) {
        if !self.scope.tensors {
            return;
        }
        if let Some(span) = &mut self.otel {
            let side = match side {
                Side::Input => "input",
                Side::Output => "output",
            };
            for t in tensors {
                span.set_attribute(KeyValue::new(
                    format!("infergate.{side}.{}", t.name),
                    format!("{} {:?}", t.datatype, t.shape),
                ));
            }
        } else if let Some(record) = self.record() {
            let activity = match side {
                Side::Input => "TENSOR_QUEUE_INPUT",
                Side::Output => "TENSOR_BACKEND_OUTPUT",
            };
            for t in tensors {
                record.tensor(activity, t);
            }
        }
    }

    pub fn attribute(&mut self, attribute: KeyValue) {
        if let Some(span) = &mut self.otel {
            span.set_attribute(attribute);
        }
    }

    /// The request failed here.
    pub fn fail(&mut self, message: &str) {
        if let Some(span) = &mut self.otel {
            span.set_status(Status::error(message.to_string()));
        }
    }

    /// Where this span's children go.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The headers that make a callee's spans this span's children (none from a trace file,
    /// as Triton's own mode sends none).
    pub fn context_headers(&self) -> Vec<(&'static str, String)> {
        let Some(span) = &self.otel else {
            return Vec::new();
        };
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(
            &Context::new().with_remote_span_context(span.span_context().clone()),
            &mut headers,
        );
        [TRACEPARENT, TRACESTATE]
            .into_iter()
            .filter_map(|name| {
                headers
                    .remove(name)
                    .filter(|v| !v.is_empty())
                    .map(|v| (name, v))
            })
            .collect()
    }

    pub fn end(self, at: Instant) {
        if let (Some(mut span), Destination::Otel { clock, .. }) = (self.otel, &self.scope.to) {
            span.end_with_timestamp(clock.at(at));
        }
    }
}
