//! One inference, start to finish: find the model, validate, execute, select the requested
//! outputs, and count it all in the model's statistics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_proto::DataType;
use tokio::sync::mpsc;

use super::batcher::{Batcher, Failed, Job, Runner, Traced};
use super::classify::classify;
use super::model::{Execution, Model};
use super::params::Parameters;
use super::request::{InferRequest, InferResponse, RequestedOutput};
use super::run_batch::ModelRunner;
use super::schedule::{Permit, Place, Refused};
use super::sequence::{Admission, SequenceParams};
use super::stats::Timings;
use super::traced::{self, ModelSpans};
use super::validate::{Validated, validate};
use crate::error::{Error, Result, request_prefix};
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;

/// A request found, validated and admitted: what its execution needs, and what it keeps alive
/// until it ends (the sequence slot).
struct Prepared {
    model: Arc<Model>,
    id: String,
    parameters: Parameters,
    validated: Validated,
    output_names: Vec<String>,
    output_shm: Vec<Option<ShmTarget>>,
    /// Per output, the classification its model server does (see `delegate_classification`).
    output_classification: Vec<u32>,
    _admission: Option<Admission>,
    /// One of the model's instances, for a model with a queue.
    _instance: Option<Permit>,
    /// Where the request waits in its model's batcher, and the parameters its batch sends the
    /// model (the scheduling controls taken out), for a model with a batcher.
    batching: Option<(Place, Parameters)>,
    /// The clients' regions the inputs were read from: in use until the request ends, as in
    /// Triton (unregistering one meanwhile waits for it).
    _input_regions_read: Vec<ShmTarget>,
    received: Instant,
    queued: Instant,
    /// How long it waited for its sequence's turn and a slot, or in the model's queue.
    waited: Duration,
    trace: Option<crate::trace::Scope>,
}

impl Prepared {
    fn execution<'a>(&'a self, trace: Option<&'a crate::trace::Scope>) -> Execution<'a> {
        Execution {
            model: &self.model,
            inputs: &self.validated.inputs,
            input_regions: &self.validated.input_regions,
            outputs: &self.output_names,
            batch_size: self.validated.batch_size,
            parameters: &self.parameters,
            output_shm: &self.output_shm,
            classification: &self.output_classification,
            trace,
        }
    }

    /// The model's spans, when the request is traced, from now (the model starting on it).
    fn spans(&self, compute_start: Instant) -> Option<ModelSpans> {
        let scope = self.trace.as_ref()?;
        let request = traced::Request {
            id: &self.id,
            inputs: &self.validated.inputs,
            input_regions: &self.validated.input_regions,
        };
        Some(ModelSpans::start(
            scope,
            &self.model.name,
            self.model.version,
            request,
            self.received,
            self.queued,
            compute_start,
        ))
    }

    /// One response of a decoupled request.
    fn response(&self, outputs: Vec<Tensor>) -> InferResponse {
        self.answer(self.id.clone(), self.validated.outputs.clone(), outputs)
    }

    /// The one response of a request (its id and requested outputs moved, not copied).
    fn into_response(mut self, outputs: Vec<Tensor>) -> InferResponse {
        let id = std::mem::take(&mut self.id);
        let requested = std::mem::take(&mut self.validated.outputs);
        self.answer(id, requested, outputs)
    }

    fn answer(
        &self,
        id: String,
        requested: Vec<RequestedOutput>,
        outputs: Vec<Tensor>,
    ) -> InferResponse {
        InferResponse {
            model_name: self.model.name.clone(),
            model_version: self.model.version_string(),
            id,
            parameters: Parameters::default(),
            outputs,
            requested,
        }
    }

    /// Counts the request a success: `compute_start` when the model started, `infer_end` when
    /// it had produced everything, now when the answer was ready; and, when it ran alone
    /// (`own_execution`), the model's execution too.
    fn succeed(&self, compute_start: Instant, infer_end: Instant, own_execution: bool) {
        let done = Instant::now();
        let timings = Timings {
            total: done - self.received,
            queue: self.queued - self.received + self.waited,
            compute_input: (compute_start - self.queued).saturating_sub(self.waited),
            compute_infer: infer_end - compute_start,
            compute_output: done - infer_end,
        };
        if own_execution {
            self.model
                .stats
                .record_success(self.validated.batch_size, timings);
        } else {
            self.model
                .stats
                .record_request(self.validated.batch_size, timings);
        }
    }

    fn fail(&self, rejected: bool) {
        self.model
            .stats
            .record_failure(self.received.elapsed(), rejected);
    }
}

