//! A loaded model: its configuration, the facts derived from it, its backend and its counters.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use infergate_proto::DataType;
use infergate_proto::inference::ModelConfig;

use super::stats::{EarlierLoads, ModelStats, Snapshot};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One input or output as the configuration declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dimensions without the batch dimension; -1 is "any size".
    pub dims: Vec<i64>,
    pub optional: bool,
}

/// What a backend receives: validated inputs (full shapes, batch dimension included).
#[derive(Clone, Copy)]
pub struct Execution<'a> {
    pub model: &'a Model,
    /// An input still in a client's region (`input_regions`) has no bytes here; only a backend
    /// that `takes_client_regions` is given such inputs.
    pub inputs: &'a [Tensor],
    /// Per input (aligned with `inputs`; missing entries are `None`), the client's
    /// shared-memory region that holds it.
    pub input_regions: &'a [Option<crate::shm::registry::ShmTarget>],
    /// Names of the outputs to produce.
    pub outputs: &'a [String],
    /// Batch size for batching models, 1 otherwise.
    pub batch_size: u64,
    /// The request's parameters (sequence ids, custom parameters), for backends that forward them.
    pub parameters: &'a super::params::Parameters,
    /// Per output (aligned with `outputs`), the client's shared-memory region it goes to, if any.
    /// A backend that writes an output there itself returns that output without bytes.
    pub output_shm: &'a [Option<crate::shm::registry::ShmTarget>],
    /// Per output (aligned with `outputs`; missing entries are 0), the top-k classes the
    /// backend's model server returns in place of the tensor, 0 for the tensor itself. Non-zero
    /// only where the backend `classifies`.
    pub classification: &'a [u32],
    /// Where the backend's spans go, when the request is traced.
    pub trace: Option<&'a crate::trace::Scope>,
}

/// Runs a model. Implementations: in-process built-in models, an upstream model server.
pub trait Backend: Send + Sync {
    fn execute<'a>(&'a self, execution: Execution<'a>) -> BoxFuture<'a, Result<Vec<Tensor>>>;

    /// Runs a request to a decoupled model (`model_transaction_policy { decoupled: true }`):
    /// sends each response into `responses` as it is produced, and returns when the request is
    /// complete. Once `responses` is closed (the client went away) nothing more is wanted: the
    /// backend should stop as soon as it can. Backends without decoupled models keep this answer.
    fn execute_decoupled<'a>(
        &'a self,
        execution: Execution<'a>,
        _responses: tokio::sync::mpsc::Sender<Produced>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(futures::future::ready(Err(Error::unsupported(format!(
            "model '{}' is decoupled, which its backend does not support",
            execution.model.name
        )))))
    }

    /// Whether inputs in clients' shared-memory regions may reach `execute` unread (the backend
    /// then reads them, or has its model server read them). Otherwise the pipeline reads them.
    fn takes_client_regions(&self) -> bool {
        false
    }

    /// Whether the backend's model server answers the classification extension itself (with
    /// the labels of its own configuration). Otherwise the pipeline classifies the tensors.
    fn classifies(&self) -> bool {
        false
    }
}

/// One response of a decoupled model.
#[derive(Debug)]
pub struct Produced {
    /// The outputs this response carries (any of the requested ones, possibly none).
    pub tensors: Vec<Tensor>,
    /// The model marked it its request's last (Triton's FINAL flag on a response with data).
    pub last: bool,
}

pub struct Model {
    pub name: String,
    pub version: i64,
    pub config: ModelConfig,
    pub max_batch_size: u32,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Class labels per output name, from each output's `label_filename`.
    pub labels: HashMap<String, Vec<String>>,
    pub backend: Arc<dyn Backend>,
    pub stats: Arc<ModelStats>,
    /// What this model's earlier loads counted, for its metrics (see [`EarlierLoads`]).
    pub earlier: EarlierLoads,
    pub platform: String,
    /// The sequence scheduler of a model whose config declares `sequence_batching`.
    pub sequencer: Option<Arc<super::sequence::Scheduler>>,
    /// The dynamic batcher of a model whose config declares `dynamic_batching`, unless it is
    /// decoupled.
    pub batcher: Option<Arc<super::batcher::Batcher>>,
    /// The queue of a decoupled model whose config declares `dynamic_batching` (the schedule
    /// policy, without batching).
    pub queue: Option<Arc<super::schedule::Queue>>,
    /// Set when the repository lets this load go (unloaded, or replaced by another load): a
    /// request holding it, whose model has not been asked for yet, looks its model up again
    /// (see `front_door::Target`).
    retired: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish()
    }
}

