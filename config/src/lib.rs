//! The sidecar's configuration file: the one contract between the operator (which renders it into
//! a ConfigMap) and the sidecar (which reads it at start). Every field has a default, so an empty
//! file is a valid configuration that serves the built-in catalog.

pub mod identity;
pub mod restricted;
pub mod trace;
mod validate;
pub mod yaml;

use serde::{Deserialize, Serialize};

pub use identity::{IdentityAuthorization, IdentitySettings, TokenVerification};
pub use restricted::{KeySource, RestrictedCategory, RestrictedOption, Restriction, Restrictions};
pub use trace::{OtlpTlsSettings, TraceConfig, TraceLevel, TraceMode};
pub use validate::ConfigError;

/// Default HTTP request body limit, after decompression: 64 MiB, Triton's `--http-max-input-size`.
pub const DEFAULT_MAX_HTTP_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// Connections are asked to go after about this long (docs/performance.md, "Connection age":
/// what a reconnection costs, against how soon a scale-out is used).
pub const DEFAULT_MAX_CONNECTION_AGE_SECONDS: u64 = 300;
/// The longest drain a preStop hook may ask for by default, each of its two waits.
pub const DEFAULT_MAX_DRAIN_SECONDS: u64 = 300;
/// Default gRPC message limit, both directions: 256 MiB.
pub const DEFAULT_MAX_GRPC_MESSAGE_BYTES: u64 = 256 * 1024 * 1024;
/// Triton's nesting limit for `data` arrays.
pub const DEFAULT_MAX_JSON_DEPTH: u32 = 100;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SidecarConfig {
    pub server: ServerSettings,
    pub limits: Limits,
    pub backend: BackendConfig,
}

