//! One upstream model as a backend: the request built from an execution (tensors in the staging
//! pool or the client's regions, or on the socket), the call, the answer's outputs read back, and
//! decoupled models' streams; with their trace spans.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use infergate_proto::DataType;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_config::SchedulingChoice;
use infergate_proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use infergate_proto::inference::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
};
use opentelemetry::KeyValue;

use super::answer::{output_slot_too_small, upstream_error};
use super::connection::Upstream;
use super::shared_pool::{ClientWindow, Plan, expected_output_bytes, largest_input};
use crate::core::model::{Backend, Execution, Produced};
use crate::core::params::ParamValue;
use crate::error::{Error, Result};
use crate::grpc_message::{bool_parameter, typed_contents};
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;
use crate::tensor::shape::fixed_byte_size as byte_size;
use crate::trace::{Kind, Scope, Span};

/// The span of a call to the upstream, when the request is traced: a client span, whose
/// `traceparent` the upstream gets.
fn call_span(execution: &Execution<'_>, url: &str, protocol: &'static str) -> Option<Span> {
    let scope = execution.trace?;
    let mut span = scope.start("upstream", Kind::Client, Instant::now());
    span.attribute(KeyValue::new("server.address", url.to_string()));
    span.attribute(KeyValue::new("rpc.system", protocol));
    span.attribute(KeyValue::new(
        "triton.model_name",
        execution.model.name.clone(),
    ));
    Some(span)
}

/// The span of the copy of a traced request's inputs into the upstream's shared-memory slots,
/// where any went there.
fn trace_staging(scope: &Scope, execution: &Execution<'_>, plan: &Plan, start: Instant) {
    let staged: u64 = execution
        .inputs
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.input(*i).is_some())
        .map(|(_, t)| t.data.len() as u64)
        .sum();
    if staged > 0 {
        let mut span = scope.start("staging copy", Kind::Internal, start);
        span.attribute(KeyValue::new("infergate.staged_bytes", staged as i64));
        span.end(Instant::now());
    }
}

/// One upstream model as a backend.
pub struct UpstreamModel {
    upstream: Arc<Upstream>,
    name: String,
    version: String,
    /// Set once the upstream found an estimated output slot too small: this model's outputs of
    /// variable size go over the socket from then on.
    variable_outputs_inline: AtomicBool,
}

impl UpstreamModel {
    pub fn new(upstream: Arc<Upstream>, name: String, version: String) -> Self {
        UpstreamModel {
            upstream,
            name,
            version,
            variable_outputs_inline: AtomicBool::new(false),
        }
    }

    /// Where each requested output goes when the client named a region for it: straight into that
    /// region, registered with the upstream, where the upstream can open it (with `pass`; without,
    /// only regions no one else can write).
    async fn client_outputs(
        &self,
        execution: &Execution<'_>,
        pass: bool,
    ) -> Vec<Option<ClientWindow>> {
        let mut places = Vec::with_capacity(execution.outputs.len());
        for i in 0..execution.outputs.len() {
            let target = execution.output_shm.get(i).and_then(Option::as_ref);
            let place = match target {
                // An empty window is the sidecar's to refuse, with Triton's own words.
                Some(t) if (pass || t.region.is_forwarded()) && t.byte_size > 0 => {
                    self.window(t).await
                }
                _ => None,
            };
            places.push(place);
        }
        places
    }

    /// The client's window as the upstream knows it, registering the region with the upstream on
    /// first use; `None` when the upstream cannot use it.
    async fn window(&self, target: &ShmTarget) -> Option<ClientWindow> {
        if !self.upstream.can_open(&target.region) {
            return None;
        }
        let (region, base) = self
            .upstream
            .passthrough
            .upstream_name(self.upstream.link(), &target.region)
            .await?;
        Some(ClientWindow {
            region,
            offset: base.saturating_add(target.offset),
            byte_size: target.byte_size,
        })
    }