impl Model {
    /// Builds a model from a normalized configuration; errors name what is wrong with it.
    pub fn new(
        config: ModelConfig,
        version: i64,
        backend: Arc<dyn Backend>,
        labels: HashMap<String, Vec<String>>,
    ) -> Result<Self> {
        let spec =
            |name: &str, data_type: i32, dims: &[i64], optional: bool| -> Result<TensorSpec> {
                let datatype = DataType::from_config(data_type).ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "model '{}': tensor '{name}' has no valid data_type",
                        config.name
                    ))
                })?;
                Ok(TensorSpec {
                    name: name.to_string(),
                    datatype,
                    dims: dims.to_vec(),
                    optional,
                })
            };
        let inputs = config
            .input
            .iter()
            .map(|i| spec(&i.name, i.data_type, &i.dims, i.optional))
            .collect::<Result<Vec<_>>>()?;
        let outputs = config
            .output
            .iter()
            .map(|o| spec(&o.name, o.data_type, &o.dims, false))
            .collect::<Result<Vec<_>>>()?;
        let sequencer = super::sequence::Scheduler::for_model(&config)?;
        let instances = super::schedule::instance_count(&config);
        let decoupled = config
            .model_transaction_policy
            .as_ref()
            .is_some_and(|p| p.decoupled);
        let (batcher, queue) = if decoupled {
            (None, super::schedule::Queue::for_model(&config, instances)?)
        } else {
            (
                super::batcher::Batcher::for_model(&config, instances)?,
                None,
            )
        };
        let platform = if config.platform.is_empty() {
            config.backend.clone()
        } else {
            config.platform.clone()
        };
        Ok(Model {
            name: config.name.clone(),
            version,
            max_batch_size: u32::try_from(config.max_batch_size.max(0)).unwrap_or(0),
            inputs,
            outputs,
            labels,
            backend,
            stats: Arc::default(),
            earlier: EarlierLoads::default(),
            platform,
            sequencer,
            batcher,
            queue,
            config,
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the repository has let this load go (unloaded or replaced).
    pub fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks this load let go by the repository.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The counts behind the metrics: this load's statistics on top of its earlier loads'.
    pub fn metrics_snapshot(&self) -> Snapshot {
        self.earlier.with(&self.stats)
    }

    /// The requests pending on this model, earlier loads still finishing included.
    pub fn metrics_pending(&self) -> i64 {
        self.earlier.pending_with(&self.stats)
    }

    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|s| s.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|s| s.name == name)
    }

    /// Shape as metadata reports it: `-1` prepended for batching models.
    pub fn metadata_shape(&self, spec: &TensorSpec) -> Vec<i64> {
        let mut shape = Vec::with_capacity(spec.dims.len() + 1);
        if self.max_batch_size > 0 {
            shape.push(-1);
        }
        shape.extend_from_slice(&spec.dims);
        shape
    }

    /// Whether the model answers a request with any number of responses (only on a stream).
    pub fn is_decoupled(&self) -> bool {
        self.config
            .model_transaction_policy
            .as_ref()
            .is_some_and(|p| p.decoupled)
    }

    pub fn version_string(&self) -> String {
        self.version.to_string()
    }
}

/// Fills in what Triton's config normalization fills in.
pub fn normalize_config(config: &mut ModelConfig) {
    if config.version_policy.is_none() {
        config.version_policy = Some(infergate_proto::inference::ModelVersionPolicy {
            policy_choice: Some(
                infergate_proto::inference::model_version_policy::PolicyChoice::Latest(
                    infergate_proto::inference::model_version_policy::Latest { num_versions: 1 },
                ),
            ),
        });
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        config.backend = "infergate".to_string();
    }
    let optimization = config
        .optimization
        .get_or_insert_with(infergate_proto::inference::ModelOptimizationPolicy::default);
    optimization.input_pinned_memory.get_or_insert(
        infergate_proto::inference::model_optimization_policy::PinnedMemoryBuffer { enable: true },
    );
    optimization.output_pinned_memory.get_or_insert(
        infergate_proto::inference::model_optimization_policy::PinnedMemoryBuffer { enable: true },
    );
    if config.instance_group.is_empty() {
        config
            .instance_group
            .push(infergate_proto::inference::ModelInstanceGroup {
                name: config.name.clone(),
                kind: infergate_proto::inference::model_instance_group::Kind::Cpu as i32,
                count: 1,
                ..Default::default()
            });
    }
    // Unnamed groups are named `<model>_<index>`, as Triton names them.
    let model = config.name.clone();
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model}_{index}");
        }
        if group.count == 0 {
            group.count = 1;
        }
    }
}
