//! Learning what the upstream serves (model list, metadata, configuration) and keeping the
//! sidecar's readiness equal to the upstream's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use infergate_config::{SequenceMode, UpstreamConfig, UpstreamModel as ModelSettings};
use infergate_proto::DataType;
use infergate_proto::inference::model_config::SchedulingChoice;
use infergate_proto::inference::{
    ModelConfig, ModelConfigRequest, ModelInput, ModelMetadataRequest, ModelOutput,
    RepositoryIndexRequest, model_metadata_response::TensorMetadata,
};
use infergate_proto::model_config;
use parking_lot::RwLock;

use super::answer::upstream_error;
use super::connection::Upstream;
use super::model::UpstreamModel;
use crate::core::classify::parse_labels;
use crate::core::model::{Model, normalize_config};
use crate::core::repository::ModelLoader;
use crate::core::repository::Repository;
use crate::error::{Error, Result};
use crate::health::Health;

/// The repository's loader for upstream models: they are managed in the model container.
#[derive(Default)]
pub struct UpstreamLoader {
    names: RwLock<Vec<String>>,
}

impl ModelLoader for UpstreamLoader {
    fn names(&self) -> Vec<String> {
        self.names.read().clone()
    }

    fn load(&self, name: &str, _config_override: Option<&serde_json::Value>) -> Result<Model> {
        Err(model_control_refused(name))
    }

    fn allows_model_control(&self, name: &str) -> Result<()> {
        Err(model_control_refused(name))
    }
}

/// Load and unload are not passed on to the upstream: its model container manages its models,
/// and the sidecar serves what the upstream lists.
fn model_control_refused(name: &str) -> Error {
    Error::unsupported(format!(
        "'{name}' is served by the upstream model server; load and unload it there"
    ))
}

/// The upstream as last seen.
#[derive(Clone, Debug, Default)]
pub struct UpstreamInfo {
    pub url: String,
    pub reachable: bool,
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
    pub models: Vec<String>,
    /// Sequence models and who runs their sequences.
    pub sequences: Vec<(String, infergate_config::SequenceMode)>,
    /// Each model, and who batches its requests.
    pub batching: Vec<(String, BatchedBy)>,
}

/// Who forms a model's dynamic batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchedBy {
    /// The model server, under its own configuration's `dynamic_batching`.
    Upstream,
    /// The sidecar, under `dynamic_batching` set in `backend.models[].config`.
    Sidecar,
    /// Nobody: requests are sent one by one.
    None,
}

impl BatchedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchedBy::Upstream => "upstream",
            BatchedBy::Sidecar => "sidecar",
            BatchedBy::None => "none",
        }
    }
}

/// Discovers the upstream's models (retrying until it answers), installs them, then keeps the
/// sidecar's readiness equal to the upstream's for as long as the process runs.
pub async fn run_discovery(
    repository: Arc<Repository>,
    health: Arc<Health>,
    upstream: Arc<Upstream>,
    config: UpstreamConfig,
    loader: Arc<UpstreamLoader>,
    info: Arc<RwLock<UpstreamInfo>>,
) {
    let interval = Duration::from_secs(config.probe_interval_seconds.max(1));
    loop {
        match discover(&upstream, &config).await {
            Ok(Discovered {
                models,
                sequences,
                batching,
            }) => {
                let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
                tracing::info!(upstream = %upstream.url, models = ?names, "upstream models discovered");
                record_identity(&upstream, &info).await;
                {
                    let mut info = info.write();
                    info.models = names.clone();
                    info.sequences = sequences;
                    info.batching = batching;
                }
                *loader.names.write() = names;
                repository.install(models);
                repository.log_model_table();
                let extensions = info.read().extensions.clone();
                if upstream
                    .shared_pool
                    .maintain(upstream.client(), &extensions)
                    .await
                {
                    upstream.passthrough.forget_lost(upstream.link()).await;
                }
                upstream.probe_small_calls().await;
                health.set_ready(true);
                break;
            }
            Err(e) => {
                health.set_ready(false);
                tracing::warn!(upstream = %upstream.url, error = %e, "upstream discovery failed; retrying");
                tokio::time::sleep(interval).await;
            }
        }
    }
    let mut was_ready = true;
    loop {
        tokio::time::sleep(interval).await;
        let client = upstream.client();
        let ready = matches!(
            tokio::time::timeout(interval, client.server_ready()).await,
            Ok(Ok(true))
        );
        if ready != was_ready {
            tracing::warn!(upstream = %upstream.url, ready, "upstream readiness changed");
            if ready {
                // It may have come back as another version, with other extensions.
                record_identity(&upstream, &info).await;
            }
            was_ready = ready;
        }
        info.write().reachable = ready;
        if ready {
            // A restarted upstream has forgotten the staging pool: register it again.
            let extensions = info.read().extensions.clone();
            if upstream
                .shared_pool
                .maintain(upstream.client(), &extensions)
                .await
            {
                // Registered again: the upstream restarted, or a client of its own let go of
                // regions; the clients' regions it lost are registered again too.
                upstream.passthrough.forget_lost(upstream.link()).await;
            }
            upstream.passthrough.sweep(upstream.link()).await;
            upstream.probe_small_calls().await;
        }
        health.set_ready(ready);
    }
}

