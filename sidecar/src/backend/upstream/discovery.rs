//! Learning what the upstream serves (model list, metadata, configuration) and keeping the
//! sidecar's readiness equal to the upstream's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use infergate_proto::DataType;
use infergate_proto::config::{UpstreamConfig, UpstreamModel as ModelSettings};
use infergate_proto::inference::{
    ModelConfig, ModelConfigRequest, ModelInput, ModelMetadataRequest, ModelOutput,
    RepositoryIndexRequest, ServerMetadataRequest, ServerReadyRequest,
    model_metadata_response::TensorMetadata,
};
use parking_lot::RwLock;

use super::{Upstream, UpstreamModel, upstream_error};
use crate::core::classify::parse_labels;
use crate::core::model::{Model, normalize_config};
use crate::core::repository::ModelLoader;
use crate::error::{Error, Result};
use crate::state::{SharedState, UpstreamInfo};

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
        Err(Error::unsupported(format!(
            "'{name}' is served by the upstream model server; load and unload it there"
        )))
    }
}

/// Discovers the upstream's models (retrying until it answers), installs them, then keeps the
/// sidecar's readiness equal to the upstream's for as long as the process runs.
pub async fn run_discovery(
    state: SharedState,
    upstream: Arc<Upstream>,
    config: UpstreamConfig,
    loader: Arc<UpstreamLoader>,
    info: Arc<RwLock<UpstreamInfo>>,
) {
    let interval = Duration::from_secs(config.probe_interval_seconds.max(1));
    loop {
        match discover(&upstream, &config).await {
            Ok(models) => {
                let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
                tracing::info!(upstream = %upstream.url, models = ?names, "upstream models discovered");
                record_identity(&upstream, &info).await;
                info.write().models = names.clone();
                *loader.names.write() = names;
                state.repository.install(models);
                let extensions = info.read().extensions.clone();
                if upstream.staging.maintain(&upstream, &extensions).await {
                    upstream.passthrough.forget_all();
                }
                state.health.set_ready(true);
                break;
            }
            Err(e) => {
                state.health.set_ready(false);
                tracing::warn!(upstream = %upstream.url, error = %e, "upstream discovery failed; retrying");
                tokio::time::sleep(interval).await;
            }
        }
    }
    let mut was_ready = true;
    loop {
        tokio::time::sleep(interval).await;
        let mut client = upstream.client();
        let ready = matches!(
            tokio::time::timeout(interval, client.server_ready(ServerReadyRequest {})).await,
            Ok(Ok(r)) if r.get_ref().ready
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
            if upstream.staging.maintain(&upstream, &extensions).await {
                // Registered again: the upstream restarted and forgot the clients' regions too.
                upstream.passthrough.forget_all();
            }
            upstream.passthrough.sweep(&upstream).await;
        }
        state.health.set_ready(ready);
    }
}

/// Server metadata of the upstream, for the admin status.
async fn record_identity(upstream: &Upstream, info: &RwLock<UpstreamInfo>) {
    let mut client = upstream.client();
    if let Ok(meta) = client.server_metadata(ServerMetadataRequest {}).await {
        let meta = meta.into_inner();
        let mut info = info.write();
        info.reachable = true;
        info.name = meta.name;
        info.version = meta.version;
        info.extensions = meta.extensions;
    }
}

async fn discover(upstream: &Arc<Upstream>, config: &UpstreamConfig) -> Result<Vec<Model>> {
    let mut client = upstream.client();
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
            .into_inner()
            .models
            .into_iter()
            .filter(|m| m.state.is_empty() || m.state == "READY")
            .map(|m| ModelSettings {
                name: m.name,
                ..Default::default()
            })
            .collect()
    } else {
        config.models.clone()
    };
    let mut models = Vec::with_capacity(settings.len());
    for s in settings {
        let metadata = client
            .model_metadata(ModelMetadataRequest {
                name: s.name.clone(),
                version: String::new(),
            })
            .await
            .map_err(|e| upstream_error(e, url))?
            .into_inner();
        let upstream_config = match client
            .model_config(ModelConfigRequest {
                name: s.name.clone(),
                version: String::new(),
            })
            .await
        {
            Ok(r) => r.into_inner().config,
            Err(status) => {
                tracing::debug!(model = %s.name, %status, "no model configuration upstream; synthesizing it");
                None
            }
        };
        let mut model_config = match upstream_config {
            Some(c) => c,
            None => synthesize(&s, &metadata.inputs, &metadata.outputs)?,
        };
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
        let mut model = Model::new(model_config, version, backend, labels)?;
        // The upstream runs its own sequence batcher when it has one; sequence parameters are
        // forwarded to it as they are.
        model.sequencer = None;
        if !metadata.platform.is_empty() {
            model.platform = metadata.platform;
        }
        models.push(model);
    }
    Ok(models)
}

/// A configuration from metadata alone, for upstreams without a configuration endpoint.
fn synthesize(
    settings: &ModelSettings,
    inputs: &[TensorMetadata],
    outputs: &[TensorMetadata],
) -> Result<ModelConfig> {
    let max_batch_size = settings.max_batch_size.unwrap_or(0);
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
