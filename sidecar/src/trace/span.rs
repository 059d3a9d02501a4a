//! A traced request's spans: started and ended at the `Instant`s the request path already takes
//! (so a span costs nothing until the request is sampled), named and stamped as Triton names
//! its own, and carried to the upstream as a W3C `traceparent`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

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
    tracer: SdkTracer,
    parent: Context,
    clock: Clock,
    tensors: bool,
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
            tracer,
            parent,
            clock: Clock::now(),
            tensors,
        }
    }

    /// Starts a span under this scope's parent, at `at`.
    pub fn start(&self, name: impl Into<Cow<'static, str>>, kind: SpanKind, at: Instant) -> Span {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(self.clock.at(at))
            .start_with_context(&self.tracer, &self.parent);
        let parent = Context::new().with_remote_span_context(span.span_context().clone());
        Span {
            span,
            scope: Scope {
                tracer: self.tracer.clone(),
                parent,
                clock: self.clock,
                tensors: self.tensors,
            },
        }
    }

    /// Whether the level TENSORS is on: spans then describe the tensors too.
    pub fn tensors(&self) -> bool {
        self.tensors
    }
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parent = self.parent.span().span_context().clone();
        f.debug_struct("Scope")
            .field("trace_id", &parent.trace_id())
            .field("parent_span_id", &parent.span_id())
            .field("tensors", &self.tensors)
            .finish()
    }
}

/// One span, ended when `end` is called (or, failing that, when dropped).
pub struct Span {
    span: SdkSpan,
    scope: Scope,
}

impl Span {
    /// Marks a moment of the span, with Triton's names (`REQUEST_START`, `COMPUTE_END`, ...).
    pub fn event(&mut self, name: &'static str, at: Instant) {
        self.span
            .add_event_with_timestamp(name, self.scope.clock.at(at), Vec::new());
    }

    pub fn attribute(&mut self, attribute: KeyValue) {
        self.span.set_attribute(attribute);
    }

    /// The request failed here.
    pub fn fail(&mut self, message: &str) {
        self.span.set_status(Status::error(message.to_string()));
    }

    /// Where this span's children go.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The headers that make a callee's spans this span's children.
    pub fn context_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(
            &Context::new().with_remote_span_context(self.span.span_context().clone()),
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

    pub fn end(mut self, at: Instant) {
        self.span.end_with_timestamp(self.scope.clock.at(at));
    }
}