/// Server metadata of the upstream, for the admin status.
async fn record_identity(upstream: &Upstream, info: &RwLock<UpstreamInfo>) {
    let client = upstream.client();
    if let Ok(meta) = client.server_metadata().await {
        upstream.learned_extensions(&meta.extensions);
        let mut info = info.write();
        info.reachable = true;
        info.name = meta.name;
        info.version = meta.version;
        info.extensions = meta.extensions;
    }
}

/// Whether a repository index entry's state means the model serves. Triton writes `READY`;
/// MLServer 1.7 writes its Python enum's name, `State.READY`; an empty state (a server that
/// lists only ready models, as asked) counts as ready.
fn is_ready_state(state: &str) -> bool {
    let name = state.rsplit('.').next().unwrap_or(state);
    state.is_empty() || name.eq_ignore_ascii_case("READY")
}

/// The upstream's models, who runs the sequences of those that have them, and who batches each.
struct Discovered {
    models: Vec<Model>,
    sequences: Vec<(String, SequenceMode)>,
    batching: Vec<(String, BatchedBy)>,
}

async fn discover(upstream: &Arc<Upstream>, config: &UpstreamConfig) -> Result<Discovered> {
    let client = upstream.client();
    let url = &upstream.url;
    let settings: Vec<ModelSettings> = if config.models.is_empty() {
        let index = client
            .repository_index(RepositoryIndexRequest {
                repository_name: String::new(),
                ready: true,
            })
            .await
            .map_err(|s| {
                Error::unavailable(format!(
                    "the upstream does not list its models ({}); name them in backend.models",
                    s.message()
                ))
            })?;
        index
            .models
            .into_iter()
            .filter(|m| is_ready_state(&m.state))
            .map(|m| ModelSettings {
                name: m.name,
                ..Default::default()
            })
            .collect()
    } else {
        config.models.clone()
    };
    let mut models = Vec::with_capacity(settings.len());
    let mut sequences = Vec::new();
    let mut batching = Vec::new();
    for s in settings {
        let metadata = client
            .model_metadata(ModelMetadataRequest {
                name: s.name.clone(),
                version: String::new(),
            })
            .await
            .map_err(|e| upstream_error(e, url))?;
        let upstream_config = match client
            .model_config(ModelConfigRequest {
                name: s.name.clone(),
                version: String::new(),
            })
            .await
        {
            Ok(r) => r.config,
            Err(status) => {
                tracing::debug!(model = %s.name, %status, "no model configuration upstream; synthesizing it");
                None
            }
        };
        let upstream_batches_sequences =
            upstream_config.as_ref().is_some_and(has_sequence_batching);
        let upstream_batches = upstream_config.as_ref().is_some_and(has_dynamic_batching);
        let mut model_config = match upstream_config {
            Some(c) => c,
            None => synthesize(&s, &metadata.inputs, &metadata.outputs)?,
        };
        if let Some(overlay) = &s.config {
            model_config = model_config::overlay(&model_config, overlay).map_err(|e| {
                Error::invalid_arg(format!("model '{}': backend.models config: {e}", s.name))
            })?;
        }
        model_config.name = s.name.clone();
        normalize_config(&mut model_config);
        let mut labels = HashMap::new();
        for (output, path) in &s.labels {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::invalid_arg(format!("model '{}': label file '{path}': {e}", s.name))
            })?;
            labels.insert(output.clone(), parse_labels(&text));
        }
        let version_text = metadata
            .versions
            .last()
            .cloned()
            .unwrap_or_else(|| "1".to_string());
        let version = version_text.parse::<i64>().unwrap_or(1);
        let backend = Arc::new(UpstreamModel::new(
            upstream.clone(),
            s.name.clone(),
            version_text,
        ));
        let sequence_mode = sequence_mode(&model_config, &s, upstream_batches_sequences);
        let mut model = Model::new(model_config, version, backend, labels)?;
        // Sequence parameters are always forwarded. Only in `sidecar` mode does the sidecar
        // schedule the sequences and add the control tensors to the inputs it sends.
        if let Some(mode) = sequence_mode {
            sequences.push((s.name.clone(), mode));
        }
        if sequence_mode != Some(SequenceMode::Sidecar) {
            model.sequencer = None;
        }
        // A model server with a dynamic batcher of its own for the model batches and queues the
        // requests it is sent under its configuration's policies (`priority` and `timeout` go
        // with each request); a second queue here would hold back the batches it forms. For any
        // other, `dynamic_batching` set in `backend.models[].config` is the sidecar's batcher.
        if upstream_batches {
            model.batcher = None;
        }
        model.queue = None;
        batching.push((
            s.name.clone(),
            if upstream_batches {
                BatchedBy::Upstream
            } else if model.batcher.is_some() {
                BatchedBy::Sidecar
            } else {
                BatchedBy::None
            },
        ));
        if !metadata.platform.is_empty() {
            model.platform = metadata.platform;
        }
        models.push(model);
    }
    Ok(Discovered {
        models,
        sequences,
        batching,
    })
}

