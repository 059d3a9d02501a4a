//! `ModelStreamInfer`: many requests on one bidirectional stream, processed concurrently,
//! answered in arrival order. A failed request is answered with `error_message` and the stream
//! stays open.

use std::pin::Pin;

use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt};
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::convert;
use crate::core::pipeline;
use crate::state::SharedState;

/// Requests of one stream allowed in flight at once.
const STREAM_WINDOW: usize = 64;

pub type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

pub fn serve(state: SharedState, mut inbound: Streaming<ModelInferRequest>) -> ResponseStream {
    let (tx, rx) = mpsc::channel(STREAM_WINDOW);
    tokio::spawn(async move {
        let mut pending = FuturesOrdered::new();
        let mut inbound_open = true;
        loop {
            tokio::select! {
                message = inbound.message(), if inbound_open && pending.len() < STREAM_WINDOW => match message {
                    Ok(Some(request)) => pending.push_back(answer(state.clone(), request)),
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
