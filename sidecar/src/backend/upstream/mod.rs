//! The upstream backend: a model server in the same pod (Triton, KServe's ModelServer,
//! MLServer, ...) spoken to over V2 gRPC or REST on loopback. The sidecar discovers its models, keeps
//! their readiness, and forwards plain inference to it; everything the protocol offers on top
//! (binary data and compression toward the client, classification, client shared memory) is done
//! by the sidecar's own front ends and pipeline, so it works whatever the upstream supports.
//! Where the upstream offers it, classification is left to the upstream, which knows its labels.

mod answer;
mod discovery;
mod h2_channel;
mod http1;
pub mod passthrough;
mod rest;
pub mod staging;
mod transport;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use infergate_proto::DataType;
use infergate_proto::config::UpstreamConfig;
use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_config::SchedulingChoice;
use infergate_proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use infergate_proto::inference::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
};
use opentelemetry::KeyValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use answer::Answer;
pub use discovery::{UpstreamLoader, run_discovery};

pub use h2_channel::{H2Channel, Settings as H2Settings};
use passthrough::Passthrough;
use rest::RestClient;
use staging::{ClientWindow, Plan, Staging};
pub use transport::Transport;

use crate::core::grpc_message::{bool_parameter, typed_contents};
use crate::core::model::{Backend, Execution, Produced};
use crate::core::params::ParamValue;
use crate::error::{Code, Error, Result};
use crate::shm::registry::{Region, ShmTarget};
use crate::tensor::Tensor;
use crate::tensor::shape::fixed_byte_size as byte_size;
use crate::trace::{Kind, Scope, Span};

/// A connection to the upstream and the limits that apply to it.
pub struct Upstream {
    pub url: String,
    client: Transport,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
    /// Shared memory with the model container for large tensors.
    pub staging: Staging,
    /// Clients' regions registered with the upstream, for inputs it reads and outputs it writes
    /// there itself.
    pub passthrough: Passthrough,
    /// The upstream lists `cuda_shared_memory`: it can open clients' CUDA IPC handles.
    offers_cuda: AtomicBool,
    /// The upstream lists the classification extension: it classifies with its own labels.
    offers_classification: AtomicBool,
    /// The same server's REST address, for calls with little tensor data (`rest_url`).
    small_calls: Option<SmallCalls>,
    /// Inference calls made, by protocol.
    pub calls: CallCounters,
}

/// Inference calls made to the upstream, by the protocol they went over.
#[derive(Default)]
pub struct CallCounters {
    pub grpc: AtomicU64,
    pub rest: AtomicU64,
}

/// A second way to the same model server, V2 REST, for calls with small tensors: on loopback
/// Triton answers those sooner over HTTP/1.1 than over gRPC, while calls with large tensors do as
/// well or better over gRPC, even when the tensors are in shared memory
/// (docs/performance/archive.md, "gRPC or REST to the upstream").
struct SmallCalls {
    client: RestClient,
    url: String,
    max_bytes: u64,
    /// Answered its last readiness probe; while it does not, every call goes over gRPC.
    live: AtomicBool,
}

impl SmallCalls {
    /// Routes small calls over REST or not, logging each change with its reason.
    fn set_live(&self, live: bool, reason: &str) {
        if self.live.swap(live, Ordering::Relaxed) == live {
            return;
        }
        if live {
            tracing::info!(rest = %self.url, max_bytes = self.max_bytes, "calls with small tensors go to the upstream over REST");
        } else {
            tracing::warn!(rest = %self.url, %reason, "the upstream's REST address does not answer; every call goes over gRPC");
        }
    }
}