/// Who runs a model's sequences: none for a model without `sequence_batching`; else the
/// setting, or by default the upstream when its own configuration has a sequence batcher and
/// the sidecar otherwise.
fn sequence_mode(
    config: &ModelConfig,
    settings: &ModelSettings,
    upstream_batches_sequences: bool,
) -> Option<SequenceMode> {
    has_sequence_batching(config).then(|| {
        settings.sequence.unwrap_or(if upstream_batches_sequences {
            SequenceMode::Upstream
        } else {
            SequenceMode::Sidecar
        })
    })
}

fn has_dynamic_batching(config: &ModelConfig) -> bool {
    matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::DynamicBatching(_))
    )
}

fn has_sequence_batching(config: &ModelConfig) -> bool {
    matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::SequenceBatching(_))
    )
}

/// A configuration from metadata alone, for upstreams without a configuration endpoint.
fn synthesize(
    settings: &ModelSettings,
    inputs: &[TensorMetadata],
    outputs: &[TensorMetadata],
) -> Result<ModelConfig> {
    // The batch size decides which metadata dimension is the batch one; it may be given in the
    // configuration overlay instead of on its own.
    let overlay_batch = settings
        .config
        .as_ref()
        .and_then(|c| c.get("max_batch_size"))
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|v| u32::try_from(v).ok());
    let max_batch_size = settings.max_batch_size.or(overlay_batch).unwrap_or(0);
    let dims = |t: &TensorMetadata| -> Vec<i64> {
        if max_batch_size > 0 && !t.shape.is_empty() {
            t.shape[1..].to_vec()
        } else {
            t.shape.clone()
        }
    };
    let data_type = |t: &TensorMetadata| -> Result<i32> {
        DataType::from_protocol(&t.datatype)
            .map(|d| d.to_config() as i32)
            .ok_or_else(|| {
                Error::invalid_arg(format!(
                    "model '{}': tensor '{}' has datatype '{}'",
                    settings.name, t.name, t.datatype
                ))
            })
    };
    Ok(ModelConfig {
        name: settings.name.clone(),
        max_batch_size: i32::try_from(max_batch_size).unwrap_or(i32::MAX),
        input: inputs
            .iter()
            .map(|t| {
                Ok(ModelInput {
                    name: t.name.clone(),
                    data_type: data_type(t)?,
                    dims: dims(t),
                    ..Default::default()
                })
            })
            .collect::<Result<_>>()?,
        output: outputs
            .iter()
            .map(|t| {
                let label_filename = settings.labels.get(&t.name).cloned().unwrap_or_default();
                Ok(ModelOutput {
                    name: t.name.clone(),
                    data_type: data_type(t)?,
                    dims: dims(t),
                    label_filename,
                    ..Default::default()
                })
            })
            .collect::<Result<_>>()?,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ready_states_of_triton_and_mlserver() {
        use super::is_ready_state;
        for ready in ["READY", "State.READY", "ready", ""] {
            assert!(is_ready_state(ready), "{ready}");
        }
        for not_ready in [
            "UNAVAILABLE",
            "State.LOADING",
            "UNLOADING",
            "State.UNAVAILABLE",
        ] {
            assert!(!is_ready_state(not_ready), "{not_ready}");
        }
    }

    use super::*;

    fn tensor(name: &str, datatype: &str, shape: &[i64]) -> TensorMetadata {
        TensorMetadata {
            name: name.into(),
            datatype: datatype.into(),
            shape: shape.to_vec(),
        }
    }

    fn settings(config: serde_json::Value) -> ModelSettings {
        ModelSettings {
            name: "seq".into(),
            config: Some(config),
            ..Default::default()
        }
    }

    #[test]
    fn the_overlay_batch_size_decides_the_batch_dimension() {
        let s = settings(serde_json::json!({"max_batch_size": 8}));
        let config = synthesize(
            &s,
            &[tensor("INPUT", "INT32", &[-1, 1])],
            &[tensor("OUTPUT", "INT32", &[-1, 1])],
        )
        .unwrap();
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![1]);
        assert_eq!(config.output[0].dims, vec![1]);
    }

    #[test]
    fn sequence_batching_from_the_overlay_is_run_by_the_sidecar_by_default() {
        let mut s = settings(serde_json::json!({
            "max_batch_size": 8,
            "sequence_batching": {
                "control_input": [{"name": "START", "control": [
                    {"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}
                ]}]
            }
        }));
        let base = synthesize(&s, &[tensor("INPUT", "INT32", &[-1, 1])], &[]).unwrap();
        let config = model_config::overlay(&base, s.config.as_ref().unwrap()).unwrap();
        assert_eq!(
            sequence_mode(&config, &s, false),
            Some(SequenceMode::Sidecar)
        );
        assert_eq!(
            sequence_mode(&config, &s, true),
            Some(SequenceMode::Upstream)
        );
        s.sequence = Some(SequenceMode::Parameters);
        assert_eq!(
            sequence_mode(&config, &s, true),
            Some(SequenceMode::Parameters)
        );
        assert_eq!(sequence_mode(&base, &s, true), None);
    }
}