/// One request to `model` (found by the front door), start to finish.
pub async fn infer(model: Arc<Model>, request: InferRequest) -> Result<InferResponse> {
    let received = Instant::now();
    if model.is_decoupled() {
        return Err(Error::unsupported(DECOUPLED_UNARY));
    }
    let _pending = model.stats.enter();
    let prepared = prepare(model.clone(), request, received).await?;
    if let Some(batcher) = model.batcher.clone() {
        return infer_batched(model.clone(), &batcher, prepared).await;
    }
    let compute_start = Instant::now();
    let spans = prepared.spans(compute_start);
    let execution = prepared.execution(spans.as_ref().map(ModelSpans::compute));
    let produced = match model.backend.execute(execution).await {
        Ok(p) => p,
        Err(e) => {
            prepared.fail(false);
            if let Some(spans) = spans {
                spans.finish(None, &[], Some(&e));
            }
            return Err(e.from_model());
        }
    };
    let infer_end = Instant::now();
    answer(
        &model,
        prepared,
        produced,
        compute_start,
        infer_end,
        spans,
        true,
    )
}

/// A request to a model with a dynamic batcher: it waits in the batcher's queue, runs in a batch
/// (alone or joined with others), and is answered from its share of the batch's outputs.
async fn infer_batched(
    model: Arc<Model>,
    batcher: &Arc<Batcher>,
    mut prepared: Prepared,
) -> Result<InferResponse> {
    let Some((place, parameters)) = prepared.batching.take() else {
        return Err(Error::internal(
            "a request to a batching model was not placed",
        ));
    };
    let traced = prepared.trace.clone().map(|scope| Traced {
        scope,
        id: prepared.id.clone(),
        received: prepared.received,
        queued: prepared.queued,
    });
    let job = Job {
        inputs: prepared.validated.inputs.clone(),
        input_regions: prepared.validated.input_regions.clone(),
        outputs: prepared.output_names.clone(),
        output_shm: prepared.output_shm.clone(),
        classification: prepared.output_classification.clone(),
        batch_size: prepared.validated.batch_size,
        parameters,
        traced,
    };
    let runner: Arc<dyn Runner> = Arc::new(ModelRunner(model.clone()));
    let submitted = Instant::now();
    let answer_rx = batcher
        .submit(&runner, place, job, &request_prefix(&prepared.id))
        // Refused before it was queued: Triton counts it nowhere.
        .map_err(Error::from)?;
    let ran = match answer_rx.await {
        Ok(Ok(ran)) => ran,
        Ok(Err(Failed::Refused(refused))) => {
            prepared.fail(true);
            return Err(refused.into());
        }
        Ok(Err(Failed::Model {
            error,
            infer_end,
            spans,
        })) => {
            prepared.fail(false);
            if let Some(spans) = spans {
                spans.finish(infer_end, &[], Some(&error));
            }
            return Err(error.from_model());
        }
        Err(_) => {
            prepared.fail(false);
            return Err(Refused::Lost.into());
        }
    };
    prepared.waited = ran.compute_start.saturating_duration_since(submitted);
    answer(
        &model,
        prepared,
        ran.outputs,
        ran.compute_start,
        ran.infer_end,
        ran.spans,
        false,
    )
}

/// The answer of a request whose model produced `produced`: the requested outputs selected,
/// classified and written where asked, the request counted (with its execution, when it ran
/// alone, `own_execution`: a batcher counts its executions itself) and its spans ended.
fn answer(
    model: &Model,
    prepared: Prepared,
    produced: Vec<Tensor>,
    compute_start: Instant,
    infer_end: Instant,
    spans: Option<ModelSpans>,
    own_execution: bool,
) -> Result<InferResponse> {
    let outputs = match select_outputs(model, &prepared.validated.outputs, produced, Missing::Fail)
    {
        Ok(outputs) => outputs,
        Err((e, rejected)) => {
            prepared.fail(rejected);
            if let Some(spans) = spans {
                spans.finish(Some(infer_end), &[], Some(&e));
            }
            return Err(e.from_model());
        }
    };
    prepared.succeed(compute_start, infer_end, own_execution);
    if let Some(spans) = spans {
        spans.finish(Some(infer_end), &outputs, None);
    }
    Ok(prepared.into_response(outputs))
}

/// What unary calls (and HTTP, with its own words) answer for a decoupled model, as Triton does.
pub const DECOUPLED_UNARY: &str =
    "ModelInfer RPC doesn't support models with decoupled transaction policy";

/// One response of a decoupled request, and whether the model marked it the last.
pub struct DecoupledResponse {
    pub response: InferResponse,
    pub last: bool,
}

