//! `ModelStreamInfer`: many requests on one bidirectional stream, processed concurrently,
//! answered in arrival order; a decoupled model's responses are written as it produces them. A
//! failed request is answered with `error_message` and the stream stays open.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{Stream, StreamExt};
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::convert;
use crate::caller::Caller;
use crate::front_door::{self, Call, Origin, Target};
use crate::protocol::Protocol;
use crate::state::SharedState;

/// Requests of one stream allowed in flight at once.
const STREAM_WINDOW: usize = 64;

pub type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

/// Keeps the requests of one sequence in arrival order on a stream: each waits for the one
/// before it, while requests of other sequences (and without one) run concurrently.
#[derive(Default)]
struct SequenceOrder {
    last: HashMap<String, (oneshot::Receiver<()>, Arc<AtomicBool>)>,
}

/// Signals the next request of the sequence when dropped, on every path.
struct Turn {
    _done: oneshot::Sender<()>,
    finished: Arc<AtomicBool>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.finished.store(true, Ordering::Release);
    }
}

impl SequenceOrder {
    /// What a request must wait for, and the turn it hands on; `None` outside a sequence.
    fn enter(
        &mut self,
        request: &ModelInferRequest,
    ) -> Option<(Option<oneshot::Receiver<()>>, Turn)> {
        let key = match request
            .parameters
            .get("sequence_id")?
            .parameter_choice
            .as_ref()?
        {
            ParameterChoice::Int64Param(0) => return None,
            ParameterChoice::Int64Param(n) => format!("{}#{n}", request.model_name),
            ParameterChoice::StringParam(s) if s.is_empty() => return None,
            ParameterChoice::StringParam(s) => format!("{}'{s}", request.model_name),
            _ => return None,
        };
        if self.last.len() > 1024 {
            self.last
                .retain(|_, (_, finished)| !finished.load(Ordering::Acquire));
        }
        let (tx, rx) = oneshot::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let previous = self
            .last
            .insert(key, (rx, finished.clone()))
            .map(|(rx, _)| rx);
        Some((
            previous,
            Turn {
                _done: tx,
                finished,
            },
        ))
    }
}

/// What every request of a stream takes from the stream's opening.
pub struct Opening {
    /// The stream's trace context (its `traceparent`), which each of its traced requests' spans
    /// go under.
    pub context: HashMap<String, String>,
    /// The caller's credential, passed on with a request forwarded to a peer
    /// ([`front_door::credential`]).
    pub credential: Option<String>,
}