    /// The inputs a client left in its regions: handed to the upstream by region where `pass` (or
    /// the region is one only the upstream can open) and the upstream can open it (the sidecar
    /// then copies none of those bytes), read here otherwise.
    async fn client_inputs(&self, execution: &Execution<'_>, pass: bool) -> Result<ClientInputs> {
        let mut resolved = ClientInputs {
            windows: Vec::new(),
            read: None,
        };
        for (i, target) in execution.input_regions.iter().enumerate() {
            let Some(target) = target else { continue };
            // Allocated only for requests that name a region (most do not).
            if resolved.windows.is_empty() {
                resolved.windows = vec![None; execution.inputs.len()];
            }
            let window = if (pass || target.region.is_forwarded()) && target.byte_size > 0 {
                self.window(target).await
            } else {
                None
            };
            if let (Some(window), Some(slot)) = (window, resolved.windows.get_mut(i)) {
                *slot = Some(window);
                continue;
            }
            let (inputs, regions) = resolved.read.get_or_insert_with(|| {
                (execution.inputs.to_vec(), execution.input_regions.to_vec())
            });
            if let (Some(tensor), Some(region)) = (inputs.get_mut(i), regions.get_mut(i)) {
                tensor.data = target.read()?;
                *region = None;
            }
        }
        Ok(resolved)
    }

    fn request(
        &self,
        execution: &Execution<'_>,
        plan: &Plan,
        client_inputs: &[Option<ClientWindow>],
        client_outputs: &[Option<ClientWindow>],
    ) -> ModelInferRequest {
        let region = self.upstream.shared_pool.region().unwrap_or_default();
        let mut parameters = HashMap::new();
        // Sequence and custom parameters go through: a model that keeps its own state, or an
        // upstream with its own sequence batcher, needs them.
        for (key, value) in execution.parameters.iter() {
            // `triton_*` keys are the front end's own (perf_analyzer sends some); Triton's REST
            // front end refuses them in a request.
            if key.starts_with("triton_") {
                continue;
            }
            let choice = match value {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
                // uint64 as uint64: a REST upstream would read an int64 above 2^63 as negative.
                ParamValue::Uint(u) => ParameterChoice::Uint64Param(*u),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
                ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            parameters.insert(
                key.clone(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            );
        }
        ModelInferRequest {
            model_name: self.name.clone(),
            model_version: self.version.clone(),
            id: String::new(),
            parameters,
            inputs: execution
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| InferInputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype.as_protocol().to_string(),
                    shape: t.shape.clone(),
                    parameters: match (client_inputs.get(i).and_then(Option::as_ref), plan.input(i))
                    {
                        (Some(c), _) => shm_parameters(&c.region, c.offset, c.byte_size),
                        (None, Some(slot)) => {
                            shm_parameters(region, slot.offset(), t.data.len() as u64)
                        }
                        (None, None) => HashMap::new(),
                    },
                    contents: None,
                })
                .collect(),
            outputs: execution
                .outputs
                .iter()
                .enumerate()
                .map(|(i, name)| InferRequestedOutputTensor {
                    name: name.clone(),
                    parameters: match (
                        client_outputs.get(i).and_then(Option::as_ref),
                        plan.output(i),
                        execution.classification.get(i).copied().unwrap_or(0),
                    ) {
                        (Some(c), _, _) => shm_parameters(&c.region, c.offset, c.byte_size),
                        (None, Some(slot), _) => shm_parameters(region, slot.offset(), slot.len()),
                        (None, None, 0) => HashMap::new(),
                        (None, None, k) => HashMap::from([(
                            "classification".to_string(),
                            InferParameter {
                                parameter_choice: Some(ParameterChoice::Int64Param(i64::from(k))),
                            },
                        )]),
                    },
                })
                .collect(),
            // Reference-counted slices of the client's request: not copied until encoding. Only
            // inputs that are not in shared memory (the upstream skips those when counting raw
            // entries).
            raw_input_contents: execution
                .inputs
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    plan.input(*i).is_none() && client_inputs.get(*i).is_none_or(Option::is_none)
                })
                .map(|(_, t)| t.data.clone())
                .collect(),
        }
    }

    /// The tensor bytes a call carries over the socket, both ways: the inputs sent inline, and
    /// the outputs not placed in a region (the staging pool's or a client's), as large as the
    /// configuration says, or as the largest input where it cannot tell. Tensors in regions
    /// cost a REST call no more than a gRPC one (a few parameters each), so they do not count.
    fn wire_bytes(request: &ModelInferRequest, execution: &Execution<'_>) -> u64 {
        let inline_inputs = request
            .raw_input_contents
            .iter()
            .fold(0u64, |sum, raw| sum.saturating_add(raw.len() as u64));
        let largest_input = largest_input(execution);
        request
            .outputs
            .iter()
            .filter(|output| !output.parameters.contains_key("shared_memory_region"))
            .fold(inline_inputs, |sum, output| {
                let expected = expected_output_bytes(execution, &output.name, largest_input);
                sum.saturating_add(expected)
            })
    }

    /// The response's tensors: staged outputs read from their slots, the others from the message.
    fn outputs(
        &self,
        execution: &Execution<'_>,
        plan: &Plan,
        client_outputs: &[Option<ClientWindow>],
        response: ModelInferResponse,
    ) -> Result<Vec<Tensor>> {
        // Triton keeps one raw entry per output (empty for outputs in shared memory); other
        // servers may list raw entries only for outputs that have one.
        let aligned = response.raw_output_contents.len() == response.outputs.len();
        let mut raw = response.raw_output_contents.into_iter();
        let mut outputs = Vec::with_capacity(response.outputs.len());
        for output in response.outputs {
            let datatype = DataType::from_protocol(&output.datatype).ok_or_else(|| {
                Error::internal(format!(
                    "upstream returned output '{}' with datatype '{}'",
                    output.name, output.datatype
                ))
            })?;
            // Some servers (MLServer) send an empty `contents` message beside the raw entry
            // that holds the bytes: an empty one says nothing.
            let contents = output.contents.filter(|c| !contents_empty(c));
            let index = execution.outputs.iter().position(|n| *n == output.name);
            let staged = index.and_then(|i| plan.output(i));
            let in_client_region = index
                .and_then(|i| client_outputs.get(i))
                .is_some_and(Option::is_some);
            let raw_entry =
                if aligned || (staged.is_none() && !in_client_region && contents.is_none()) {
                    raw.next()
                } else {
                    None
                };
            if in_client_region {
                // Already in the client's region: the response carries only its shape.
                if let Some(len) = byte_size(datatype, &output.shape) {
                    self.upstream.passthrough.count_output(len);
                }
                outputs.push(Tensor::new(
                    output.name,
                    datatype,
                    output.shape,
                    Bytes::new(),
                ));
                continue;
            }
            let data = match (staged, contents) {
                (Some(slot), _) => {
                    let len = byte_size(datatype, &output.shape).ok_or_else(|| {
                        Error::internal(format!(
                            "upstream returned output '{}' with shape {:?}",
                            output.name, output.shape
                        ))
                    })?;
                    let data = slot.read(len)?;
                    self.upstream.shared_pool.count_output(len);
                    data
                }
                (None, Some(contents)) => {
                    typed_contents(contents, &output.datatype, &output.name, &self.name)?
                }
                (None, None) => raw_entry.unwrap_or_default(),
            };
            check_size(&output.name, datatype, &output.shape, &data)?;
            outputs.push(Tensor::new(output.name, datatype, output.shape, data));
        }
        Ok(outputs)
    }
}