/// A request to a decoupled model: zero or more responses, sent into the returned channel as the
/// model produces them; the channel closes when the request is complete. An error before the
/// model runs (unknown model, validation, sequence admission) is returned instead; one while it
/// runs arrives as the channel's last item. Dropping the receiver (the client went away) stops
/// the request: the backend is told, and nothing more is read or written for it.
pub async fn infer_decoupled(
    model: Arc<Model>,
    request: InferRequest,
) -> Result<mpsc::Receiver<Result<DecoupledResponse>>> {
    let received = Instant::now();
    let prepared = prepare(model.clone(), request, received).await?;
    let (sender, receiver) = mpsc::channel(DECOUPLED_BUFFER);
    tokio::spawn(async move {
        let _pending = model.stats.enter();
        let compute_start = Instant::now();
        let spans = prepared.spans(compute_start);
        let (produced_tx, mut produced_rx) = mpsc::channel(DECOUPLED_BUFFER);
        let execute = model.backend.execute_decoupled(
            prepared.execution(spans.as_ref().map(ModelSpans::compute)),
            produced_tx,
        );
        let forward = async {
            // An error is the request's last answer; after it, and once the client has gone,
            // the receiver is dropped, which tells the backend to stop.
            let mut failed = None;
            loop {
                let produced = tokio::select! {
                    produced = produced_rx.recv() => produced,
                    () = sender.closed() => None,
                };
                let Some(produced) = produced else { break };
                let outputs = &prepared.validated.outputs;
                let answer = match select_outputs(&model, outputs, produced.tensors, Missing::Skip)
                {
                    Ok(outputs) => Ok(DecoupledResponse {
                        response: prepared.response(outputs),
                        last: produced.last,
                    }),
                    Err((e, rejected)) => {
                        failed = Some(rejected);
                        Err(e.from_model())
                    }
                };
                if sender.send(answer).await.is_err() || failed.is_some() {
                    break;
                }
            }
            drop(produced_rx);
            (failed, sender)
        };
        let (executed, (failed, sender)) = tokio::join!(execute, forward);
        let infer_end = Instant::now();
        match (executed, failed) {
            (_, Some(rejected)) => {
                prepared.fail(rejected);
                if let Some(spans) = spans {
                    let e = Error::internal("a response of the model could not be sent");
                    spans.finish(Some(infer_end), &[], Some(&e));
                }
            }
            (Err(e), None) => {
                prepared.fail(false);
                if let Some(spans) = spans {
                    spans.finish(None, &[], Some(&e));
                }
                let _ = sender.send(Err(e.from_model())).await;
            }
            (Ok(()), None) => {
                prepared.succeed(compute_start, infer_end, true);
                if let Some(spans) = spans {
                    spans.finish(Some(infer_end), &[], None);
                }
            }
        }
    });
    Ok(receiver)
}

/// The parameters that are scheduling controls (the schedule policy's `priority` and `timeout`).
const SCHEDULING_CONTROLS: [&str; 2] = ["priority", "timeout"];

/// Responses of one decoupled request buffered between the model and the client's stream.
const DECOUPLED_BUFFER: usize = 16;

