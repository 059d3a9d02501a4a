//! What every front end shares: the model repository, the server's identity and extensions,
//! limits, health, and the runtime log settings.

use std::sync::Arc;

use infergate_config::{Limits, ModelControlMode};

use crate::backend::upstream::UpstreamInfo;
use crate::caller::Caller;
use crate::core::repository::Repository;
use crate::health::Health;
use crate::log::LogControl;
use crate::restricted::Guard;

/// The extensions this server implements, in Triton's order.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

/// The refusal of shared memory to a caller off loopback, in the words of Triton's restricted
/// APIs (HTTP 403, gRPC `UNAVAILABLE`).
pub const REMOTE_SHM: &str = "This API is restricted to clients in the server's pod: shared memory is served only to callers on loopback (server.allow_remote_shm serves it to other hosts)";

pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

pub struct AppState {
    pub repository: Arc<Repository>,
    pub server: ServerInfo,
    pub limits: Limits,
    pub health: Arc<Health>,
    pub log: LogControl,
    pub shm: crate::shm::Registry,
    /// What a caller that shared memory is not served to gets instead of `shm` (`shm_for`).
    shm_refused: crate::shm::Registry,
    /// Whether shared memory is served to callers off loopback too (`server.allow_remote_shm`).
    pub allow_remote_shm: bool,
    /// TLS of the HTTP and gRPC ports, where they speak it.
    pub http_tls: Option<Arc<crate::tls::Tls>>,
    pub metrics_tls: Option<Arc<crate::tls::Tls>>,
    pub grpc_tls: Option<Arc<crate::tls::Tls>>,
    /// The admin port's TLS, offered where `server.status_client_ca` is set.
    pub admin_tls: Option<Arc<crate::tls::AdminTls>>,
    /// The model container this sidecar fronts, when the backend is `upstream`.
    pub upstream: Option<UpstreamHandle>,
    /// Whether clients may load and unload models.
    pub model_control: ModelControlMode,
    /// The REST APIs restricted to requests with a header (`--http-restricted-api`).
    pub http_restricted: Guard,
    /// The gRPC protocols restricted to calls with a metadata key (`--grpc-restricted-protocol`).
    pub grpc_restricted: Guard,
    /// The APIs served only to callers with a Kubernetes identity, both ports
    /// (`server.identity`).
    pub identity: Option<crate::identity::SharedAuthenticator>,
    /// The trace extension: its settings, and where sampled requests' spans go.
    pub tracing: Arc<crate::trace::Tracing>,
    /// The other replicas' sidecars, when sequences are routed across replicas.
    pub peers: Option<Arc<crate::peers::Peers>>,
    /// The canary given a share of the clients' calls (`server.canary`), if any.
    pub canary: Option<Arc<crate::canary::Canary>>,
    /// The request bytes the calls in flight hold, all ports together
    /// (`limits.max_inflight_request_bytes`).
    pub request_bytes: Arc<crate::inflight::ByteBudget>,
    /// Who may drain the sidecar and read its status on the admin port.
    pub admin: crate::admin_access::AdminRules,
    /// Inference calls and streams in flight, and since when there have been none.
    pub traffic: Arc<crate::traffic::Traffic>,
}

impl AppState {
    /// Triton's answer to a load or unload its model control mode does not allow (it names
    /// polling in `none` mode too).
    pub fn check_model_control(&self) -> crate::error::Result<()> {
        match self.model_control {
            ModelControlMode::Explicit => Ok(()),
            ModelControlMode::None | ModelControlMode::Poll => {
                Err(crate::error::Error::unavailable(
                    "explicit model load / unload is not allowed if polling is enabled",
                ))
            }
        }
    }
}

impl AppState {
    /// A model whose trace settings are asked for: Triton answers one it does not serve this
    /// way, on both protocols.
    pub fn check_trace_model(&self, model: &str) -> crate::error::Result<()> {
        self.repository.get(model, "").map(|_| ()).map_err(|_| {
            crate::error::Error::invalid_arg(format!("Request for unknown model : {model}"))
        })
    }
}

/// What the upstream discovery task needs.
pub struct UpstreamHandle {
    pub upstream: Arc<crate::backend::upstream::Upstream>,
    pub loader: Arc<crate::backend::upstream::UpstreamLoader>,
    pub config: infergate_config::UpstreamConfig,
    /// What discovery and probing learned, for the admin status.
    pub info: Arc<parking_lot::RwLock<UpstreamInfo>>,
}

pub type SharedState = Arc<AppState>;

impl AppState {
    /// The extensions `/v2` lists: what this sidecar serves whatever its backend (sequences of
    /// an upstream without a sequence batcher are run by the sidecar); `schedule_policy` where
    /// the models' queues honour it: the built-in models', or a model server that offers it.
    pub fn extensions(&self) -> Vec<String> {
        let mut extensions = self.server.extensions.clone();
        if let Some(upstream) = &self.upstream
            && !upstream
                .info
                .read()
                .extensions
                .iter()
                .any(|e| e == "schedule_policy")
        {
            extensions.retain(|e| e != "schedule_policy");
        }
        if self.shm.cuda().driver().is_none() && self.forwards_cuda().is_some() {
            // Where Triton lists it: right after `system_shared_memory`.
            let at = extensions
                .iter()
                .position(|e| e == "system_shared_memory")
                .map_or(extensions.len(), |i| i + 1);
            extensions.insert(at, "cuda_shared_memory".to_string());
        }
        extensions
    }

