//! `infergate-operator`: print the CRD, render the objects of an InferenceService offline, and
//! (in a later release) run the controller.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use infergate_operator::input::{self, Document};
use infergate_operator::render::{
    self, DEFAULT_SIDECAR_IMAGE, KubernetesVersion, OperatorSettings,
};
use infergate_operator::{crd, yaml};

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
        /// Kubernetes version of the target cluster (e.g. 1.29): features it lacks are left out.
        #[arg(long, value_name = "VERSION", default_value = "1.33", value_parser = KubernetesVersion::parse)]
        kubernetes_version: KubernetesVersion,
        /// metadata.uid to put in the owner references when the input has none (a resource
        /// that was never stored has no uid). Without it a placeholder is used: apply the output
        /// only after replacing it, or the garbage collector deletes the objects.
        #[arg(long, value_name = "UID")]
        uid: Option<String>,
    },
    /// Run the controller. NOT IMPLEMENTED YET: the controller comes in a later release; this
    /// exits with status 2.
    Run,
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
            kubernetes_version,
            uid,
        } => {
            let settings = OperatorSettings {
                sidecar_image,
                kubernetes_version,
            };
            render_file(&file, &settings, uid).map(|text| print!("{text}"))
        }
        Command::Run => {
            eprintln!(
                "error: `infergate-operator run` is not implemented yet: the controller comes in a later release. \
                 Use `infergate-operator render -f FILE` to see the objects it will create."
            );
            return ExitCode::from(2);
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
