//! Command-line flags. Each overrides the matching field of the configuration file.

use std::path::PathBuf;

use clap::Parser;
use infergate_config::{BackendConfig, ModelControlMode, SidecarConfig, UpstreamConfig};

#[derive(Debug, Parser)]
#[command(
    name = "infergate-sidecar",
    version,
    // A flag may be shortened to any prefix that names it alone, as Triton's (getopt's) may:
    // its QA starts it with `--log-warn`.
    infer_long_args = true,
    about = "The Open Inference Protocol (KServe V2) with Triton's extensions, over REST and gRPC"
)]
pub struct Args {
    /// YAML configuration file (see docs/sidecar.md). Without it, every built-in model is served.
    #[arg(long, env = "INFERGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to bind the listeners to.
    #[arg(long)]
    pub host: Option<String>,
    /// HTTP/REST port (0 picks a free port; the chosen port is logged).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// gRPC port (0 picks a free port).
    #[arg(long)]
    pub grpc_port: Option<u16>,
    /// Prometheus metrics port (0 picks a free port).
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Admin status port, for the operator (0 picks a free port).
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// error, warn, info, debug or trace.
    #[arg(long)]
    pub log_level: Option<String>,
    /// text, json, or Triton's line layouts default and ISO8601 (the last one given wins).
    #[arg(long, overrides_with = "log_format")]
    pub log_format: Option<String>,
    /// Info lines on or off (Triton's flag: true, false, on, off, 1 or 0).
    #[arg(long, value_name = "BOOL", value_parser = triton_bool)]
    pub log_info: Option<bool>,
    /// Warning lines on or off.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool)]
    pub log_warning: Option<bool>,
    /// Error lines on or off.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool)]
    pub log_error: Option<bool>,
    /// Triton's verbose level: 1 adds debug lines, 2 trace lines, 0 none (true is 1, false 0).
    #[arg(long, value_name = "N", value_parser = triton_verbose_level)]
    pub log_verbose: Option<u32>,
    /// Append log lines to this file instead of writing them to stderr.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<String>,
    /// Name reported by server metadata (default "triton", which Triton's clients expect).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Largest HTTP request body in bytes, after decompression (default 64 MiB).
    #[arg(long, alias = "http-max-input-size")]
    pub max_http_body_bytes: Option<u64>,
    /// Largest gRPC message in bytes, either direction.
    #[arg(long)]
    pub max_grpc_message_bytes: Option<u64>,
    /// Front a model server instead of the built-in models: `grpc://HOST:PORT` (V2 gRPC,
    /// preferred) or `http://HOST:PORT` (V2 REST). Every model the
    /// upstream lists as ready is served, with its discovered metadata and configuration.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The same model server's V2 REST address, `http://HOST:PORT`, beside a `grpc://` upstream:
    /// calls with small tensors (see --upstream-rest-max-bytes) go over it, since Triton's HTTP
    /// front end answers small requests sooner than its gRPC one.
    #[arg(long, value_name = "URL")]
    pub upstream_rest: Option<String>,
    /// The most tensor bytes a call over --upstream-rest carries over the socket, inputs inline
    /// plus outputs expected inline; tensors in shared memory do not count (default 65536).
    #[arg(long, value_name = "BYTES")]
    pub upstream_rest_max_bytes: Option<u64>,
    /// A REST connection to the upstream idle for longer than this is closed instead of reused;
    /// keep it below the upstream's keep-alive timeout (default 1000; 0: a connection per call).
    #[arg(long, value_name = "MS")]
    pub upstream_rest_idle_ms: Option<u64>,
    /// Size of the staging pool shared with the upstream through `/dev/shm` (default 64 MiB;
    /// 0 turns it off). Used only when the upstream offers system shared memory.
    #[arg(long, value_name = "BYTES")]
    pub staging_shm_bytes: Option<u64>,
    /// Smallest tensor, in bytes, that goes through the staging pool (default 65536).
    #[arg(long, value_name = "BYTES")]
    pub staging_min_bytes: Option<u64>,
    /// Let clients register system shared-memory regions (`--allow-client-shm` or `=true`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub allow_client_shm: Option<bool>,
    /// Serve shared memory to clients off loopback too (`--allow-remote-shm` or `=true`); by
    /// default only clients in the pod, on loopback, may use it.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub allow_remote_shm: Option<bool>,
    /// TLS on the gRPC port (Triton's flag; a value is required: `=1`, `=true`, ...). The TLS
    /// flags may be given more than once, the last one counting, as getopt reads Triton's.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "grpc_use_ssl")]
    pub grpc_use_ssl: Option<bool>,
    /// Mutual TLS on the gRPC port. As in Triton, giving it turns TLS on whatever its value.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "grpc_use_ssl_mutual")]
    pub grpc_use_ssl_mutual: Option<bool>,
    /// PEM file of the gRPC port's certificate (used when its TLS is on).
    #[arg(long, value_name = "FILE", overrides_with = "grpc_server_cert")]
    pub grpc_server_cert: Option<String>,
    /// PEM file of the gRPC port's private key.
    #[arg(long, value_name = "FILE", overrides_with = "grpc_server_key")]
    pub grpc_server_key: Option<String>,
    /// PEM file of the roots the gRPC clients' certificates chain to (mutual TLS).
    #[arg(long, value_name = "FILE", overrides_with = "grpc_root_cert")]
    pub grpc_root_cert: Option<String>,
    /// TLS on the HTTP port (the gRPC flags' counterpart; Triton has no HTTPS of its own).
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "http_use_ssl")]
    pub http_use_ssl: Option<bool>,
    /// Mutual TLS on the HTTP port; giving it turns TLS on, as the gRPC flag does.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "http_use_ssl_mutual")]
    pub http_use_ssl_mutual: Option<bool>,
    /// PEM file of the HTTP port's certificate.
    #[arg(long, value_name = "FILE", overrides_with = "http_server_cert")]
    pub http_server_cert: Option<String>,
    /// PEM file of the HTTP port's private key.
    #[arg(long, value_name = "FILE", overrides_with = "http_server_key")]
    pub http_server_key: Option<String>,
    /// PEM file of the roots the HTTP clients' certificates chain to (mutual TLS).
    #[arg(long, value_name = "FILE", overrides_with = "http_root_cert")]
    pub http_root_cert: Option<String>,
    /// TLS on the metrics port (the HTTP flags' counterpart, for scrapers that speak HTTPS).
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "metrics_use_ssl")]
    pub metrics_use_ssl: Option<bool>,
    /// Mutual TLS on the metrics port: scrapers present a certificate; giving it turns TLS on.
    #[arg(long, value_name = "BOOL", value_parser = triton_bool, overrides_with = "metrics_use_ssl_mutual")]
    pub metrics_use_ssl_mutual: Option<bool>,
    /// PEM file of the metrics port's certificate.
    #[arg(long, value_name = "FILE", overrides_with = "metrics_server_cert")]
    pub metrics_server_cert: Option<String>,
    /// PEM file of the metrics port's private key.
    #[arg(long, value_name = "FILE", overrides_with = "metrics_server_key")]
    pub metrics_server_key: Option<String>,
    /// PEM file of the roots the scrapers' certificates chain to (mutual TLS).
    #[arg(long, value_name = "FILE", overrides_with = "metrics_root_cert")]
    pub metrics_root_cert: Option<String>,
    /// Whether clients may load and unload models: none (the default, as Triton's), explicit or
    /// poll (Triton's `--model-control-mode`; none and poll refuse load and unload).
    #[arg(long, value_name = "MODE")]
    pub model_control_mode: Option<ModelControlMode>,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long)]
    pub shutdown_grace_seconds: Option<u64>,
    /// Threads that serve requests (default 1; 0: one per CPU).
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<u32>,
    /// Triton's restricted HTTP APIs: `<api>[,<api>...]:<key>=<value>`, repeatable. A request to
    /// one of the APIs without the header `<key>: <value>` is refused (403). APIs: health,
    /// metadata, inference, shared-memory, model-config, model-repository, statistics, trace,
    /// logging. Given, these replace server.http_restricted_api.
    #[arg(long, value_name = "APIS:KEY=VALUE")]
    pub http_restricted_api: Vec<String>,
    /// Triton's restricted gRPC protocols, as --http-restricted-api (the same names); the
    /// metadata key a call must carry is `triton-grpc-protocol-<key>`, and a refused call ends
    /// with UNAVAILABLE. Given, these replace server.grpc_restricted_protocol.
    #[arg(long, value_name = "PROTOCOLS:KEY=VALUE")]
    pub grpc_restricted_protocol: Vec<String>,
    /// As --http-restricted-api, with the value read from a file (a mounted Secret), read again
    /// every server.key_reload_seconds: a changed key takes effect without a restart. Given,
    /// these replace server.http_restricted_api_file.
    #[arg(long, value_name = "APIS:KEY=PATH")]
    pub http_restricted_api_file: Vec<String>,
    /// As --grpc-restricted-protocol, with the value read from a file, as
    /// --http-restricted-api-file. Given, these replace server.grpc_restricted_protocol_file.
    #[arg(long, value_name = "PROTOCOLS:KEY=PATH")]
    pub grpc_restricted_protocol_file: Vec<String>,
    /// APIs served only to callers in the pod (on loopback), on both ports: comma-separated
    /// restricted-API names (logging, trace, model-repository, ...), repeatable. Others are
    /// refused whatever key they carry. Given, these replace server.pod_only_api.
    #[arg(long, value_name = "APIS")]
    pub pod_only_api: Vec<String>,
    /// Triton's trace settings, `[<mode>,]<name>=<value>`, repeatable: `mode=opentelemetry`,
    /// `level=TIMESTAMPS`, `rate=N`, `count=N`, `opentelemetry,url=HOST:PORT/v1/traces`,
    /// `opentelemetry,resource=KEY=VALUE`, `opentelemetry,bsp_schedule_delay=MS`, ... Sampled
    /// requests become OpenTelemetry spans exported over OTLP/HTTP. Given, these replace
    /// server.trace_config.
    #[arg(long, value_name = "[MODE,]NAME=VALUE")]
    pub trace_config: Vec<String>,
    /// Deprecated, as in Triton: --trace-config triton,file=PATH.
    #[arg(long, value_name = "PATH")]
    pub trace_file: Option<String>,
    /// Deprecated, as in Triton: --trace-config level=LEVEL (repeatable).
    #[arg(long, value_name = "OFF|TIMESTAMPS|TENSORS")]
    pub trace_level: Vec<String>,
    /// Deprecated, as in Triton: --trace-config rate=N.
    #[arg(long, value_name = "N")]
    pub trace_rate: Option<String>,
    /// Deprecated, as in Triton: --trace-config count=N.
    #[arg(long, value_name = "N")]
    pub trace_count: Option<String>,
    /// Deprecated, as in Triton: --trace-config triton,log-frequency=N.
    #[arg(long, value_name = "N")]
    pub trace_log_frequency: Option<String>,
    /// Every replica's sidecar gRPC address, this one's included, the same list on every
    /// replica (comma-separated or repeated): each sequence is served by the replica that holds
    /// it, whichever one a request lands on. Given, these replace server.sequence_peers.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub sequence_peers: Vec<String>,
    /// Which of --sequence-peers is this sidecar (default: the one on this gRPC port at a
    /// loopback address, this host's name or $POD_IP).
    #[arg(long, value_name = "HOST:PORT")]
    pub sequence_self: Option<String>,
    /// In Kubernetes: the headless Service whose EndpointSlices list the replicas, instead of
    /// --sequence-peers (watched; this sidecar is $POD_IP; the namespace defaults to
    /// $POD_NAMESPACE). Given, this replaces server.sequence_peers_service.
    #[arg(long, value_name = "[NAMESPACE/]SERVICE", conflicts_with_all = ["sequence_peers", "sequence_self"])]
    pub sequence_peers_service: Option<String>,
    /// A canary's sidecars, their gRPC addresses (comma-separated or repeated): they are given
    /// --canary-traffic-percent of the clients' calls, drawn per call. Given, these replace
    /// server.canary.peers.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub canary_peers: Vec<String>,
    /// In Kubernetes, instead of --canary-peers: the headless Service whose EndpointSlices list
    /// the canary's pods (watched; the namespace defaults to $POD_NAMESPACE).
    #[arg(
        long,
        value_name = "[NAMESPACE/]SERVICE",
        conflicts_with = "canary_peers"
    )]
    pub canary_service: Option<String>,
    /// Percent of the clients' calls given to the canary, 0 to 100.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub canary_traffic_percent: Option<u8>,
    /// A file holding the canary's percent, read again every second (its value replaces
    /// --canary-traffic-percent where it is readable).
    #[arg(long, value_name = "PATH")]
    pub canary_traffic_percent_file: Option<String>,
}

