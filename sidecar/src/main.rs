//! `infergate-sidecar`: parse flags and configuration, serve, drain on SIGTERM.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use infergate_config::{SidecarConfig, yaml};
use infergate_sidecar::backend::builtin::Catalog;
use infergate_sidecar::cli::Args;
use infergate_sidecar::{allocator, log, open_files, server};

fn load_config(args: &Args) -> Result<SidecarConfig, Vec<String>> {
    let mut config = match &args.config {
        None => SidecarConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| vec![format!("{}: {e}", path.display())])?;
            yaml::from_str(&text).map_err(|e| vec![format!("{}: {e}", path.display())])?
        }
    };
    args.apply(&mut config);
    let catalog = Catalog::default();
    config
        .validate(&catalog.model_names())
        .map_err(|errors| errors.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
    Ok(config)
}

/// The activator role (`server.activator`): no model, no backend; serves until SIGTERM.
async fn run_activator(config: &SidecarConfig) -> ExitCode {
    let termination = server::Termination::listen();
    let running = match infergate_sidecar::activator::start(config).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return ExitCode::FAILURE;
        }
    };
    termination.wait().await;
    tracing::info!(
        grace_seconds = config.server.shutdown_grace_seconds,
        "Waiting for in-flight requests to complete."
    );
    running
        .shutdown(Duration::from_secs(config.server.shutdown_grace_seconds))
        .await;
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    // First, before any thread: this may start the binary again with glibc's thresholds set.
    let malloc_tuning = allocator::ensure_tuned();
    let args = Args::parse();
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("infergate-sidecar: invalid configuration:");
            for e in errors {
                eprintln!("  {e}");
            }
            return ExitCode::from(2);
        }
    };
    // One worker (the default) runs as a current-thread runtime, as linkerd2-proxy does on one
    // core: the scheduler's cross-thread machinery (work stealing, a parked worker woken
    // through its own handle) buys nothing with one thread and costs on every wake-up
    // (docs/performance/archive.md, "One worker, one thread").
    let mut builder = match config.server.worker_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        workers => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if workers > 0 {
                builder.worker_threads(workers as usize);
            }
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("infergate-sidecar: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let log = log::init(&config.server);
        match &malloc_tuning {
            allocator::Tuning::Failed(reason) => tracing::warn!(
                %reason,
                "glibc's malloc thresholds are not raised: large requests will fault their buffers in again"
            ),
            tuning => tracing::debug!(?tuning, "malloc thresholds"),
        }
        match open_files::raise() {
            Ok(raised) => {
                let needed = open_files::needed_by_ports(&config.limits);
                if raised.now < needed {
                    tracing::warn!(
                        open_file_limit = raised.now,
                        needed,
                        "the open-file limit is below what the ports' connection caps may hold; lower limits.max_connections or raise the container's limit"
                    );
                } else {
                    tracing::debug!(before = raised.before, now = raised.now, "open-file limit");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
        }
        if config.server.activator.is_some() {
            return run_activator(&config).await;
        }
        let state = match server::build_state(&config, log) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                return ExitCode::FAILURE;
            }
        };
        let termination = server::Termination::listen();
        let running = match server::start(&config, state).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "cannot start");
                return ExitCode::FAILURE;
            }
        };
        // Triton's own lines, which scripts and tools wait for in its log.
        running.log_start_summary(&config);
        tracing::info!("Started GRPCInferenceService at {}", running.addrs.grpc);
        tracing::info!("Started HTTPService at {}", running.addrs.http);
        tracing::info!("Started Metrics Service at {}", running.addrs.metrics);
        tracing::info!(
            http_addr = %running.addrs.http,
            grpc_addr = %running.addrs.grpc,
            metrics_addr = %running.addrs.metrics,
            admin_addr = %running.addrs.admin,
            models = running.state.repository.ready_models().len(),
            version = env!("CARGO_PKG_VERSION"),
            "infergate-sidecar is serving"
        );
        termination.wait().await;
        tracing::info!(
            readiness = false,
            grace_seconds = config.server.shutdown_grace_seconds,
            "Waiting for in-flight requests to complete."
        );
        running
            .shutdown(Duration::from_secs(config.server.shutdown_grace_seconds))
            .await;
        tracing::info!("stopped");
        ExitCode::SUCCESS
    })
}