/// Listener and identity settings. Command-line flags override these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Name reported by server metadata. Triton's clients and QA expect `triton`.
    pub name: String,
    /// Address the listeners bind to: an IPv4 or IPv6 address (`::` listens on both where the
    /// system allows it, as Linux does by default), in brackets or not, or `localhost`.
    pub host: String,
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    /// The admin port: health-only probes (`/livez`, `/readyz`) for anyone, `/drain` from
    /// loopback only, `/status` from loopback, with a status token or with a client
    /// certificate of `status_client_ca`. Not for clients.
    pub admin_port: u16,
    /// Hex SHA-256 digests of the bearer tokens that may read `/status` on the admin port from
    /// outside the pod (`Authorization: Bearer <token>`). Digests, not tokens, so the
    /// configuration holds no credential. Empty: `/status` answers on loopback only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_token_sha256: Vec<String>,
    /// A PEM file of the certificate authority whose client certificates may read `/status`
    /// from outside the pod (the operator's, from a CA its chart creates). Set: the admin port
    /// also speaks TLS, told apart from plain HTTP by a connection's first byte, with a
    /// certificate the sidecar makes for itself at start; the kubelet's probes and the preStop
    /// hook keep speaking plain HTTP. The file is read again when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_client_ca: Option<String>,
    /// The longest wait one `/drain` call may ask for, each of its `seconds` and `sequences`
    /// (the operator sets the pod's termination grace period).
    pub max_drain_seconds: u64,
    /// A directory where the sidecar copies its preStop hook, the static binary
    /// `infergate-drain` beside its own, at start: a volume the model server's container mounts
    /// too, so that its hook can run it. Unset: nothing is copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_hook_dir: Option<String>,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub log_level: String,
    /// `text`, `json`, or Triton's line layouts `default` and `ISO8601`.
    pub log_format: String,
    /// Triton's `--log-info`, `--log-warning` and `--log-error`: info, warning and error lines
    /// each on or off, over what `log_level` implies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_info: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_warning: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_error: Option<bool>,
    /// Triton's `--log-verbose`: 1 adds debug lines, 2 and more trace lines; 0 none (over what
    /// `log_level` implies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_verbose: Option<u32>,
    /// Triton's `--log-file`: log lines are appended to this file instead of written to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
    /// How long in-flight requests may take to finish after SIGTERM, in seconds.
    pub shutdown_grace_seconds: u64,
    /// Let clients register shared-memory regions (off by default, as in Triton).
    pub allow_client_shm: bool,
    /// Serve shared memory (registration, status, unregistering, inference naming a region) to
    /// clients that are not on loopback too. Off by default: only a client in the pod shares its
    /// `/dev/shm` with the sidecar; on, for hosts that share memory otherwise.
    pub allow_remote_shm: bool,
    /// TLS on the gRPC port, as Triton's `--grpc-use-ssl`, `--grpc-use-ssl-mutual`,
    /// `--grpc-server-cert`, `--grpc-server-key` and `--grpc-root-cert` set it.
    #[serde(default, skip_serializing_if = "TlsSettings::is_off")]
    pub grpc_tls: TlsSettings,
    /// TLS on the HTTP port: the same settings under `--http-*` (Triton has no HTTPS of its own).
    #[serde(default, skip_serializing_if = "TlsSettings::is_off")]
    pub http_tls: TlsSettings,
    /// TLS on the metrics port: the same settings under `--metrics-*`, for scrapers that speak
    /// HTTPS (Prometheus' `scheme: https` with a `tls_config`). The probes' admin port stays
    /// plain, as the kubelet's probes need.
    #[serde(default, skip_serializing_if = "TlsSettings::is_off")]
    pub metrics_tls: TlsSettings,
    /// How often the TLS files are looked at for a change (a renewed certificate), in seconds.
    pub tls_reload_seconds: u64,
    /// Whether clients may load and unload models (Triton's `--model-control-mode`).
    pub model_control_mode: ModelControlMode,
    /// Threads that serve requests (the async runtime's workers); 0: one per CPU the process
    /// may use. One by default: a sidecar shares its cores with the model server, and for small
    /// tensors one worker answers sooner than two that hand connections to each other
    /// (docs/performance/archive.md, "One worker"); one worker runs as a current-thread runtime.
    /// Large JSON tensors are parsed and written on extra threads either way.
    pub worker_threads: u32,
    /// Triton's `--http-restricted-api`: settings `<api>[,<api>...]:<key>=<value>`; a REST
    /// request to one of the APIs (health, metadata, inference, shared-memory, model-config,
    /// model-repository, statistics, trace, logging) without the header `<key>: <value>` is
    /// refused with 403.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_restricted_api: Vec<String>,
    /// Triton's `--grpc-restricted-protocol`: the same for gRPC, where the metadata key is
    /// `triton-grpc-protocol-<key>` and a refused call ends with `UNAVAILABLE`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grpc_restricted_protocol: Vec<String>,
    /// As `http_restricted_api`, with the key in a file: `<api>[,<api>...]:<key>=<path>`. The
    /// file holds the value alone (a trailing newline is not part of it), so a mounted Secret
    /// can hold it; it is read again every `key_reload_seconds`, a changed key taking effect
    /// without a restart, and a file that no longer reads leaving the last key in force.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_restricted_api_file: Vec<String>,
    /// As `grpc_restricted_protocol`, with the key in a file, as `http_restricted_api_file`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grpc_restricted_protocol_file: Vec<String>,
    /// How often key files are read again, in seconds.
    pub key_reload_seconds: u64,
    /// APIs (restricted-API category names, comma-separated entries: `logging,trace`) served
    /// on both ports only to callers in the pod, on loopback; others get Triton's restricted
    /// answer (HTTP 403, gRPC `UNAVAILABLE`) whatever key they carry. Empty by default, as
    /// Triton's APIs are open; the operator renders the control APIs here unless told otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_only_api: Vec<String>,
    /// Triton's `--trace-config`: settings `[<mode>,]<name>=<value>` (`mode=opentelemetry`,
    /// `level=TIMESTAMPS`, `rate=N`, `count=N`, `opentelemetry,url=HOST:PORT/v1/traces`, ...):
    /// OpenTelemetry spans of sampled requests, exported over OTLP/HTTP.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace_config: Vec<String>,
    /// The gRPC addresses (`HOST:PORT`) of every replica's sidecar, this one's included, the same
    /// list on every replica: each sequence is then served by the replica that holds it, whichever
    /// one a request lands on (docs/sequences.md). Empty: this sidecar serves every sequence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sequence_peers: Vec<String>,
    /// Which of `sequence_peers` is this sidecar. Unset: the one entry on this gRPC port whose host
    /// is a loopback address, this host's name or `$POD_IP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_self: Option<String>,
    /// In Kubernetes, instead of `sequence_peers`: the headless Service (`[NAMESPACE/]SERVICE`)
    /// whose EndpointSlices list the replicas. The sidecar watches them and routes sequences
    /// across the pods they name, at the slices' `grpc` port; this sidecar is `$POD_IP`. The
    /// namespace defaults to `$POD_NAMESPACE`, then the pod's service-account namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_peers_service: Option<String>,
    /// Labels (`key=value,...`) the Service's EndpointSlices must carry to be read, besides its
    /// name: the EndpointSlice controller copies the Service's labels onto them, so the
    /// operator names the InferenceService's here and a slice anybody else writes for the
    /// Service's name is not read (hygiene: whoever may write slices can copy labels too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_peers_labels: Option<String>,
    /// TLS towards the other replicas' sidecars, required where the gRPC port serves TLS and
    /// sequences are routed across replicas.
    #[serde(default, skip_serializing_if = "PeerTlsSettings::is_off")]
    pub sequence_peers_tls: PeerTlsSettings,
    /// A canary: another variant of the service, on other pods, given a share of the inference
    /// calls this sidecar receives from clients (docs/sidecar.md, "Canary"). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySettings>,
    /// The activator role (docs/sidecar.md, "Activator"): instead of fronting a model server,
    /// this process holds the service's calls while none of its sidecars is ready, starts a pod
    /// through the scale subresource, and passes the calls on once one is. Unset: a sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activator: Option<ActivatorSettings>,
    /// APIs served only to callers with a Kubernetes identity (docs/sidecar.md, "Kubernetes
    /// identities"). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentitySettings>,
}