impl Upstream {
    /// A lazily connecting client: the sidecar starts whether or not the upstream is up.
    pub fn new(config: &UpstreamConfig, max_message_bytes: usize) -> Result<Self> {
        let rest_idle = Duration::from_millis(config.rest_idle_ms);
        let client = if config.url.starts_with("http://") {
            Transport::Rest(RestClient::new(&config.url, max_message_bytes, rest_idle))
        } else {
            let address = config.url.replacen("grpc://", "http://", 1);
            let settings = h2_channel::Settings {
                connect_timeout: Duration::from_secs(2),
                stream_window: 16 << 20,
                connection_window: 32 << 20,
            };
            let channel = H2Channel::lazy(&address, settings).map_err(|e| {
                Error::invalid_arg(format!("invalid upstream url '{}': {e}", config.url))
            })?;
            Transport::Grpc(
                GrpcInferenceServiceClient::new(channel)
                    .max_decoding_message_size(max_message_bytes)
                    .max_encoding_message_size(max_message_bytes),
            )
        };
        Ok(Upstream {
            url: config.url.clone(),
            client,
            timeout: Duration::from_secs(config.timeout_seconds),
            in_flight: Arc::new(Semaphore::new(config.max_concurrency as usize)),
            staging: Staging::new(config),
            passthrough: Passthrough::default(),
            offers_cuda: AtomicBool::new(false),
            offers_classification: AtomicBool::new(false),
            small_calls: config.rest_url.as_ref().map(|url| SmallCalls {
                client: RestClient::new(url, max_message_bytes, rest_idle),
                url: url.clone(),
                max_bytes: config.rest_max_bytes,
                live: AtomicBool::new(false),
            }),
            calls: CallCounters::default(),
        })
    }