impl Args {
    /// The canary's flags over `server.canary`: any of them makes one.
    fn apply_canary(&self, canary: &mut Option<infergate_config::CanarySettings>) {
        let given = !self.canary_peers.is_empty()
            || self.canary_service.is_some()
            || self.canary_traffic_percent.is_some()
            || self.canary_traffic_percent_file.is_some();
        if !given {
            return;
        }
        let canary = canary.get_or_insert_with(Default::default);
        if !self.canary_peers.is_empty() {
            canary.peers = self.canary_peers.clone();
            canary.service = None;
        }
        if let Some(v) = &self.canary_service {
            canary.service = Some(v.clone());
            canary.peers.clear();
        }
        if let Some(v) = self.canary_traffic_percent {
            canary.traffic_percent = v;
        }
        if let Some(v) = &self.canary_traffic_percent_file {
            canary.traffic_percent_file = Some(v.clone());
        }
    }

    /// Triton's deprecated trace flags as the --trace-config settings they stand for, each with
    /// Triton's warning on stderr (logging is not set up yet when flags are read).
    fn deprecated_trace_settings(&self) -> Vec<String> {
        let single = [
            ("trace-file", "triton,file", &self.trace_file),
            ("trace-rate", "rate", &self.trace_rate),
            ("trace-count", "count", &self.trace_count),
            (
                "trace-log-frequency",
                "triton,log-frequency",
                &self.trace_log_frequency,
            ),
        ];
        let levels = self.trace_level.iter().map(|v| ("trace-level", "level", v));
        let given = single
            .into_iter()
            .filter_map(|(flag, setting, value)| Some((flag, setting, value.as_ref()?)))
            .chain(levels);
        let mut settings = Vec::new();
        for (flag, setting, value) in given {
            eprintln!(
                "Warning: '--{flag}' has been deprecated and will be removed in future releases. \
                 Please use '--trace-config {setting}=<value>' instead."
            );
            settings.push(format!("{setting}={value}"));
        }
        settings
    }

