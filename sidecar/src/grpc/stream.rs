//! `ModelStreamInfer`: many requests on one bidirectional stream, processed concurrently,
//! answered in arrival order. A failed request is answered with `error_message` and the stream
//! stays open.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt};
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::convert;
use crate::core::pipeline;
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

pub fn serve(state: SharedState, mut inbound: Streaming<ModelInferRequest>) -> ResponseStream {
    let (tx, rx) = mpsc::channel(STREAM_WINDOW);
    tokio::spawn(async move {
        let mut order = SequenceOrder::default();
        let mut pending = FuturesOrdered::new();
        let mut inbound_open = true;
        loop {
            tokio::select! {
                message = inbound.message(), if inbound_open && pending.len() < STREAM_WINDOW => match message {
                    Ok(Some(request)) => {
                        let turn = order.enter(&request);
                        let state = state.clone();
                        pending.push_back(async move {
                            let _turn = match turn {
                                Some((previous, turn)) => {
                                    if let Some(previous) = previous {
                                        let _ = previous.await;
                                    }
                                    Some(turn)
                                }
                                None => None,
                            };
                            answer(state, request).await
                        });
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
                else => break,
            }
            if !inbound_open && pending.is_empty() {
                break;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

async fn answer(state: SharedState, request: ModelInferRequest) -> ModelStreamInferResponse {
    let id = request.id.clone();
    if state.health.is_shutting_down() {
        return error(
            id,
            "GRPC server is shutting down and has stopped accepting new requests.".into(),
        );
    }
    let result = match convert::request(request, &state.shm) {
        Ok(req) => pipeline::infer(&state.repository, req).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(response) => {
            let mut message = convert::response(response);
            message.parameters.insert(
                "triton_final_response".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(true)),
                },
            );
            ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(message),
            }
        }
        Err(e) => error(id, e.message),
    }
}

fn error(id: String, message: String) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: message,
        infer_response: Some(ModelInferResponse {
            id,
            ..Default::default()
        }),
    }
}