/// Validates a request for `model` and admits it to its sequence, if the model has one.
async fn prepare(model: Arc<Model>, request: InferRequest, received: Instant) -> Result<Prepared> {
    let queued = Instant::now();
    let id = request.id.clone();
    let trace = request.trace.clone();
    let parameters = request.parameters.clone();
    // Where the request waits in its model's queue, if the model has one.
    let place = model
        .queue
        .as_ref()
        .map(|queue| (queue.clone(), queue.place(request.schedule_parameters())));
    let batching = model.batcher.as_ref().map(|batcher| {
        let place = batcher.place(request.schedule_parameters());
        // The batcher applies the scheduling controls; requests that differ only in them may
        // share a batch, which sends the model one set of parameters.
        let mut sent = request.parameters.clone();
        if request.schedule_parameters().is_some() {
            sent.0
                .retain(|(key, _)| !SCHEDULING_CONTROLS.contains(&key.as_str()));
        }
        (place, sent)
    });
    let rejected = |e: Error| {
        model.stats.record_failure(received.elapsed(), true);
        e
    };
    let sequence = match (&model.sequencer, request.sequence_parameters()) {
        (Some(_), Some(params)) => Some(SequenceParams::from_parameters(params).map_err(rejected)?),
        (Some(_), None) => Some(SequenceParams::default()),
        (None, _) => None,
    };

    // Inputs in clients' regions are read here, unless the backend can pass the regions on.
    let mut request = request;
    let input_regions_read = request
        .inputs
        .iter()
        .filter_map(|i| i.shm.clone())
        .collect();
    if !model.backend.takes_client_regions() {
        for input in &mut request.inputs {
            input.read_region().map_err(rejected)?;
        }
    }
    let mut validated = validate(&model, request).map_err(rejected)?;
    let waiting = Instant::now();
    // Sequence models: wait for this sequence's turn and a slot; add the control tensors.
    let admission = match (&model.sequencer, &sequence) {
        (Some(scheduler), Some(params)) => {
            let prefix = request_prefix(&id);
            let admission = scheduler
                .admit(
                    params,
                    validated.batch_size,
                    model.max_batch_size > 0,
                    &prefix,
                )
                .await
                .map_err(rejected)?;
            validated.inputs.extend(admission.controls.iter().cloned());
            Some(admission)
        }
        _ => None,
    };
    // Models with a queue: wait for an instance, under the request's priority and timeout.
    let instance = match place {
        Some((queue, place)) => match queue.admit(place, &request_prefix(&id)).await {
            Ok(permit) => Some(permit),
            // Refused before it was queued: Triton counts it nowhere.
            Err(refused @ Refused::QueueFull(_)) => return Err(refused.into()),
            Err(refused) => return Err(rejected(refused.into())),
        },
        None => None,
    };
    let waited = waiting.elapsed();
    let output_names = validated.outputs.iter().map(|o| o.name.clone()).collect();
    let output_shm = validated.outputs.iter().map(|o| o.shm.clone()).collect();
    let output_classification = delegate_classification(&model, &mut validated.outputs);
    Ok(Prepared {
        trace,
        model,
        id,
        parameters,
        validated,
        output_names,
        output_shm,
        output_classification,
        _admission: admission,
        _instance: instance,
        batching,
        _input_regions_read: input_regions_read,
        received,
        queued,
        waited,
    })
}

/// The classification each requested output asks of the model server, taken out of `outputs`
/// (which the pipeline then passes through as produced): where the backend's server classifies
/// itself and the sidecar has no labels of its own for the output. The server knows its labels
/// (`label_filename` in its configuration) and the sidecar does not, so classifying here would
/// drop them. Labels configured for the sidecar (`backend.models[].labels`) keep it here, and so
/// does a BYTES output, which has no classes: the sidecar refuses it with Triton's words, where
/// Triton 2.51 itself dies on it.
fn delegate_classification(model: &Model, outputs: &mut [RequestedOutput]) -> Vec<u32> {
    let delegate = model.backend.classifies();
    outputs
        .iter_mut()
        .map(|output| {
            let numeric = model
                .output(&output.name)
                .is_some_and(|spec| spec.datatype != DataType::Bytes);
            if delegate
                && numeric
                && output.classification > 0
                && !model.labels.contains_key(&output.name)
            {
                std::mem::take(&mut output.classification)
            } else {
                0
            }
        })
        .collect()
}

/// What a requested output the model did not produce means.
#[derive(Clone, Copy, PartialEq)]
enum Missing {
    /// An error: a request's one response must hold every output asked for.
    Fail,
    /// Nothing: each response of a decoupled model carries what it carries.
    Skip,
}

/// The requested outputs, in the requested order: classified where asked, written into the
/// client's region where one was named. An error says whether the request was at fault.
fn select_outputs(
    model: &Model,
    wanted: &[RequestedOutput],
    produced: Vec<Tensor>,
    missing: Missing,
) -> Result<Vec<Tensor>, (Error, bool)> {
    let mut produced: Vec<Option<_>> = produced.into_iter().map(Some).collect();
    let mut outputs = Vec::with_capacity(wanted.len());
    for wanted in wanted {
        let found = produced
            .iter_mut()
            .find(|t| t.as_ref().is_some_and(|t| t.name == wanted.name))
            .and_then(Option::take);
        match found {
            Some(tensor) if wanted.classification > 0 => {
                let labels = model.labels.get(&wanted.name).map(Vec::as_slice);
                let classes = classify(
                    &tensor,
                    wanted.classification,
                    model.max_batch_size > 0,
                    labels,
                )
                .map_err(|e| (e, true))?;
                outputs.push(classes);
            }
            Some(tensor) => {
                // An output without bytes was written into the region by the backend (or is empty).
                if let Some(target) = &wanted.shm
                    && !tensor.data.is_empty()
                {
                    target
                        .write(&tensor.name, &tensor.data)
                        .map_err(|e| (e, false))?;
                }
                outputs.push(tensor);
            }
            None if missing == Missing::Skip => {}
            None => {
                return Err((
                    Error::internal(format!(
                        "model '{}' did not produce output '{}'",
                        model.name, wanted.name
                    )),
                    false,
                ));
            }
        }
    }
    Ok(outputs)
}