    /// Whether CUDA regions can be registered at all: this container has a usable GPU, or a
    /// model server behind it opens clients' buffers.
    pub fn serves_cuda(&self) -> bool {
        self.shm.cuda().driver().is_some() || self.forwards_cuda().is_some()
    }

    /// The model server clients' CUDA buffers are handed to, when there is one that offers CUDA
    /// shared memory.
    pub fn forwards_cuda(&self) -> Option<&crate::backend::upstream::Upstream> {
        self.upstream
            .as_ref()
            .map(|h| h.upstream.as_ref())
            .filter(|u| u.offers_cuda())
    }

    /// Client shared memory as `caller` may use it: the registry for a caller in the pod (on
    /// loopback), or for any caller with `server.allow_remote_shm`; otherwise one that refuses
    /// everything, before looking at any region (`Registry::refusing`).
    pub fn shm_for(&self, caller: Option<Caller>) -> &crate::shm::Registry {
        if self.allow_remote_shm || crate::caller::is_local(caller) {
            &self.shm
        } else {
            &self.shm_refused
        }
    }

    /// Registers a client's CUDA buffer: opened here where this container has a usable GPU,
    /// otherwise handed to a model server that offers CUDA shared memory (which opens it at
    /// once, so a handle it refuses is refused here, with its reason).
    pub async fn register_cuda(
        &self,
        caller: Option<Caller>,
        name: &str,
        raw_handle: &[u8],
        device_id: u64,
        byte_size: u64,
    ) -> crate::error::Result<()> {
        let shm = self.shm_for(caller);
        let upstream = self.forwards_cuda();
        let region =
            shm.register_cuda(name, raw_handle, device_id, byte_size, upstream.is_some())?;
        if let Some(upstream) = upstream
            && region.is_forwarded()
            && let Err(refused) = upstream
                .passthrough
                .adopt(upstream.link(), name, &region)
                .await
        {
            self.shm.withdraw(name, &region);
            return Err(refused);
        }
        Ok(())
    }

    /// Unregisters CUDA regions (`None`: all), and has the model server forget the ones it was
    /// handed as soon as no request uses them.
    pub async fn unregister_cuda(
        &self,
        caller: Option<Caller>,
        name: Option<&str>,
    ) -> crate::error::Result<()> {
        self.shm_for(caller).unregister_cuda(name)?;
        if let Some(handle) = &self.upstream {
            handle
                .upstream
                .passthrough
                .sweep(handle.upstream.link())
                .await;
        }
        Ok(())
    }

    pub fn new(
        repository: Arc<Repository>,
        server_name: String,
        limits: Limits,
        log: LogControl,
        allow_client_shm: bool,
    ) -> SharedState {
        let shm_limits = crate::shm::ShmLimits {
            max_regions: limits.max_shm_regions as usize,
            max_total_bytes: limits.max_shm_bytes,
        };
        let cuda = crate::shm::cuda::probe(
            usize::try_from(limits.max_cuda_pinned_bytes).unwrap_or(usize::MAX),
        );
        match &cuda {
            crate::shm::cuda::Cuda::Usable(d) => tracing::info!(
                devices = d.devices.len(),
                driver_version = d.version,
                "CUDA shared memory available"
            ),
            crate::shm::cuda::Cuda::Unavailable(reason) => {
                tracing::info!(%reason, "CUDA shared memory unavailable")
            }
        }
        // `cuda_shared_memory` is listed only where a driver and a device can serve it, right
        // after `system_shared_memory` as Triton orders them.
        let mut extensions: Vec<String> = Vec::with_capacity(EXTENSIONS.len() + 1);
        for e in EXTENSIONS {
            extensions.push((*e).to_string());
            if *e == "system_shared_memory" && cuda.driver().is_some() {
                extensions.push("cuda_shared_memory".to_string());
            }
        }
        let request_bytes = crate::inflight::ByteBudget::new(limits.max_inflight_request_bytes);
        Arc::new(AppState {
            repository,
            server: ServerInfo {
                name: server_name,
                version: env!("CARGO_PKG_VERSION").to_string(),
                extensions,
            },
            limits,
            health: Arc::new(Health::default()),
            log,
            shm: crate::shm::Registry::new(allow_client_shm, shm_limits, cuda),
            shm_refused: crate::shm::Registry::refusing(REMOTE_SHM),
            allow_remote_shm: false,
            http_tls: None,
            metrics_tls: None,
            grpc_tls: None,
            admin_tls: None,
            upstream: None,
            model_control: ModelControlMode::None,
            http_restricted: Guard::default(),
            grpc_restricted: Guard::default(),
            identity: None,
            tracing: Arc::new(crate::trace::Tracing::off()),
            peers: None,
            canary: None,
            request_bytes,
            admin: crate::admin_access::AdminRules::new(
                &[],
                infergate_config::DEFAULT_MAX_DRAIN_SECONDS,
            ),
            traffic: Default::default(),
        })
    }
}