    /// Applies the flags that were given on top of `config`.
    pub fn apply(&self, config: &mut SidecarConfig) {
        let s = &mut config.server;
        if let Some(v) = &self.host {
            s.host = v.clone();
        }
        if let Some(v) = self.http_port {
            s.http_port = v;
        }
        if let Some(v) = self.grpc_port {
            s.grpc_port = v;
        }
        if let Some(v) = self.metrics_port {
            s.metrics_port = v;
        }
        if let Some(v) = self.admin_port {
            s.admin_port = v;
        }
        if let Some(v) = &self.log_level {
            s.log_level = v.clone();
        }
        if let Some(v) = &self.log_format {
            s.log_format = v.clone();
        }
        s.log_info = self.log_info.or(s.log_info);
        s.log_warning = self.log_warning.or(s.log_warning);
        s.log_error = self.log_error.or(s.log_error);
        s.log_verbose = self.log_verbose.or(s.log_verbose);
        if let Some(v) = &self.log_file {
            s.log_file = Some(v.clone());
        }
        if let Some(v) = &self.server_name {
            s.name = v.clone();
        }
        if let Some(url) = &self.upstream {
            config.backend = BackendConfig::Upstream(UpstreamConfig::new(url.clone()));
        }
        if let BackendConfig::Upstream(up) = &mut config.backend {
            if let Some(v) = self.staging_shm_bytes {
                up.staging_shm_bytes = v;
            }
            if let Some(v) = self.staging_min_bytes {
                up.staging_min_bytes = v;
            }
            if let Some(v) = &self.upstream_rest {
                up.rest_url = Some(v.clone());
            }
            if let Some(v) = self.upstream_rest_max_bytes {
                up.rest_max_bytes = v;
            }
            if let Some(v) = self.upstream_rest_idle_ms {
                up.rest_idle_ms = v;
            }
        }
        if let Some(v) = self.allow_client_shm {
            s.allow_client_shm = v;
        }
        if let Some(v) = self.allow_remote_shm {
            s.allow_remote_shm = v;
        }
        apply_tls(
            &mut s.grpc_tls,
            [self.grpc_use_ssl, self.grpc_use_ssl_mutual],
            [
                &self.grpc_server_cert,
                &self.grpc_server_key,
                &self.grpc_root_cert,
            ],
        );
        apply_tls(
            &mut s.http_tls,
            [self.http_use_ssl, self.http_use_ssl_mutual],
            [
                &self.http_server_cert,
                &self.http_server_key,
                &self.http_root_cert,
            ],
        );
        apply_tls(
            &mut s.metrics_tls,
            [self.metrics_use_ssl, self.metrics_use_ssl_mutual],
            [
                &self.metrics_server_cert,
                &self.metrics_server_key,
                &self.metrics_root_cert,
            ],
        );
        if let Some(v) = self.model_control_mode {
            s.model_control_mode = v;
        }
        if let Some(v) = self.shutdown_grace_seconds {
            s.shutdown_grace_seconds = v;
        }
        if let Some(v) = self.worker_threads {
            s.worker_threads = v;
        }
        if !self.http_restricted_api.is_empty() {
            s.http_restricted_api = self.http_restricted_api.clone();
        }
        if !self.grpc_restricted_protocol.is_empty() {
            s.grpc_restricted_protocol = self.grpc_restricted_protocol.clone();
        }
        if !self.http_restricted_api_file.is_empty() {
            s.http_restricted_api_file = self.http_restricted_api_file.clone();
        }
        if !self.grpc_restricted_protocol_file.is_empty() {
            s.grpc_restricted_protocol_file = self.grpc_restricted_protocol_file.clone();
        }
        if !self.pod_only_api.is_empty() {
            s.pod_only_api = self.pod_only_api.clone();
        }
        if !self.trace_config.is_empty() {
            s.trace_config = self.trace_config.clone();
        }
        let deprecated = self.deprecated_trace_settings();
        if !deprecated.is_empty() {
            // Before the --trace-config settings, which win over them as in Triton.
            s.trace_config.splice(0..0, deprecated);
        }
        if !self.sequence_peers.is_empty() {
            s.sequence_peers = self.sequence_peers.clone();
        }
        if let Some(v) = &self.sequence_self {
            s.sequence_self = Some(v.clone());
        }
        if let Some(v) = &self.sequence_peers_service {
            s.sequence_peers_service = Some(v.clone());
        }
        self.apply_canary(&mut s.canary);
        if let Some(v) = self.max_http_body_bytes {
            config.limits.max_http_body_bytes = v;
        }
        if let Some(v) = self.max_grpc_message_bytes {
            config.limits.max_grpc_message_bytes = v;
        }
    }
}