/// The canary's sidecars and the share of calls they get. Each call from a client is drawn on its
/// own (a sequence by its id, so that all of it goes one way), so one gRPC channel splits too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CanarySettings {
    /// The canary's sidecars, their gRPC addresses (`HOST:PORT`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// In Kubernetes, instead of `peers`: the headless Service (`[NAMESPACE/]SERVICE`) whose
    /// EndpointSlices list the canary's pods, watched as `sequence_peers_service` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Labels (`key=value,...`) the Service's EndpointSlices must carry to be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    /// Percent of the calls sent to the canary, 0 to 100.
    pub traffic_percent: u8,
    /// A file holding the percent (a whole number, 0 to 100), read at start and again every
    /// second while serving; where it is readable its value replaces `traffic_percent`. The
    /// operator mounts it from the ConfigMap, so that a change of the share rolls no pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_percent_file: Option<String>,
    /// TLS towards the canary's sidecars, required where their gRPC ports serve it.
    #[serde(skip_serializing_if = "PeerTlsSettings::is_off")]
    pub tls: PeerTlsSettings,
}

/// The activator: where the service's sidecars are, the Deployment it scales from zero, and the
/// bounds of what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivatorSettings {
    /// The service's sidecars, their gRPC addresses (`HOST:PORT`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// In Kubernetes, instead of `peers`: the headless Service (`[NAMESPACE/]SERVICE`) whose
    /// EndpointSlices list the service's pods, watched as `sequence_peers_service` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Labels (`key=value,...`) the Service's EndpointSlices must carry to be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    /// The HTTP port of the service's sidecars (their gRPC port is the one in `peers` or in the
    /// slices). REST calls are passed on there.
    pub upstream_http_port: u16,
    /// The Deployment (`[NAMESPACE/]NAME`) whose scale subresource the first held call raises
    /// from 0 to `scale_to`. Unset: calls are held until a sidecar is ready, and nothing is
    /// scaled (another scaler's job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The replicas a scale from zero asks for.
    pub scale_to: u32,
    /// The InferenceService (`[NAMESPACE/]NAME`) whose status says why its pods fail to start:
    /// held calls are then answered with that reason at once, instead of at the hold's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_service: Option<String>,
    /// Longest a call is held waiting for a ready sidecar, in seconds; then 503 / `UNAVAILABLE`.
    pub hold_timeout_seconds: u64,
    /// Most calls held at once; past it, 503 / `UNAVAILABLE` with `Retry-After`.
    pub max_held_calls: u32,
    /// Most request bytes held at once (the bodies of held calls); past it, the same.
    pub max_held_bytes: u64,
    /// The `Retry-After` (seconds) of a call refused for the caps.
    pub retry_after_seconds: u32,
    /// TLS towards the service's sidecars, required where their ports serve it.
    #[serde(skip_serializing_if = "PeerTlsSettings::is_off")]
    pub tls: PeerTlsSettings,
}