    /// One of the `max_concurrency` places for a call to the upstream.
    async fn permit(&self) -> Result<OwnedSemaphorePermit> {
        self.in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::unavailable("the upstream client is shutting down"))
    }

    pub fn client(&self) -> &Transport {
        &self.client
    }

    /// What the upstream offers decides how tensors travel over REST, and whether clients' CUDA
    /// buffers can be handed to it.
    pub fn learned_extensions(&self, extensions: &[String]) {
        let binary = extensions.iter().any(|e| e == "binary_tensor_data");
        if let Transport::Rest(rest) = &self.client {
            rest.set_binary(binary);
        }
        if let Some(small) = &self.small_calls {
            small.client.set_binary(binary);
        }
        let cuda = extensions.iter().any(|e| e == "cuda_shared_memory");
        self.offers_cuda.store(cuda, Ordering::Relaxed);
        let classification = extensions.iter().any(|e| e == "classification");
        self.offers_classification
            .store(classification, Ordering::Relaxed);
    }

    pub fn offers_cuda(&self) -> bool {
        self.offers_cuda.load(Ordering::Relaxed)
    }

    /// Whether the upstream can open a client's region itself: a system region where the
    /// staging pool proves it shares this container's `/dev/shm`, a CUDA one where it offers
    /// CUDA shared memory.
    pub fn can_open(&self, region: &Region) -> bool {
        match region {
            Region::System(_) => self.staging.is_active(),
            Region::Cuda(_) | Region::CudaForwarded(_) => self.offers_cuda(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks that the REST address for small calls answers, and routes small calls over it only
    /// while it does: a model server whose HTTP front end is off or elsewhere still gets every
    /// call, over gRPC. Called with each readiness probe.
    pub async fn probe_small_calls(&self) {
        let Some(small) = &self.small_calls else {
            return;
        };
        let probe = tokio::time::timeout(Duration::from_secs(2), small.client.server_ready());
        let ready = matches!(probe.await, Ok(Ok(true)));
        small.set_live(ready, "no answer to the readiness probe");
    }

    /// A call over REST could not connect: calls go over `url` until the next probe finds the
    /// REST address answering.
    fn rest_unreachable(&self, status: &tonic::Status) {
        if let Some(small) = &self.small_calls {
            small.set_live(false, status.message());
        }
        self.count_main_call();
    }

    fn count_main_call(&self) {
        let counter = match self.client {
            Transport::Grpc(_) => &self.calls.grpc,
            Transport::Rest(_) => &self.calls.rest,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Where a call that carries `wire_bytes()` of tensor data over the socket goes. The size is
    /// worked out only where it decides something (`rest_url` is set).
    fn route(&self, wire_bytes: impl FnOnce() -> u64) -> Via {
        match &self.small_calls {
            Some(small)
                if small.live.load(Ordering::Relaxed) && wire_bytes() <= small.max_bytes =>
            {
                self.calls.rest.fetch_add(1, Ordering::Relaxed);
                Via::Small
            }
            _ => {
                self.count_main_call();
                Via::Main
            }
        }
    }

    fn url_of(&self, via: Via) -> &str {
        match (via, &self.small_calls) {
            (Via::Small, Some(small)) => &small.url,
            _ => &self.url,
        }
    }

    /// Makes one inference call and waits for its answer, up to the deadline, holding the
    /// request's staging slots and its place among the calls in flight all the while.
    ///
    /// It runs as a task of its own (`UpstreamModel::execute` spawns it), so a client that goes
    /// away does not cancel it: the slots must not go back to the pool while the upstream may
    /// still read the request's inputs from them or write its outputs there, and Triton before
    /// 2.57 can crash when a gRPC call is cancelled just as it completes. A call with no answer at
    /// the deadline is reset, and its slots are retired for good, since the upstream may yet
    /// write them.
    async fn exchange(
        self: Arc<Self>,
        request: ModelInferRequest,
        via: Via,
        plan: Plan,
        _permit: Arc<OwnedSemaphorePermit>,
        context: Vec<(&'static str, String)>,
    ) -> Exchange {
        let call = async {
            match (via, &self.small_calls) {
                (Via::Small, Some(small)) => match small.client.infer(&request, &context).await {
                    // Nothing reached the REST address: send the call over gRPC instead, and the
                    // following ones until a probe finds the address again.
                    Err(status) if rest::is_unreachable(&status) => {
                        self.rest_unreachable(&status);
                        (self.client.model_infer(request, &context).await, Via::Main)
                    }
                    answer => (answer, Via::Small),
                },
                _ => (self.client.model_infer(request, &context).await, Via::Main),
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok((answer, via)) => Exchange {
                answer: Some(answer),
                via,
                plan,
            },
            Err(_) => {
                let retired = plan.retire();
                if retired > 0 {
                    tracing::warn!(
                        upstream = %self.url_of(via),
                        bytes = retired,
                        "no answer within the deadline: the call's staging slots are retired, since the upstream may still use them"
                    );
                }
                Exchange {
                    answer: None,
                    via,
                    plan: Plan::default(),
                }
            }
        }
    }
}

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

/// Which of the upstream's addresses a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// `url`, over its transport.
    Main,
    /// `rest_url`, for calls with little tensor data.
    Small,
}

impl Via {
    /// The protocol a call this way speaks, as OpenTelemetry's `rpc.system` names it.
    fn protocol(self, upstream: &Upstream) -> &'static str {
        match (self, upstream.client()) {
            (Via::Main, Transport::Grpc(_)) => "grpc",
            _ => "http",
        }
    }
}

/// What an upstream call came to: the answer (`None`: none within the deadline), the address
/// that gave it, and the request's staging slots, still held.
struct Exchange {
    answer: Option<Answer<ModelInferResponse>>,
    via: Via,
    plan: Plan,
}

/// Maps an upstream failure to the protocol's error the client sees.
pub fn upstream_error(status: tonic::Status, url: &str) -> Error {
    // The client's own output region was too small (the upstream wrote to it directly): the
    // client gets the same answer the sidecar gives when it writes the region itself.
    if output_slot_too_small(&status) {
        return Error::internal(status.message().to_string());
    }
    // The connection itself failed (the upstream died or reset it in the middle of a call):
    // tonic makes such a status locally, with the transport error as its source, and whatever
    // code it picks, for the client the upstream is unavailable.
    if let Some(cause) = std::error::Error::source(&status) {
        return Error::unavailable(format!(
            "upstream model server {url} is unavailable: {}",
            error_chain(cause)
        ));
    }
    match status.code() {
        tonic::Code::Unavailable => Error::unavailable(format!(
            "upstream model server {url} is unavailable: {}",
            status.message()
        )),
        tonic::Code::DeadlineExceeded => Error::unavailable(format!(
            "upstream model server {url} did not answer in time"
        )),
        tonic::Code::InvalidArgument => Error::invalid_arg(status.message().to_string()),
        tonic::Code::NotFound => Error::not_found(status.message().to_string()),
        tonic::Code::Unimplemented => Error::unsupported(status.message().to_string()),
        tonic::Code::AlreadyExists => Error::already_exists(status.message().to_string()),
        tonic::Code::Cancelled => Error::new(Code::Cancelled, status.message().to_string()),
        _ => Error::internal(format!("upstream model server {url}: {}", status.message())),
    }
}

/// An error and its causes, `outer: inner: innermost`, without repeating a cause whose text the
/// outer one already ends with.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
        let (region, base) = self
            .upstream
            .passthrough
            .upstream_name(&self.upstream, &target.region)
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
        let region = self.upstream.staging.region().unwrap_or_default();
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
        let largest_input = staging::largest_input(execution);
        request
            .outputs
            .iter()
            .filter(|output| !output.parameters.contains_key("shared_memory_region"))
            .fold(inline_inputs, |sum, output| {
                let expected =
                    staging::expected_output_bytes(execution, &output.name, largest_input);
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
                    self.upstream.staging.count_output(len);
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
            .contains(&format!("'{}", passthrough::NAME_PREFIX))
}

/// Triton's answer when an output slot was smaller than the output.
fn output_slot_too_small(status: &tonic::Status) -> bool {
    status.message().contains("should be at least")
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
            let staging = &self.upstream.staging;
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
            let mut plan = staging.plan(&client_inputs.apply(execution), estimate, &client_outputs);
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
                    staging.lost();
                    self.upstream.passthrough.forget_lost(&self.upstream).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "grpc://127.0.0.1:8001";

    #[test]
    fn small_calls_go_over_rest_only_while_it_answers_and_up_to_the_limit() {
        let mut config = UpstreamConfig::new(URL);
        config.staging_shm_bytes = 0;
        config.rest_url = Some("http://127.0.0.1:8000".into());
        config.rest_max_bytes = 100;
        let upstream = Upstream::new(&config, 1 << 20).unwrap();
        let route = |bytes| match upstream.route(|| bytes) {
            via @ Via::Main => ("main", upstream.url_of(via).to_string()),
            via @ Via::Small => ("small", upstream.url_of(via).to_string()),
        };
        // Not probed yet: gRPC.
        assert_eq!(route(10), ("main", URL.to_string()));
        upstream
            .small_calls
            .as_ref()
            .unwrap()
            .live
            .store(true, Ordering::Relaxed);
        let rest = "http://127.0.0.1:8000".to_string();
        assert_eq!(route(0), ("small", rest.clone()));
        assert_eq!(route(100), ("small", rest));
        assert_eq!(route(101), ("main", URL.to_string()));
        assert_eq!(upstream.calls.grpc.load(Ordering::Relaxed), 2);
        assert_eq!(upstream.calls.rest.load(Ordering::Relaxed), 2);
        // A REST call that could not connect is sent over gRPC, and so are the next small ones.
        upstream.rest_unreachable(&tonic::Status::unavailable("refused"));
        assert_eq!(route(0), ("main", URL.to_string()));
        assert_eq!(upstream.calls.grpc.load(Ordering::Relaxed), 4);
        assert_eq!(upstream.calls.rest.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_broken_connection_is_unavailable_whatever_code_tonic_picked() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = tonic::Status::from_error(Box::new(reset));
        assert!(std::error::Error::source(&status).is_some());
        let error = upstream_error(status, URL);
        assert_eq!(error.code, Code::Unavailable);
        assert!(
            error
                .message
                .starts_with("upstream model server grpc://127.0.0.1:8001 is unavailable: "),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("connection reset"),
            "{}",
            error.message
        );
    }

    #[test]
    fn statuses_the_upstream_sent_keep_their_meaning() {
        let sent = tonic::Status::internal("model crashed");
        assert_eq!(upstream_error(sent, URL).code, Code::Internal);
        let sent = tonic::Status::invalid_argument("bad shape");
        let error = upstream_error(sent, URL);
        assert_eq!(
            (error.code, error.message.as_str()),
            (Code::InvalidArg, "bad shape")
        );
        let sent = tonic::Status::unavailable("draining");
        assert_eq!(upstream_error(sent, URL).code, Code::Unavailable);
    }
}