/// Inputs in clients' regions, resolved for one upstream call.
struct ClientInputs {
    /// Per input, the window the upstream reads itself (empty when no input is in a region).
    windows: Vec<Option<ClientWindow>>,
    /// When some region had to be read here: the inputs with those bytes filled in, and the
    /// regions that still hold the others.
    read: Option<(Vec<Tensor>, Vec<Option<ShmTarget>>)>,
}

impl ClientInputs {
    /// The execution as the upstream call carries it: regions read here replaced by their bytes.
    fn apply<'a>(&'a self, execution: Execution<'a>) -> Execution<'a> {
        match &self.read {
            Some((inputs, regions)) => Execution {
                inputs,
                input_regions: regions,
                ..execution
            },
            None => execution,
        }
    }

    /// Bytes the upstream read straight from clients' regions.
    fn passed_bytes(&self) -> u64 {
        self.windows.iter().flatten().map(|w| w.byte_size).sum()
    }
}

/// Whether a typed `contents` message carries no element at all.
fn contents_empty(c: &InferTensorContents) -> bool {
    c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty()
}

/// An upstream output must hold what its shape says (BYTES: at least the element count is
/// checked where it is read); a short one would reach the client as a corrupt tensor.
fn check_size(name: &str, datatype: DataType, shape: &[i64], data: &Bytes) -> Result<()> {
    match byte_size(datatype, shape) {
        Some(expected) if expected != data.len() as u64 => Err(Error::internal(format!(
            "upstream returned {} bytes for output '{name}' of shape {shape:?} and datatype {datatype}, which needs {expected}",
            data.len()
        ))),
        _ => Ok(()),
    }
}