impl Default for ActivatorSettings {
    fn default() -> Self {
        ActivatorSettings {
            peers: Vec::new(),
            service: None,
            labels: None,
            upstream_http_port: 8000,
            deployment: None,
            scale_to: 1,
            inference_service: None,
            hold_timeout_seconds: 300,
            max_held_calls: 256,
            max_held_bytes: 64 << 20,
            retry_after_seconds: 5,
            tls: PeerTlsSettings::default(),
        }
    }
}

/// TLS towards sequence peers: a peer gets a forwarded request only once it has proved a
/// certificate that chains to `root_cert` for `server_name` (the peers Service's DNS name, not
/// the address it was dialled at).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerTlsSettings {
    /// PEM: the roots peers' certificates must chain to. Set: peers are dialled over TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_cert: Option<String>,
    /// The DNS name every peer's certificate must carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// PEM: the certificate presented where peers ask for one (their port's mutual TLS); it
    /// must allow client authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<String>,
    /// PEM: that certificate's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
}

impl PeerTlsSettings {
    pub fn is_off(&self) -> bool {
        *self == PeerTlsSettings::default()
    }
}

impl ServerSettings {
    /// The parsed `http_restricted_api`.
    pub fn http_restrictions(&self) -> Result<Restrictions, String> {
        Restrictions::parse_with_files(
            &self.http_restricted_api,
            &self.http_restricted_api_file,
            RestrictedOption::Http,
        )
    }

    /// The parsed `grpc_restricted_protocol`.
    pub fn grpc_restrictions(&self) -> Result<Restrictions, String> {
        Restrictions::parse_with_files(
            &self.grpc_restricted_protocol,
            &self.grpc_restricted_protocol_file,
            RestrictedOption::Grpc,
        )
    }

    /// The parsed `pod_only_api`.
    pub fn pod_only_categories(&self) -> Result<Vec<RestrictedCategory>, String> {
        restricted::categories(&self.pod_only_api)
    }

    /// The parsed `trace_config`.
    pub fn trace(&self) -> Result<TraceConfig, String> {
        TraceConfig::parse(&self.trace_config)
    }

    /// `host` as a socket API takes it: an IPv6 address without its URL brackets (`[::]`).
    pub fn bind_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            name: "triton".to_string(),
            host: "::".to_string(),
            http_port: 8000,
            grpc_port: 8001,
            metrics_port: 8002,
            admin_port: 8003,
            status_token_sha256: Vec::new(),
            status_client_ca: None,
            max_drain_seconds: DEFAULT_MAX_DRAIN_SECONDS,
            drain_hook_dir: None,
            log_level: "info".to_string(),
            log_format: "default".to_string(),
            log_info: None,
            log_warning: None,
            log_error: None,
            log_verbose: None,
            log_file: None,
            shutdown_grace_seconds: 30,
            allow_client_shm: false,
            allow_remote_shm: false,
            grpc_tls: TlsSettings::default(),
            http_tls: TlsSettings::default(),
            metrics_tls: TlsSettings::default(),
            tls_reload_seconds: 5,
            model_control_mode: ModelControlMode::None,
            worker_threads: 1,
            http_restricted_api: Vec::new(),
            grpc_restricted_protocol: Vec::new(),
            http_restricted_api_file: Vec::new(),
            grpc_restricted_protocol_file: Vec::new(),
            key_reload_seconds: 5,
            pod_only_api: Vec::new(),
            trace_config: Vec::new(),
            sequence_peers: Vec::new(),
            sequence_self: None,
            sequence_peers_service: None,
            sequence_peers_labels: None,
            sequence_peers_tls: PeerTlsSettings::default(),
            canary: None,
            activator: None,
            identity: None,
        }
    }
}

