//! The connection to the upstream: its transport (gRPC, or REST), the calls in flight and their
//! deadline, which address a call goes to (small calls over REST where configured), and the
//! counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use infergate_config::UpstreamConfig;
use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_proto::inference::{ModelInferRequest, ModelInferResponse};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::answer::Answer;
use super::h2_channel::H2Channel;
use super::passthrough::Passthrough;
use super::rest::RestClient;
use super::shared_pool::{Plan, SharedPool};
use super::transport::{Link, Transport};
use crate::error::{Error, Result};
use crate::shm::registry::Region;

/// A connection to the upstream and the limits that apply to it.
pub struct Upstream {
    pub url: String,
    pub(super) client: Transport,
    pub(super) timeout: Duration,
    in_flight: Arc<Semaphore>,
    /// Shared memory with the model container for large tensors.
    pub shared_pool: SharedPool,
    /// Clients' regions registered with the upstream, for inputs it reads and outputs it writes
    /// there itself.
    pub passthrough: Passthrough,
    /// The upstream lists `cuda_shared_memory`: it can open clients' CUDA IPC handles.
    offers_cuda: AtomicBool,
    /// The upstream lists the classification extension: it classifies with its own labels.
    pub(super) offers_classification: AtomicBool,
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
            let settings = super::h2_channel::Settings {
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
            shared_pool: SharedPool::new(config),
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
    pub(super) async fn permit(&self) -> Result<OwnedSemaphorePermit> {
        self.in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::unavailable("the upstream client is shutting down"))
    }

    pub fn client(&self) -> &Transport {
        &self.client
    }

    /// The transport with this connection's address and deadline, for the registrations of
    /// clients' regions (`Passthrough`).
    pub fn link(&self) -> Link<'_> {
        Link {
            client: &self.client,
            url: &self.url,
            timeout: self.timeout,
        }
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
            Region::System(_) => self.shared_pool.is_active(),
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
    pub(super) fn route(&self, wire_bytes: impl FnOnce() -> u64) -> Via {
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

    pub(super) fn url_of(&self, via: Via) -> &str {
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
    pub(super) async fn exchange(
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
                    Err(status) if super::rest::is_unreachable(&status) => {
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

/// Which of the upstream's addresses a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// `url`, over its transport.
    Main,
    /// `rest_url`, for calls with little tensor data.
    Small,
}

impl Via {
    /// The protocol a call this way speaks, as OpenTelemetry's `rpc.system` names it.
    pub(super) fn protocol(self, upstream: &Upstream) -> &'static str {
        match (self, upstream.client()) {
            (Via::Main, Transport::Grpc(_)) => "grpc",
            _ => "http",
        }
    }
}

/// What an upstream call came to: the answer (`None`: none within the deadline), the address
/// that gave it, and the request's staging slots, still held.
pub(super) struct Exchange {
    pub(super) answer: Option<Answer<ModelInferResponse>>,
    pub(super) via: Via,
    pub(super) plan: Plan,
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
}