/// The tensor parameters that point the upstream at a staging slot.
fn shm_parameters(region: &str, offset: u64, byte_size: u64) -> HashMap<String, InferParameter> {
    let int = |v: u64| InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(
            i64::try_from(v).unwrap_or(i64::MAX),
        )),
    };
    HashMap::from([
        (
            "shared_memory_region".to_string(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(region.to_string())),
            },
        ),
        ("shared_memory_offset".to_string(), int(offset)),
        ("shared_memory_byte_size".to_string(), int(byte_size)),
    ])
}

/// How long a decoupled call's stream is read after its answer is out, for the upstream to close
/// it (so that it is not reset while the upstream completes it).
const DRAIN_AFTER_ANSWER: Duration = Duration::from_secs(1);

/// The upstream does not know a region we registered (the pool or a client's): it restarted.
fn region_lost(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::NotFound
        && status
            .message()
            .contains(&format!("'{}", super::passthrough::NAME_PREFIX))
}

impl Backend for UpstreamModel {
    /// Regions the upstream can open are handed to it; the others are read in `client_inputs`.
    fn takes_client_regions(&self) -> bool {
        true
    }

    /// A model server that lists the classification extension classifies with its own labels.
    fn classifies(&self) -> bool {
        self.upstream.offers_classification.load(Ordering::Relaxed)
    }