/// Triton's `--model-control-mode`, as far as clients see it. `none` (Triton's default, and this
/// one's) and `poll` refuse the repository API's load and unload with `UNAVAILABLE` (HTTP 503);
/// `explicit` allows them. Whatever the mode, the sidecar starts with every model loaded (with the
/// built-in catalog, as Triton in explicit mode with `--load-model=*`), and in front of a model
/// server loading stays with the model container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelControlMode {
    #[default]
    None,
    Explicit,
    Poll,
}

impl ModelControlMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelControlMode::None => "none",
            ModelControlMode::Explicit => "explicit",
            ModelControlMode::Poll => "poll",
        }
    }
}

impl std::str::FromStr for ModelControlMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(ModelControlMode::None),
            "explicit" => Ok(ModelControlMode::Explicit),
            "poll" => Ok(ModelControlMode::Poll),
            other => Err(format!("'{other}': expected none, explicit or poll")),
        }
    }
}

/// TLS on one port, with Triton's names: `use_ssl_mutual` implies `use_ssl` and requires client
/// certificates that chain to `root_cert`; the files count only when TLS is on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    pub use_ssl: bool,
    pub use_ssl_mutual: bool,
    /// PEM: the server's certificate (its chain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cert: Option<String>,
    /// PEM: the server's private key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_key: Option<String>,
    /// PEM: the roots clients' certificates must chain to (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_cert: Option<String>,
}

impl TlsSettings {
    /// Whether the port speaks TLS.
    pub fn enabled(&self) -> bool {
        self.use_ssl || self.use_ssl_mutual
    }

    pub fn is_off(&self) -> bool {
        *self == TlsSettings::default()
    }
}

/// Explicit limits on what one request may cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest HTTP request body, after decompression.
    pub max_http_body_bytes: u64,
    /// Largest gRPC message, received or sent.
    pub max_grpc_message_bytes: u64,
    /// Deepest nesting of a JSON `data` array.
    pub max_json_depth: u32,
    /// Most client shared-memory regions registered at once.
    pub max_shm_regions: u32,
    /// Most bytes of client shared memory mapped at once.
    pub max_shm_bytes: u64,
    /// Most bytes of page-locked host memory kept for copies to and from clients' CUDA regions,
    /// lent and free together (0: none, every copy through pageable memory).
    pub max_cuda_pinned_bytes: u64,
    /// Longest a client may take to send its request headers on the HTTP port, in seconds
    /// (then the connection is closed).
    pub http_header_timeout_seconds: u64,
    /// Longest a request body may go without sending a byte, in seconds (then 400).
    pub http_body_timeout_seconds: u64,
    /// Longest a whole HTTP request body may take to arrive, however steadily it trickles, in
    /// seconds (then 400): a client sending a byte now and then cannot hold a large buffer.
    pub http_body_deadline_seconds: u64,
    /// Most connections open at once on each client port (HTTP, gRPC); one more is refused at
    /// once with a clear answer (HTTP 503, or an HTTP/2 GOAWAY) and closed.
    pub max_connections: u32,
    /// Most connections open at once on the metrics port and on the admin port, each.
    pub max_admin_connections: u32,
    /// Most streams (calls) open at once on one HTTP/2 connection, on the gRPC port and on the
    /// HTTP port's h2c, announced in SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: u32,
    /// A connection with no call in flight for this long, in seconds, is asked to go (HTTP/2
    /// GOAWAY; an HTTP/1.1 connection is closed between requests by the header deadline).
    pub idle_timeout_seconds: u64,
    /// A connection open this long (give or take a tenth, so that connections opened together
    /// do not all go together), in seconds, is asked to go (HTTP/2 GOAWAY), however busy: a
    /// long-lived client reconnects, and so spreads over pods added since. Calls open on it
    /// finish there, streams included. 0: never.
    pub max_connection_age_seconds: u64,
    /// How long the calls still open on a connection asked to go for its age may take, in
    /// seconds, before the connection is closed under them. 0: as long as they need.
    pub max_connection_age_grace_seconds: u64,
    /// How often an HTTP/2 connection is pinged, in seconds; a peer that does not answer within
    /// `keepalive_timeout_seconds` is gone and its connection is closed.
    pub keepalive_seconds: u64,
    pub keepalive_timeout_seconds: u64,
    /// Most bytes of request bodies and gRPC messages held at once by the calls in flight, all
    /// ports together; a call that would go past it is refused with 503 / `UNAVAILABLE`
    /// `server is busy` instead of growing the process's memory.
    pub max_inflight_request_bytes: u64,
}

