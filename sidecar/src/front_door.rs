//! The front door: the one way into inference, whatever the protocol. The REST and gRPC fronts
//! decode a request and encode its answer; everything between goes through here:
//!
//! 1. [`Target::resolve`]: the request's model, looked up once by name and version. HTTP does
//!    this before it reads the body, since Triton refuses a decoupled model without reading it
//!    ([`Target::refuse_decoupled_over_http`]); the answer to a model that is not there is given
//!    where the pipeline gave it, after the request is decoded, so the order of Triton's errors
//!    stays as it was.
//! 2. [`Call::begin`]: the request's root trace span, when it is sampled (a request for a model
//!    that is not served is neither traced nor counted, as in Triton), and at its end
//!    ([`Call::end`]) the span's last events and Triton's failed-inference log line.
//! 3. [`infer`] and [`infer_decoupled`]: the model handle, the canary's share (a client's call
//!    drawn for the canary is served by its pods, [`crate::canary`]), the sequence peers' routing
//!    (a sequence held by another replica is served there, [`crate::peers`]), then the pipeline.
//!
//! A model unloaded or replaced between the lookup and the request being in (an HTTP body still
//! arriving) is looked up again: Triton looks a request's model up only once its body is in, so
//! such a request gets what Triton would give it then (the new load, or "unknown model").
//! Authentication, and batching, plug in here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::canary::{Canary, Split, Variant};
use crate::core::model::Model;
use crate::core::pipeline;
pub use crate::core::pipeline::DecoupledResponse;
use crate::core::request::{InferRequest, InferResponse};
use crate::error::{Error, Result};
pub use crate::peers::Origin;
use crate::protocol::Protocol;
use crate::state::AppState;
use crate::trace;

/// A request's model, looked up once.
pub struct Target {
    model: Result<Arc<Model>>,
}

impl Target {
    pub fn resolve(state: &AppState, name: &str, version: &str) -> Target {
        Target {
            model: state.repository.get(name, version),
        }
    }

    /// Whether the model is served (loaded, at that version).
    pub fn is_served(&self) -> bool {
        self.model.is_ok()
    }

    /// Whether the model is decoupled (its answers are a stream of responses).
    pub fn is_decoupled(&self) -> bool {
        self.model.as_ref().is_ok_and(|m| m.is_decoupled())
    }

    /// Triton's HTTP front end serves no decoupled model, and says so before reading the body.
    pub fn refuse_decoupled_over_http(&self) -> Result<()> {
        if self.is_decoupled() {
            return Err(Error::unsupported(
                "HTTP end point doesn't support models with decoupled transaction policy",
            ));
        }
        Ok(())
    }

    /// The model, for a front that needs it to decode (a raw HTTP body's one input, generate's
    /// flat JSON); the lookup's error otherwise.
    pub fn model(&self) -> Result<&Arc<Model>> {
        self.model.as_ref().map_err(Clone::clone)
    }

    /// The model the request runs on, now that it is in (module docs).
    fn settle(self, state: &AppState, request: &InferRequest) -> Result<Arc<Model>> {
        match self.model {
            Ok(model) if !model.is_retired() => Ok(model),
            _ => state
                .repository
                .get(&request.model_name, &request.model_version),
        }
    }
}

/// One request through the door: its root span, when traced, and what its failure line needs.
pub struct Call {
    protocol: Protocol,
    root: Option<trace::Span>,
    /// The client's request id, kept only where a failure's line is written.
    id: String,
    /// Whether a failure is logged with Triton's `Infer failed` line (its infer calls; not the
    /// generate extension, which Triton does not log so).
    logs_failure: bool,
}

impl Call {
    /// Starts the request's root span at `received` if it is sampled; `context` gives the
    /// caller's trace context headers, read only then.
    pub fn begin(
        state: &AppState,
        target: &Target,
        model: &str,
        protocol: Protocol,
        received: Instant,
        context: impl FnOnce() -> HashMap<String, String>,
    ) -> Call {
        let root = state
            .tracing
            .start(model, || target.is_served(), context, protocol, received);
        Call {
            protocol,
            root,
            id: String::new(),
            logs_failure: true,
        }
    }

    /// The generate extension: traced, but its failures have no `Infer failed` line.
    pub fn without_failure_line(mut self) -> Call {
        self.logs_failure = false;
        self
    }

    /// Marks an event of the request on its root span (Triton's timestamps).
    pub fn event(&mut self, name: &'static str, at: Instant) {
        if let Some(root) = &mut self.root {
            root.event(name, at);
        }
    }

    /// Notes the request's id for the line of a failure, where that line is written.
    pub fn note_id(&mut self, id: &str) {
        if self.logs_failure && crate::log::line::infer_failures_logged() {
            self.id.clear();
            self.id.push_str(id);
        }
    }

    /// Ends the request: the root span's last events (with the failure, if any) and, for a
    /// failure, Triton's `[request id: …] Infer failed` line. Once; later calls do nothing.
    pub fn end(&mut self, failure: Option<&Error>) {
        if let Some(root) = self.root.take() {
            trace::end_root(root, self.protocol, failure);
        }
        if let Some(e) = failure
            && self.logs_failure
        {
            crate::log::line::log_infer_failure(&self.id, e);
            self.logs_failure = false;
        }
    }

    fn trace_scope(&self) -> Option<trace::Scope> {
        self.root.as_ref().map(|root| root.scope().clone())
    }
}

/// The caller's credential (`authorization`), where this sidecar checks identities, to be passed
/// on with a request forwarded to a peer, which checks it too; `None` elsewhere.
pub fn credential(state: &AppState, authorization: Option<&str>) -> Option<String> {
    state.identity.as_ref()?;
    authorization.map(str::to_string)
}

/// One inference: here, the canary's, or on the peer that holds its sequence.
pub async fn infer(
    state: &AppState,
    call: &Call,
    target: Target,
    mut request: InferRequest,
    origin: Origin,
) -> Result<InferResponse> {
    let _busy = state.traffic.begin();
    request.trace = call.trace_scope();
    let model = target.settle(state, &request)?;
    let ready = || state.health.is_ready();
    let canary = state.canary.as_deref().filter(|_| Canary::splits(&origin));
    let Some(canary) = canary else {
        return crate::peers::infer(model, state.peers.as_deref(), ready, request, origin).await;
    };
    let request = match canary.split(&model, request).await {
        Split::Served(answer) => return answer,
        Split::Here(request) => request,
    };
    let answer = crate::peers::infer(model, state.peers.as_deref(), ready, request, origin).await;
    canary.count(Variant::Stable, answer.is_ok());
    answer
}

/// One request to a decoupled model: its responses as the model produces them (see
/// `pipeline::infer_decoupled`). Decoupled requests are served here, never forwarded: their
/// answers are a stream.
pub async fn infer_decoupled(
    state: &AppState,
    call: &Call,
    target: Target,
    mut request: InferRequest,
) -> Result<mpsc::Receiver<Result<DecoupledResponse>>> {
    let _busy = state.traffic.begin();
    request.trace = call.trace_scope();
    let model = target.settle(state, &request)?;
    let ready = state.health.is_ready();
    crate::peers::check_decoupled(&model, state.peers.as_deref(), ready, &request)?;
    pipeline::infer_decoupled(model, request).await
}
