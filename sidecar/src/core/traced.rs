//! The spans of a traced request inside the pipeline, as Triton names them: one named after the
//! model (`REQUEST_START`, `QUEUE_START`, `REQUEST_END`) and, under it, `compute`
//! (`COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`, `COMPUTE_END`), whose scope the
//! backend's own spans (the upstream call, the staging copy) go under.
//!
//! The model is handed its inputs as it starts, so `COMPUTE_INPUT_END` is `COMPUTE_START`'s
//! moment: the time Triton's backends spend taking their inputs is, here, inside the model's
//! work (for a model server behind the sidecar, in its own trace).

use std::borrow::Cow;
use std::time::Instant;

use crate::error::Error;
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;
use crate::trace::{Kind, Scope, Side, Span};

pub(super) struct ModelSpans {
    model: Span,
    compute: Span,
}

impl ModelSpans {
    /// Both spans, started when the request arrived and when the model started on it.
    pub fn start(
        scope: &Scope,
        model: &str,
        version: i64,
        request: Request<'_>,
        received: Instant,
        queued: Instant,
        compute_start: Instant,
    ) -> ModelSpans {
        let mut span = scope.start(model.to_string(), Kind::Server, received);
        span.model(model, version, request.id);
        span.event("REQUEST_START", received);
        span.event("QUEUE_START", queued);
        if scope.tensor_data() {
            span.tensors(
                Side::Input,
                &with_data(request.inputs, request.input_regions),
            );
        } else {
            span.tensors(Side::Input, request.inputs);
        }
        let mut compute = span.scope().start("compute", Kind::Internal, compute_start);
        compute.event("COMPUTE_START", compute_start);
        compute.event("COMPUTE_INPUT_END", compute_start);
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
        self.model.tensors(Side::Output, outputs);
        self.compute.end(done);
        self.model.event("REQUEST_END", done);
        self.model.end(done);
    }
}

/// What the model's spans read of a request.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub id: &'a str,
    pub inputs: &'a [Tensor],
    /// Per input, the client's shared-memory region that still holds it.
    pub input_regions: &'a [Option<ShmTarget>],
}

/// The inputs with their data, read from the client's shared memory for those still there (an
/// input that cannot be read is traced without data).
fn with_data<'a>(inputs: &'a [Tensor], regions: &[Option<ShmTarget>]) -> Cow<'a, [Tensor]> {
    if regions.iter().all(Option::is_none) {
        return Cow::Borrowed(inputs);
    }
    let read = inputs.iter().enumerate().map(|(i, t)| {
        let mut t = t.clone();
        if let Some(Some(target)) = regions.get(i) {
            t.data = target.read().unwrap_or_default();
        }
        t
    });
    Cow::Owned(read.collect())
}
