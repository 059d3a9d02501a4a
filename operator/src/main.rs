//! `infergate-operator`: run the controller, print the CRD, or render the objects of an
//! InferenceService offline.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use infergate_operator::input::{self, Document};
use infergate_operator::render::{
    self, DEFAULT_SIDECAR_IMAGE, DEFAULT_STORAGE_INITIALIZER_IMAGE, KubernetesVersion,
    OperatorSettings,
};
use infergate_operator::status_client::StatusClientCertificate;
use infergate_operator::status_token::StatusToken;
use infergate_operator::{controller, crd, yaml};

#[derive(Parser, Debug)]
#[command(
    name = "infergate-operator",
    version,
    about = "Kubernetes operator for Infergate: turns an InferenceService (infergate.dev/v1alpha1) into a model server with the Infergate sidecar"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the InferenceService CustomResourceDefinition as YAML.
    Crd,
    /// Print the objects an InferenceService turns into (ConfigMap, Deployment, Service,
    /// PodDisruptionBudget) as a YAML stream, without a cluster. The input goes through the
    /// checks the API server would make (defaults, schema, CEL rules) first.
    Render {
        /// Manifest file with one or more InferenceService documents ('-' reads standard
        /// input). Other kinds in it are skipped.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// Sidecar image for resources that do not set spec.sidecar.image.
        #[arg(long, value_name = "IMAGE", env = "INFERGATE_SIDECAR_IMAGE", default_value = DEFAULT_SIDECAR_IMAGE)]
        sidecar_image: String,
        /// Image of the init container that fetches spec.model.storageUri, for resources that
        /// do not set spec.model.storage.initializerImage.
        #[arg(long, value_name = "IMAGE", env = "INFERGATE_STORAGE_INITIALIZER_IMAGE", default_value = DEFAULT_STORAGE_INITIALIZER_IMAGE)]
        storage_initializer_image: String,
        /// Namespace of the operator, which a spec.networkPolicy admits to the admin port (default:
        /// any namespace).
        #[arg(long, value_name = "NAMESPACE")]
        operator_namespace: Option<String>,
        /// Kubernetes version of the target cluster (e.g. 1.29): features it lacks are left out.
        #[arg(long, value_name = "VERSION", default_value = "1.33", value_parser = KubernetesVersion::parse)]
        kubernetes_version: KubernetesVersion,
        /// File holding the operator's status token: its SHA-256 goes into each sidecar's
        /// configuration, so the operator may read /status from outside the pod.
        #[arg(long, value_name = "FILE", env = "INFERGATE_STATUS_TOKEN_FILE")]
        status_token_file: Option<PathBuf>,
        /// PEM file of the CA of the operator's client certificate: it goes into each
        /// sidecar's configuration, so the operator may read /status over TLS from outside the
        /// pod.
        #[arg(long, value_name = "FILE")]
        status_client_ca: Option<PathBuf>,
        /// The cluster's DNS domain, for the names of the Certificates of tls.issuerRef.
        #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
        cluster_domain: String,
        /// metadata.uid to put in the owner references when the input has none (a resource
        /// that was never stored has no uid). Without it a placeholder is used: apply the output
        /// only after replacing it, or the garbage collector deletes the objects.
        #[arg(long, value_name = "UID")]
        uid: Option<String>,
    },
    /// Run the controller: watch InferenceServices and reconcile them into their objects and
    /// status. Uses the in-cluster service account, or KUBECONFIG / ~/.kube/config outside a
    /// cluster.
    Run(RunArgs),
    /// Print the RBAC rules the controller needs, as JSON: `clusterRules` (a ClusterRole) and
    /// `leaderElectionRules` (a Role in the operator's namespace).
    Rbac,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Sidecar image for resources that do not set spec.sidecar.image.
    #[arg(long, value_name = "IMAGE", env = "INFERGATE_SIDECAR_IMAGE", default_value = DEFAULT_SIDECAR_IMAGE)]
    sidecar_image: String,
    /// Image of the init container that fetches spec.model.storageUri, for resources that do not
    /// set spec.model.storage.initializerImage.
    #[arg(long, value_name = "IMAGE", env = "INFERGATE_STORAGE_INITIALIZER_IMAGE", default_value = DEFAULT_STORAGE_INITIALIZER_IMAGE)]
    storage_initializer_image: String,
    /// Kubernetes version of the cluster (features it lacks are left out of the pods).
    #[arg(long, value_name = "VERSION", env = "INFERGATE_KUBERNETES_VERSION", default_value = "1.33", value_parser = KubernetesVersion::parse)]
    kubernetes_version: KubernetesVersion,
    /// Watch only this namespace (default: every namespace).
    #[arg(long, value_name = "NAMESPACE", env = "INFERGATE_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Reconciles running at once.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// Address of the metrics (/metrics) and health (/healthz, /readyz) endpoints. `[::]` is
    /// both IPv6 and IPv4 (IPv4 alone where the system has no IPv6).
    #[arg(long, value_name = "ADDR", default_value = "[::]:8080")]
    metrics_bind_address: std::net::SocketAddr,
    /// Elect a leader through a Lease so that only one replica reconciles. Needed when more than
    /// one replica runs.
    #[arg(long, env = "INFERGATE_LEADER_ELECT")]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (default: the pod's namespace, from
    /// POD_NAMESPACE).
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "infergate-operator")]
    lease_name: String,
    /// This replica's identity in the Lease and in Events (default: the host name).
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    identity: Option<String>,
    /// Directory of the client certificate the operator presents, over TLS, to read each
    /// sidecar's /status from outside its pod: `tls.crt`, `tls.key` and `ca.crt`, as a
    /// mounted `kubernetes.io/tls` Secret has them (the chart makes one). The sidecars get the
    /// CA's certificate, never the key. The certificate is read again when it changes.
    #[arg(long, value_name = "DIR", env = "INFERGATE_STATUS_CLIENT_CERT_DIR")]
    status_client_cert_dir: Option<PathBuf>,
    /// File holding a token the operator presents instead, over plain HTTP, where it has no
    /// client certificate. The sidecars get its SHA-256, never the token. Without either, the
    /// sidecars answer /status on loopback only and the resources' status cannot say which
    /// extensions are live.
    #[arg(long, value_name = "FILE", env = "INFERGATE_STATUS_TOKEN_FILE")]
    status_token_file: Option<PathBuf>,
    /// The cluster's DNS domain, for the names of the Certificates of tls.issuerRef.
    #[arg(
        long,
        value_name = "DOMAIN",
        env = "INFERGATE_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    cluster_domain: String,
    /// Time limit of one sidecar admin probe, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    probe_timeout_ms: u64,
    /// How often a service that is not Ready is looked at again, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    requeue_seconds: u64,
    /// Longest one reconcile may take (API calls and probes) before it fails and is retried
    /// with backoff, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    reconcile_timeout_seconds: u64,
    /// Test only: probe POD_IP:PORT at HOST:PORT instead (repeatable; `*:PORT` matches any pod).
    /// For clusters whose pods are not real processes.
    #[arg(long, value_name = "FROM=TO", hide = true)]
    probe_address_map: Vec<String>,
    /// Log level (error, warn, info, debug, trace) or a tracing filter; RUST_LOG overrides.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: String,
    /// Log format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn run_controller(args: RunArgs) -> anyhow::Result<()> {
    init_logging(&args.log_level, &args.log_format);
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("infergate-operator-{}", std::process::id()));
    let leader_election_namespace = match (args.leader_elect, args.leader_election_namespace) {
        (false, _) => None,
        (true, Some(ns)) => Some(ns),
        (true, None) => {
            bail!("--leader-elect needs --leader-election-namespace (or POD_NAMESPACE)")
        }
    };
    let status_client_certificate = args
        .status_client_cert_dir
        .as_deref()
        .map(StatusClientCertificate::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--status-client-cert-dir: {e}"))?;
    let status_token = read_status_token(args.status_token_file.as_deref())?;
    if status_client_certificate.is_none() && status_token.is_none() {
        tracing::warn!(
            "no --status-client-cert-dir or --status-token-file: sidecars answer /status on loopback only, so the resources' status cannot say which extensions are live"
        );
    }
    let config = controller::RunConfig {
        settings: OperatorSettings {
            sidecar_image: args.sidecar_image,
            storage_initializer_image: args.storage_initializer_image,
            operator_namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|ns| !ns.is_empty()),
            kubernetes_version: args.kubernetes_version,
            status_token_sha256: status_token.as_ref().map(StatusToken::sha256_hex),
            status_client_ca: status_client_certificate
                .as_ref()
                .map(StatusClientCertificate::ca_pem),
            cluster_domain: args.cluster_domain,
        },
        status_token,
        status_client_certificate,
        namespace: args.namespace,
        concurrency: args.concurrency,
        metrics_addr: args.metrics_bind_address,
        leader_election_namespace,
        lease_name: args.lease_name,
        identity,
        probe_timeout: std::time::Duration::from_millis(args.probe_timeout_ms),
        probe_address_map: controller::probe::parse_address_map(&args.probe_address_map)
            .map_err(anyhow::Error::msg)?,
        requeue_not_ready: std::time::Duration::from_secs(args.requeue_seconds.max(1)),
        reconcile_timeout: std::time::Duration::from_secs(args.reconcile_timeout_seconds.max(1)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(controller::run(config))
}

fn init_logging(level: &str, format: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn read_status_token(path: Option<&Path>) -> anyhow::Result<Option<StatusToken>> {
    path.map(|p| StatusToken::read(p).map_err(anyhow::Error::msg))
        .transpose()
}

fn read_pem(path: Option<&Path>) -> anyhow::Result<Option<String>> {
    path.map(|p| {
        std::fs::read_to_string(p).with_context(|| format!("--status-client-ca {}", p.display()))
    })
    .transpose()
}

/// Owner-reference uid used by `render` when neither the input nor --uid gives one.
const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd => crd::crd_yaml()
            .map_err(anyhow::Error::msg)
            .map(|text| print!("{text}")),
        Command::Render {
            file,
            sidecar_image,
            storage_initializer_image,
            operator_namespace,
            kubernetes_version,
            status_token_file,
            status_client_ca,
            cluster_domain,
            uid,
        } => read_status_token(status_token_file.as_deref())
            .and_then(|token| Ok((token, read_pem(status_client_ca.as_deref())?)))
            .and_then(|(token, status_client_ca)| {
                let settings = OperatorSettings {
                    sidecar_image,
                    storage_initializer_image,
                    operator_namespace,
                    kubernetes_version,
                    status_token_sha256: token.as_ref().map(StatusToken::sha256_hex),
                    status_client_ca,
                    cluster_domain,
                };
                render_file(&file, &settings, uid).map(|text| print!("{text}"))
            }),
        Command::Run(args) => run_controller(args),
        Command::Rbac => {
            let rules = serde_json::json!({
                "clusterRules": controller::rbac::CLUSTER_RULES,
                "leaderElectionRules": controller::rbac::LEADER_ELECTION_RULES,
            });
            serde_json::to_string_pretty(&rules)
                .map_err(anyhow::Error::from)
                .map(|text| println!("{text}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn render_file(
    file: &Path,
    settings: &OperatorSettings,
    uid: Option<String>,
) -> anyhow::Result<String> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let docs = input::parse(&text)
        .map_err(|problems| anyhow::anyhow!("{}:\n  {}", file.display(), problems.join("\n  ")))?;
    let mut objects = Vec::new();
    let mut rendered = 0;
    for doc in docs {
        match doc {
            Document::InferenceService(mut isvc) => {
                if isvc.metadata.uid.is_none() {
                    if uid.is_none() {
                        eprintln!(
                            "note: {} has no metadata.uid; the owner references carry the placeholder {PLACEHOLDER_UID} (see --uid)",
                            isvc.metadata.name.as_deref().unwrap_or("<unnamed>")
                        );
                    }
                    isvc.metadata.uid = Some(uid.clone().unwrap_or_else(|| PLACEHOLDER_UID.into()));
                }
                let children = render::build_children(&isvc, settings)?;
                objects.extend(children.to_values()?);
                rendered += 1;
            }
            Document::Other { api_version, kind } => {
                eprintln!("note: skipping {api_version} {kind} (not an InferenceService)");
            }
        }
    }
    if rendered == 0 {
        bail!("{}: no InferenceService found", file.display());
    }
    yaml::to_stream(&objects).map_err(anyhow::Error::msg)
}