impl Limits {
    pub fn http_header_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.http_header_timeout_seconds)
    }
    pub fn http_body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.http_body_timeout_seconds)
    }
    pub fn http_body_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.http_body_deadline_seconds)
    }
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.idle_timeout_seconds)
    }
    /// The connection age after which a connection is asked to go; none: never.
    pub fn max_connection_age(&self) -> Option<std::time::Duration> {
        (self.max_connection_age_seconds > 0)
            .then(|| std::time::Duration::from_secs(self.max_connection_age_seconds))
    }
    /// How long a connection asked to go for its age is given; none: as long as its calls need.
    pub fn max_connection_age_grace(&self) -> Option<std::time::Duration> {
        (self.max_connection_age_grace_seconds > 0)
            .then(|| std::time::Duration::from_secs(self.max_connection_age_grace_seconds))
    }
    pub fn keepalive(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.keepalive_seconds)
    }
    pub fn keepalive_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.keepalive_timeout_seconds)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_http_body_bytes: DEFAULT_MAX_HTTP_BODY_BYTES,
            max_grpc_message_bytes: DEFAULT_MAX_GRPC_MESSAGE_BYTES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
            max_shm_regions: 256,
            max_shm_bytes: 16 << 30,
            max_cuda_pinned_bytes: 64 << 20,
            http_header_timeout_seconds: 30,
            http_body_timeout_seconds: 30,
            http_body_deadline_seconds: 300,
            max_connections: 4096,
            max_admin_connections: 64,
            max_concurrent_streams: 1024,
            idle_timeout_seconds: 300,
            max_connection_age_seconds: DEFAULT_MAX_CONNECTION_AGE_SECONDS,
            max_connection_age_grace_seconds: 0,
            keepalive_seconds: 60,
            keepalive_timeout_seconds: 20,
            max_inflight_request_bytes: 2 << 30,
        }
    }
}

/// Where inference runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackendConfig {
    /// In-process reference models.
    Builtin {
        /// Names from the built-in catalog; empty means every model of the catalog.
        #[serde(default)]
        models: Vec<String>,
    },
    /// A model server in the same pod, spoken to over the V2 protocol on loopback.
    Upstream(UpstreamConfig),
}

/// The model container the sidecar fronts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `grpc://HOST:PORT` (V2 gRPC, preferred) or `http://HOST:PORT` (V2 REST).
    pub url: String,
    /// Deadline of one upstream call, in seconds.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_seconds: u64,
    /// Most upstream calls in flight at once; further requests wait.
    #[serde(default = "default_upstream_concurrency")]
    pub max_concurrency: u32,
    /// How often readiness of the upstream and its models is checked, in seconds.
    #[serde(default = "default_probe_interval")]
    pub probe_interval_seconds: u64,
    /// Models to serve, with settings the upstream cannot tell; empty means every model the
    /// upstream lists as ready.
    #[serde(default)]
    pub models: Vec<UpstreamModel>,
    /// Size of the staging pool: a shared-memory object in `/dev/shm` registered with the
    /// upstream, through which large tensors travel instead of the socket. 0 turns it off; it is
    /// used only when the upstream lists `system_shared_memory` and can open the object.
    #[serde(default = "default_staging_shm_bytes")]
    pub staging_shm_bytes: u64,
    /// Tensors of at least this many bytes go through the staging pool; smaller ones (for which a
    /// socket write is cheaper than the bookkeeping) are sent inline.
    #[serde(default = "default_staging_min_bytes")]
    pub staging_min_bytes: u64,
    /// The same model server's V2 REST address (`http://HOST:PORT`), beside a `grpc://` `url`:
    /// calls that carry at most `rest_max_bytes` of tensor data over the socket go over it, the
    /// others over gRPC. Triton's HTTP front end answers small requests sooner than its gRPC
    /// one; calls with large tensors inline do as well or better over gRPC. Unset: every call
    /// over `url`.
    #[serde(default)]
    pub rest_url: Option<String>,
    /// The most tensor bytes a call over `rest_url` carries over the socket: inputs sent inline
    /// plus outputs expected inline (tensors in the staging pool or a client's region do not
    /// count).
    #[serde(default = "default_rest_max_bytes")]
    pub rest_max_bytes: u64,
    /// A kept-alive REST connection to the upstream idle for longer than this many milliseconds
    /// is closed instead of reused, so that no call goes out as the server closes its end (which
    /// loses the call with no way to tell whether the model ran). Keep it below the upstream's
    /// own keep-alive timeout; 0 opens a connection for every call.
    #[serde(default = "default_rest_idle_ms")]
    pub rest_idle_ms: u64,
}