    /// A decoupled model's request goes on a gRPC stream of its own, asking for the empty final
    /// response so that the end of the request is known; each response is passed on as it
    /// arrives, with its final flag. Tensors travel in the messages (a staging slot would have
    /// to outlive every response); clients' regions the upstream can open are still handed to it
    /// for inputs. The request may last as long as the model talks (token streams), but not
    /// `timeout_seconds` without a message. Once the client has gone, the stream is still read
    /// to its end (within the same limit) rather than reset: Triton 2.51 can crash on a gRPC
    /// call cancelled as it completes (see `timeout`), so nothing is cancelled that need not be.
    fn execute_decoupled<'a>(
        &'a self,
        execution: Execution<'a>,
        responses: tokio::sync::mpsc::Sender<Produced>,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            let _permit = self.upstream.permit().await?;
            let client_inputs = self.client_inputs(&execution, false).await?;
            let sent = client_inputs.apply(execution);
            let plan = Plan::default();
            let mut request = self.request(&sent, &plan, &client_inputs.windows, &[]);
            request.parameters.insert(
                "triton_enable_empty_final_response".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(true)),
                },
            );
            self.upstream.calls.grpc.fetch_add(1, Ordering::Relaxed);
            let url = &self.upstream.url;
            // Ends when the call does (dropped on every way out).
            let mut span = call_span(&execution, url, "grpc");
            let context = span.as_ref().map(Span::context_headers).unwrap_or_default();
            let mut stream = self
                .upstream
                .client
                .model_stream_infer(request, &context)
                .await
                .map_err(|status| {
                    let e = upstream_error(status, url);
                    if let Some(span) = &mut span {
                        span.fail(&e.message);
                    }
                    e
                })?;
            let silence = self.upstream.timeout;
            // Once the answer is out (the final response, or an error) the stream is still read
            // to its end.
            let mut done = false;
            let mut failure = None;
            loop {
                // After the answer, the upstream closes the call at once (the request stream is
                // closed and its one request complete); a second is plenty.
                let limit = if done { DRAIN_AFTER_ANSWER } else { silence };
                let next = tokio::time::timeout(limit, stream.message()).await;
                let Ok(next) = next else {
                    if done || responses.is_closed() {
                        break; // the answer is out, or no one wants it: let the stream go
                    }
                    return Err(Error::unavailable(format!(
                        "upstream model server {url} sent nothing for {} s",
                        silence.as_secs()
                    )));
                };
                let Some(message) = next.map_err(|status| upstream_error(status, url))? else {
                    break; // the upstream ended the call
                };
                if done || responses.is_closed() {
                    continue; // read to the end, pass nothing on
                }
                if !message.error_message.is_empty() {
                    done = true;
                    failure = Some(Error::internal(message.error_message));
                    continue;
                }
                let Some(response) = message.infer_response else {
                    continue;
                };
                let last = bool_parameter(&response.parameters, "triton_final_response");
                done = last;
                // The empty final response this call asked for: the end, not a response.
                if last && response.outputs.is_empty() {
                    continue;
                }
                match self.outputs(&sent, &plan, &[], response) {
                    Ok(tensors) => {
                        let _ = responses.send(Produced { tensors, last }).await;
                    }
                    Err(e) => {
                        done = true;
                        failure = Some(e);
                    }
                }
            }
            self.upstream
                .passthrough
                .count_input(client_inputs.passed_bytes());
            failure.map_or(Ok(()), Err)
        }
        .boxed()
    }

    fn execute<'a>(&'a self, execution: Execution<'a>) -> BoxFuture<'a, Result<Vec<Tensor>>> {
        async move {
            let permit = self.upstream.permit().await?;
            let permit = Arc::new(permit);
            let pool = &self.upstream.shared_pool;
            // Sequence models keep state upstream: never guess an output size for them, since a
            // wrong guess would mean running the step twice.
            let stateful = matches!(
                execution.model.config.scheduling_choice,
                Some(SchedulingChoice::SequenceBatching(_))
            );
            let estimate = !stateful && !self.variable_outputs_inline.load(Ordering::Relaxed);
            let mut client_inputs = self.client_inputs(&execution, true).await?;
            let mut client_outputs = self.client_outputs(&execution, true).await;
            let staging_start = Instant::now();
            let mut plan = pool.plan(&client_inputs.apply(execution), estimate, &client_outputs);
            if let Some(scope) = execution.trace {
                trace_staging(scope, &execution, &plan, staging_start);
            }
            let mut retried = false;
            loop {
                let sent = client_inputs.apply(execution);
                let request = self.request(&sent, &plan, &client_inputs.windows, &client_outputs);
                let via = self
                    .upstream
                    .route(|| Self::wire_bytes(&request, &execution));
                let mut span = call_span(
                    &execution,
                    self.upstream.url_of(via),
                    via.protocol(&self.upstream),
                );
                let context = span.as_ref().map(Span::context_headers).unwrap_or_default();
                let call =
                    self.upstream
                        .clone()
                        .exchange(request, via, plan, permit.clone(), context);
                let exchange = tokio::spawn(call).await.map_err(|e| {
                    Error::internal(format!("the call to the upstream model server failed: {e}"))
                })?;
                plan = exchange.plan;
                let url = self.upstream.url_of(exchange.via);
                if let Some(mut span) = span.take() {
                    match &exchange.answer {
                        Some(Ok(_)) => {}
                        Some(Err(status)) => span.fail(status.message()),
                        None => span.fail("no answer within the deadline"),
                    }
                    span.end(Instant::now());
                }
                let Some(answer) = exchange.answer else {
                    return Err(Error::unavailable(format!(
                        "upstream model server {url} did not answer within {} s",
                        self.upstream.timeout.as_secs()
                    )));
                };
                let status = match answer {
                    Ok(response) => {
                        self.upstream
                            .passthrough
                            .count_input(client_inputs.passed_bytes());
                        return self.outputs(&sent, &plan, &client_outputs, response);
                    }
                    Err(status) => status,
                };
                if retried {
                    return Err(upstream_error(status, url));
                }
                retried = true;
                if region_lost(&status) {
                    // Refused while reading the request, before the model ran: safe to resend,
                    // over the socket, while the prober registers the pool again.
                    pool.lost();
                    self.upstream
                        .passthrough
                        .forget_lost(self.upstream.link())
                        .await;
                    client_inputs = self.client_inputs(&execution, false).await?;
                    client_outputs = self.client_outputs(&execution, false).await;
                    plan = Plan::default();
                } else if plan.estimated_outputs && output_slot_too_small(&status) {
                    self.variable_outputs_inline.store(true, Ordering::Relaxed);
                    plan = plan.without_outputs();
                } else {
                    return Err(upstream_error(status, url));
                }
            }
        }
        .boxed()
    }
}
