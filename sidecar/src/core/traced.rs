//! The spans of a traced request inside the pipeline, as Triton names them: one named after the
//! model (`REQUEST_START`, `QUEUE_START`, `REQUEST_END`) and, under it, `compute`
//! (`COMPUTE_START`, `COMPUTE_OUTPUT_START`, `COMPUTE_END`), whose scope the backend's own spans
//! (the upstream call, the staging copy) go under.

use std::time::Instant;

use opentelemetry::KeyValue;

use super::model::Model;
use crate::error::Error;
use crate::tensor::Tensor;
use crate::trace::{Kind, Scope, Span};

pub(super) struct ModelSpans {
    model: Span,
    compute: Span,
}

impl ModelSpans {
    /// Both spans, started when the request arrived and when the model started on it.
    pub fn start(
        scope: &Scope,
        model: &Model,
        inputs: &[Tensor],
        received: Instant,
        queued: Instant,
        compute_start: Instant,
    ) -> ModelSpans {
        let mut span = scope.start(model.name.clone(), Kind::Server, received);
        span.event("REQUEST_START", received);
        span.event("QUEUE_START", queued);
        span.attribute(KeyValue::new("triton.model_name", model.name.clone()));
        span.attribute(KeyValue::new("triton.model_version", model.version));
        if scope.tensors() {
            describe(&mut span, "input", inputs);
        }
        let mut compute = span.scope().start("compute", Kind::Internal, compute_start);
        compute.event("COMPUTE_START", compute_start);
        ModelSpans {
            model: span,
            compute,
        }
    }

    /// Where the backend's spans go.
    pub fn compute(&self) -> &Scope {
        self.compute.scope()
    }

    /// The model produced its outputs at `infer_end` (`None`: it failed), and the request ended
    /// now, with `failure` if it failed.
    pub fn finish(
        mut self,
        infer_end: Option<Instant>,
        outputs: &[Tensor],
        failure: Option<&Error>,
    ) {
        let done = Instant::now();
        if let Some(at) = infer_end {
            self.compute.event("COMPUTE_OUTPUT_START", at);
        }
        self.compute.event("COMPUTE_END", done);
        if let Some(e) = failure {
            self.compute.fail(&e.message);
            self.model.fail(&e.message);
        }
        if self.compute.scope().tensors() {
            describe(&mut self.model, "output", outputs);
        }
        self.compute.end(done);
        self.model.event("REQUEST_END", done);
        self.model.end(done);
    }
}

/// At level TENSORS: each tensor's datatype and shape (not its data), as
/// `infergate.<input|output>.<name>` = `"FP32 [1, 16]"`.
fn describe(span: &mut Span, side: &str, tensors: &[Tensor]) {
    for t in tensors {
        span.attribute(KeyValue::new(
            format!("infergate.{side}.{}", t.name),
            format!("{} {:?}", t.datatype, t.shape),
        ));
    }
}