impl UpstreamConfig {
    /// An upstream at `url` with every other setting at its default.
    pub fn new(url: impl Into<String>) -> Self {
        UpstreamConfig {
            url: url.into(),
            timeout_seconds: default_upstream_timeout(),
            max_concurrency: default_upstream_concurrency(),
            probe_interval_seconds: default_probe_interval(),
            models: Vec::new(),
            staging_shm_bytes: default_staging_shm_bytes(),
            staging_min_bytes: default_staging_min_bytes(),
            rest_url: None,
            rest_max_bytes: default_rest_max_bytes(),
            rest_idle_ms: default_rest_idle_ms(),
        }
    }
}

/// 64 MiB: sixteen 4 MiB tensors in flight (inputs and outputs), within Kubernetes' common
/// `/dev/shm` sizes.
fn default_staging_shm_bytes() -> u64 {
    64 << 20
}
fn default_staging_min_bytes() -> u64 {
    64 << 10
}
/// 64 KiB: below it a REST call to Triton costs less than a gRPC one on loopback; at 4 MiB gRPC
/// costs less (docs/performance/archive.md, "gRPC or REST to the upstream").
fn default_rest_max_bytes() -> u64 {
    64 << 10
}

/// 1 s: below the keep-alive timeouts of the HTTP servers model servers run on (uvicorn's 5 s,
/// which MLServer keeps; gunicorn's 2 s), and long enough for a connection to be reused under
/// any steady load.
fn default_rest_idle_ms() -> u64 {
    1000
}

fn default_upstream_timeout() -> u64 {
    60
}
fn default_upstream_concurrency() -> u32 {
    256
}
fn default_probe_interval() -> u64 {
    5
}

/// Per-model settings for an upstream model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamModel {
    pub name: String,
    /// Used when the upstream has no model-configuration endpoint: 0 means the model does not
    /// batch and metadata shapes are taken as they are.
    pub max_batch_size: Option<u32>,
    /// Label files for classification, by output name (one label per line).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Fields of the model's configuration, in the JSON form `GET /v2/models/<m>/config`
    /// answers (`max_batch_size`, `input`, `output`, `sequence_batching`, ...), set over the
    /// configuration the upstream gave or the sidecar synthesized from its metadata.
    pub config: Option<serde_json::Value>,
    /// Who runs the sequences of a model whose configuration has `sequence_batching`; unset
    /// means the upstream when its own configuration has a sequence batcher, else the sidecar.
    pub sequence: Option<SequenceMode>,
}

/// Where a sequence model's sequences are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SequenceMode {
    /// The sidecar schedules sequences (slots, order, idle timeout) and adds the configured
    /// control tensors (START, END, READY, CORRID) to each request as inputs.
    Sidecar,
    /// No scheduling: `sequence_*` parameters are forwarded to a model that keeps its own state.
    Parameters,
    /// The upstream's own sequence batcher; `sequence_*` parameters are forwarded to it.
    Upstream,
}

impl SequenceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SequenceMode::Sidecar => "sidecar",
            SequenceMode::Parameters => "parameters",
            SequenceMode::Upstream => "upstream",
        }
    }
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig::Builtin { models: Vec::new() }
    }
}