/// Serves one stream.
pub fn serve(
    state: SharedState,
    caller: Option<Caller>,
    mut inbound: Streaming<ModelInferRequest>,
    context: Arc<Opening>,
) -> ResponseStream {
    let (tx, rx) = mpsc::channel(STREAM_WINDOW);
    // An open stream is traffic, requests or not: the service is not idle while it lasts.
    let busy = state.traffic.begin();
    tokio::spawn(async move {
        let _busy = busy;
        let mut order = SequenceOrder::default();
        let mut pending = FuturesOrdered::new();
        // Requests to decoupled models, each writing its own responses.
        let mut decoupled: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        let mut inbound_open = true;
        loop {
            let in_flight = pending.len() + decoupled.len();
            tokio::select! {
                message = inbound.message(), if inbound_open && in_flight < STREAM_WINDOW => match message {
                    Ok(Some(request)) => {
                        let target =
                            Target::resolve(&state, &request.model_name, &request.model_version);
                        let turn = order.enter(&request);
                        let (state, context) = (state.clone(), context.clone());
                        if target.is_decoupled() {
                            // Its sequence's next request waits until all of its responses are
                            // out.
                            let tx = tx.clone();
                            decoupled.push(Box::pin(async move {
                                let _turn = wait_turn(turn).await;
                                answer_decoupled(state, caller, target, request, tx, &context)
                                    .await;
                            }));
                        } else {
                            pending.push_back(async move {
                                let _turn = wait_turn(turn).await;
                                answer(state, caller, target, request, &context).await
                            });
                        }
                    }
                    Ok(None) => inbound_open = false,
                    Err(status) => {
                        tracing::debug!(%status, "stream closed by the client");
                        inbound_open = false;
                    }
                },
                Some(response) = pending.next(), if !pending.is_empty() => {
                    if tx.send(Ok(response)).await.is_err() {
                        break; // the client went away
                    }
                }
                Some(()) = decoupled.next(), if !decoupled.is_empty() => {}
                else => break,
            }
            if !inbound_open && pending.is_empty() && decoupled.is_empty() {
                break;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// Begins a stream request's call through the front door (its root span, when it is traced).
fn begin(
    state: &SharedState,
    target: &Target,
    request: &ModelInferRequest,
    context: &Opening,
) -> Call {
    let received = Instant::now();
    let mut call = Call::begin(
        state,
        target,
        &request.model_name,
        Protocol::Grpc,
        received,
        || context.context.clone(),
    );
    call.note_id(&request.id);
    call.event("GRPC_WAITREAD_END", received);
    call
}

async fn answer(
    state: SharedState,
    caller: Option<Caller>,
    target: Target,
    request: ModelInferRequest,
    context: &Opening,
) -> ModelStreamInferResponse {
    let id = request.id.clone();
    let model = (request.model_name.clone(), request.model_version.clone());
    if state.health.is_shutting_down() {
        return error(
            id,
            "GRPC server is shutting down and has stopped accepting new requests.".into(),
        );
    }
    let mut call = begin(&state, &target, &request, context);
    let result = match convert::request(request, state.shm_for(caller)) {
        Ok(mut req) => {
            req.credential = context.credential.clone();
            front_door::infer(&state, &call, target, req, Origin::Client).await
        }
        Err(e) => Err(e),
    };
    call.end(result.as_ref().err());
    match result {
        Ok(response) => {
            let mut message = convert::response(response);
            message
                .parameters
                .insert(FINAL_RESPONSE.to_string(), final_flag(true));
            ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(message),
            }
        }
        Err(e) if e.from_model => model_error(id, model, e.message),
        Err(e) => error(id, e.message),
    }
}

/// Waits for the request before it in its sequence, if any; the turn to hold while it runs.
async fn wait_turn(turn: Option<(Option<oneshot::Receiver<()>>, Turn)>) -> Option<Turn> {
    let (previous, turn) = turn?;
    if let Some(previous) = previous {
        let _ = previous.await;
    }
    Some(turn)
}

/// A request to a decoupled model: each response as the model produces it, marked final only if
/// the model marked it so; when the model ends the request without data and the client asked
/// for it (`triton_enable_empty_final_response`), an empty final response (as Triton 2.51's,
/// without a model version). A failure is the request's last response. When the client goes
/// away, the request is dropped, which stops it.
async fn answer_decoupled(
    state: SharedState,
    caller: Option<Caller>,
    target: Target,
    request: ModelInferRequest,
    tx: mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
    context: &Opening,
) {
    let id = request.id.clone();
    let model_name = request.model_name.clone();
    let model_version = request.model_version.clone();
    let empty_final =
        convert::bool_parameter(&request.parameters, "triton_enable_empty_final_response");
    if state.health.is_shutting_down() {
        let message = "GRPC server is shutting down and has stopped accepting new requests.";
        let _ = tx.send(Ok(error(id, message.into()))).await;
        return;
    }
    // Dropped on the early returns (the client gone), which ends its span there.
    let mut call = begin(&state, &target, &request, context);
    let started = match convert::request(request, state.shm_for(caller)) {
        Ok(req) => front_door::infer_decoupled(&state, &call, target, req).await,
        Err(e) => Err(e),
    };
    let mut responses = match started {
        Ok(responses) => responses,
        Err(e) => {
            call.end(Some(&e));
            let _ = tx.send(Ok(error(id, e.message))).await;
            return;
        }
    };
    let mut ended_with_data = false;
    loop {
        let next = tokio::select! {
            next = responses.recv() => next,
            () = tx.closed() => return, // the client went away
        };
        let Some(response) = next else { break };
        let message = match response {
            Ok(decoupled) => {
                ended_with_data = decoupled.last;
                let mut message = convert::response(decoupled.response);
                message
                    .parameters
                    .insert(FINAL_RESPONSE.to_string(), final_flag(decoupled.last));
                ModelStreamInferResponse {
                    error_message: String::new(),
                    infer_response: Some(message),
                }
            }
            Err(e) => {
                call.end(Some(&e));
                let message = model_error(id.clone(), (model_name, model_version), e.message);
                // The pipeline sends nothing after an error.
                let _ = tx.send(Ok(message)).await;
                return;
            }
        };
        if tx.send(Ok(message)).await.is_err() {
            return; // the client went away: dropping the request stops it
        }
    }
    call.end(None);
    if empty_final && !ended_with_data {
        let mut last = ModelInferResponse {
            id,
            model_name,
            ..Default::default()
        };
        last.parameters
            .insert(FINAL_RESPONSE.to_string(), final_flag(true));
        let _ = tx
            .send(Ok(ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(last),
            }))
            .await;
    }
}

/// The response parameter that says whether a stream response is its request's last.
const FINAL_RESPONSE: &str = "triton_final_response";

fn final_flag(last: bool) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::BoolParam(last)),
    }
}

/// An error the model raised while the request ran: Triton answers it as the request's final
/// response, naming the model (and the version the request asked for).
fn model_error(
    id: String,
    (model_name, model_version): (String, String),
    message: String,
) -> ModelStreamInferResponse {
    let mut parameters = HashMap::new();
    parameters.insert(FINAL_RESPONSE.to_string(), final_flag(true));
    ModelStreamInferResponse {
        error_message: message,
        infer_response: Some(ModelInferResponse {
            id,
            model_name,
            model_version,
            parameters,
            ..Default::default()
        }),
    }
}

/// A request refused before it ran: the error alone, with the request's id.
fn error(id: String, message: String) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: message,
        infer_response: Some(ModelInferResponse {
            id,
            ..Default::default()
        }),
    }
}