/// A boolean as Triton's flags read one: true, on or 1, false, off or 0, in any case.
/// A port's TLS flags over its configuration: `[use_ssl, use_ssl_mutual]`, then the files
/// `[cert, key, root]`. As Triton's parser does, the mutual flag turns TLS on whatever its value.
fn apply_tls(
    tls: &mut infergate_config::TlsSettings,
    [use_ssl, mutual]: [Option<bool>; 2],
    [cert, key, root]: [&Option<String>; 3],
) {
    if let Some(on) = use_ssl {
        tls.use_ssl = on;
    }
    if let Some(on) = mutual {
        tls.use_ssl_mutual = on;
        tls.use_ssl = true;
    }
    for (flag, field) in [
        (cert, &mut tls.server_cert),
        (key, &mut tls.server_key),
        (root, &mut tls.root_cert),
    ] {
        if let Some(path) = flag {
            *field = Some(path.clone());
        }
    }
}

fn triton_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(format!("invalid value for bool option: {value}")),
    }
}

/// `--log-verbose`'s value as Triton reads it: true is 1, false 0, otherwise a number (a
/// negative one turns verbose lines off, as any level below 1 does in Triton).
fn triton_verbose_level(value: &str) -> Result<u32, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(1),
        "false" => Ok(0),
        number => number
            .parse::<i32>()
            .map(|level| level.max(0) as u32)
            .map_err(|_| format!("Invalid option value. Got {value}")),
    }
}

#[cfg(test)]
mod tests;
