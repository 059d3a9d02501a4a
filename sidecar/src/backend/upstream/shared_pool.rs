//! The staging pool as shared with the upstream: registering the sidecar's shared-memory pool
//! (`shm/staging.rs`) with the model container (again whenever it lost it, e.g. after a restart),
//! and deciding per request which tensors travel through it instead of the socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use infergate_config::UpstreamConfig;
use infergate_proto::inference::{
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryStatusRequest,
    SystemSharedMemoryUnregisterRequest,
};
use parking_lot::RwLock;

use super::transport::Transport;
use crate::core::model::Execution;
use crate::error::Error;
use crate::shm::staging::{Slot, StagingPool};
use crate::tensor::shape::fixed_byte_size;

/// Where the pool stands with the upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolState {
    /// Not in use: turned off, or the object could not be created.
    Off(String),
    /// Created, not registered with the upstream yet (or the upstream lost it).
    Pending,
    /// Registered; large tensors go through it.
    Active,
    /// The upstream refused or cannot use it; tensors go over the socket.
    Unusable(String),
}

/// Counters for the metrics endpoint: proof of which path the bytes took.
#[derive(Debug, Default)]
pub struct PoolCounters {
    pub input_bytes: AtomicU64,
    pub output_bytes: AtomicU64,
    /// Tensors sent over the socket because the pool had no free slot at that moment.
    pub pool_full: AtomicU64,
    /// Registrations with the upstream (the first, then one per loss).
    pub registrations: AtomicU64,
}

/// What the admin endpoint reports: never the pool's key, which would let a client name it.
#[derive(Clone, Debug)]
pub struct PoolStatus {
    pub state: &'static str,
    pub reason: String,
    pub byte_size: u64,
    pub in_use: u64,
    pub min_bytes: u64,
}

/// The staging pool as the upstream backend uses it: its registration with the upstream, its
/// counters, and each request's plan of slots.
pub struct SharedPool {
    pool: Option<Arc<StagingPool>>,
    min_bytes: u64,
    state: RwLock<PoolState>,
    pub counters: PoolCounters,
}

impl SharedPool {
    /// Creates the pool the configuration asks for; a failure leaves it off, with the reason.
    pub fn new(config: &UpstreamConfig) -> Self {
        let off = |reason: String| SharedPool {
            pool: None,
            min_bytes: config.staging_min_bytes,
            state: RwLock::new(PoolState::Off(reason)),
            counters: PoolCounters::default(),
        };
        if config.staging_shm_bytes == 0 {
            return off("turned off (staging_shm_bytes is 0)".to_string());
        }
        // One pool per process, under a name no client can guess; what a killed predecessor
        // with this pid left goes first.
        let pid = std::process::id();
        crate::shm::staging::unlink_predecessors(pid);
        let created = crate::shm::staging::pool_key(pid)
            .map_err(|e| Error::internal(format!("cannot name the staging pool: {e}")))
            .and_then(|key| StagingPool::create(&key, config.staging_shm_bytes));
        match created {
            Ok(pool) => {
                tracing::info!(bytes = config.staging_shm_bytes, "staging pool created");
                SharedPool {
                    pool: Some(pool),
                    min_bytes: config.staging_min_bytes,
                    state: RwLock::new(PoolState::Pending),
                    counters: PoolCounters::default(),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "staging pool unavailable; tensors go over the socket");
                off(e.message)
            }
        }
    }

    /// The region name (and `/dev/shm` key) the upstream knows the pool by.
    pub fn region(&self) -> Option<&str> {
        self.pool.as_ref().map(|p| p.key())
    }

    /// The pool's object, which clients may not register.
    pub fn object_id(&self) -> Option<crate::shm::region::ObjectId> {
        self.pool.as_ref().and_then(|p| p.object_id().ok())
    }

    /// Whether the upstream has the pool registered (and so sees this container's `/dev/shm`).
    pub fn is_active(&self) -> bool {
        *self.state.read() == PoolState::Active
    }

    /// The pool, when requests may use it.
    fn active_pool(&self) -> Option<&Arc<StagingPool>> {
        match *self.state.read() {
            PoolState::Active => self.pool.as_ref(),
            _ => None,
        }
    }

    fn set_state(&self, next: PoolState) {
        let mut state = self.state.write();
        if *state != next {
            match &next {
                PoolState::Active => {
                    tracing::info!(region = ?self.region(), "staging pool registered with the upstream")
                }
                PoolState::Unusable(reason) => tracing::warn!(%reason, "staging pool not usable"),
                _ => {}
            }
            *state = next;
        }
    }

    /// The upstream answered that it does not know the pool: it restarted. Requests go over the
    /// socket until `maintain` registers it again.
    pub fn lost(&self) {
        if self.pool.is_some() {
            self.set_state(PoolState::Pending);
        }
    }

    pub fn status(&self) -> PoolStatus {
        let (state, reason) = match &*self.state.read() {
            PoolState::Off(r) => ("Disabled", r.clone()),
            PoolState::Pending => (
                "Pending",
                "not registered with the upstream yet".to_string(),
            ),
            PoolState::Active => ("Active", String::new()),
            PoolState::Unusable(r) => ("Degraded", r.clone()),
        };
        PoolStatus {
            state,
            reason,
            byte_size: self.pool.as_ref().map_or(0, |p| p.byte_size()),
            in_use: self.pool.as_ref().map_or(0, |p| p.in_use()),
            min_bytes: self.min_bytes,
        }
    }

    /// Whether the upstream has opened the pool: `Some(true)` proves the model container sees this
    /// container's `/dev/shm`; `None` until that was tried.
    pub fn shared_with_upstream(&self) -> Option<bool> {
        match &*self.state.read() {
            PoolState::Active => Some(true),
            PoolState::Unusable(_) => Some(false),
            _ => None,
        }
    }

    /// Keeps the pool registered with the upstream. Called after discovery and on every probe:
    /// a registered pool costs one status call; a lost or never registered one is (re)registered,
    /// dropping first any stale registration of the same name (a previous process of this pod).
    /// Returns true when it registered the pool (first time or again).
    pub async fn maintain(&self, client: &Transport, extensions: &[String]) -> bool {
        let Some(pool) = &self.pool else { return false };
        if !extensions.iter().any(|e| e == "system_shared_memory") {
            self.set_state(PoolState::Unusable(
                "the upstream does not offer system_shared_memory".to_string(),
            ));
            return false;
        }
        let name = pool.key().to_string();
        if *self.state.read() == PoolState::Active {
            let status = client
                .system_shared_memory_status(SystemSharedMemoryStatusRequest { name: name.clone() })
                .await;
            match status {
                Ok(r) => {
                    let held = r.regions.get(&name).is_some_and(|s| {
                        s.key.trim_start_matches('/') == name && s.byte_size == pool.byte_size()
                    });
                    if held {
                        return false;
                    }
                }
                Err(s) if s.code() == tonic::Code::NotFound => {}
                // Unreachable: readiness reports it; registration is retried on the next probe.
                Err(_) => return false,
            }
            tracing::warn!("the upstream lost the staging pool; registering it again");
            self.set_state(PoolState::Pending);
        }
        let _ = client
            .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
                name: name.clone(),
            })
            .await;
        let register = client
            .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                name: name.clone(),
                key: format!("/{name}"),
                offset: 0,
                byte_size: pool.byte_size(),
            })
            .await;
        match register {
            Ok(_) => {
                self.counters.registrations.fetch_add(1, Ordering::Relaxed);
                self.set_state(PoolState::Active);
                return true;
            }
            Err(s) if s.code() == tonic::Code::Unavailable => self.set_state(PoolState::Pending),
            // The reason is shown in /status: the pool's name is left out of it.
            Err(s) => self.set_state(PoolState::Unusable(format!(
                "the upstream could not register the staging pool ({}: {}); does the model container share this container's /dev/shm, with the same user or group?",
                s.code(),
                s.message().replace(&name, "<staging pool>")
            ))),
        }
        false
    }

    /// At shutdown: the upstream forgets the pool and its name leaves `/dev/shm`. Best effort;
    /// a killed process leaves the object to its successor (same pid) or to the pod's end.
    pub async fn release(&self, client: &Transport) {
        let Some(pool) = &self.pool else { return };
        self.set_state(PoolState::Off("shutting down".to_string()));
        let unregister =
            client.system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
                name: pool.key().to_string(),
            });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), unregister).await;
        pool.unlink();
    }

    /// Slots for the request's inputs and outputs that are large enough to be worth it.
    /// Inputs are copied into their slots here. An empty plan when the pool is not active.
    /// Outputs going to a client's region (`client_outputs`), and classified ones, get no slot.
    pub fn plan(
        &self,
        execution: &Execution<'_>,
        estimate_variable_outputs: bool,
        client_outputs: &[Option<ClientWindow>],
    ) -> Plan {
        let Some(pool) = self.active_pool() else {
            return Plan::default();
        };
        let mut plan = Plan::default();
        let largest_input = largest_input(execution);
        for tensor in execution.inputs.iter() {
            let len = tensor.data.len() as u64;
            let slot = if len >= self.min_bytes.max(1) {
                self.take(pool, len)
                    .filter(|slot| slot.write(&tensor.data).is_ok())
            } else {
                None
            };
            if slot.is_some() {
                self.counters.input_bytes.fetch_add(len, Ordering::Relaxed);
            }
            plan.inputs.push(slot);
        }
        for (i, name) in execution.outputs.iter().enumerate() {
            // Classes come back as text of no size known ahead: over the socket.
            let classified = execution.classification.get(i).is_some_and(|&k| k > 0);
            if classified || client_outputs.get(i).is_some_and(Option::is_some) {
                plan.outputs.push(None);
                continue;
            }
            let size = output_size(execution, name, estimate_variable_outputs, largest_input);
            let slot = match size {
                Some(len) if len >= self.min_bytes.max(1) => self.take(pool, len),
                _ => None,
            };
            if slot.is_some() && size.is_some_and(|_| !fixed_output(execution, name)) {
                plan.estimated_outputs = true;
            }
            plan.outputs.push(slot);
        }
        plan
    }

    fn take(&self, pool: &Arc<StagingPool>, len: u64) -> Option<Slot> {
        let slot = pool.slot(len);
        if slot.is_none() {
            self.counters.pool_full.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    pub fn count_output(&self, len: u64) {
        self.counters.output_bytes.fetch_add(len, Ordering::Relaxed);
    }
}

/// A window of a client's region that the upstream reads (an input) or writes (an output) itself:
/// the upstream's name for the region, and the offset and size the client gave.
#[derive(Clone, Debug)]
pub struct ClientWindow {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Slots of one request, by input and by requested output (`None`: over the socket). Dropping the
/// plan returns every slot to the pool; the upstream call holds it until the upstream answers.
#[derive(Debug, Default)]
pub struct Plan {
    pub inputs: Vec<Option<Slot>>,
    pub outputs: Vec<Option<Slot>>,
    /// Some output slot was sized by estimate (variable dims), so the upstream may find it small.
    pub estimated_outputs: bool,
}

impl Plan {
    pub fn input(&self, index: usize) -> Option<&Slot> {
        self.inputs.get(index).and_then(Option::as_ref)
    }

    pub fn output(&self, index: usize) -> Option<&Slot> {
        self.outputs.get(index).and_then(Option::as_ref)
    }

    /// Keeps every slot out of the pool for good (`Slot::retire`); returns the bytes retired.
    pub fn retire(self) -> u64 {
        let slots = self.inputs.into_iter().chain(self.outputs).flatten();
        slots.fold(0, |sum, slot| {
            let len = slot.len();
            slot.retire();
            sum + len
        })
    }

    /// Sends every output over the socket (after the upstream found an estimated slot too small).
    pub fn without_outputs(mut self) -> Self {
        self.outputs.iter_mut().for_each(|slot| *slot = None);
        self.estimated_outputs = false;
        self
    }
}

/// The largest input's size, wherever it is (here, or in a client's region the upstream reads):
/// the guess for outputs whose size the configuration does not tell.
pub fn largest_input(execution: &Execution<'_>) -> u64 {
    execution
        .inputs
        .iter()
        .enumerate()
        .map(|(i, tensor)| {
            // An input the upstream reads from the client's region has no bytes here.
            let in_region = execution.input_regions.get(i).and_then(Option::as_ref);
            in_region.map_or(tensor.data.len() as u64, |r| r.byte_size)
        })
        .max()
        .unwrap_or(0)
}

/// The bytes an output is expected to take, for choosing how a call travels: by configuration
/// where it tells, else as large as the largest input (BYTES outputs included).
pub fn expected_output_bytes(execution: &Execution<'_>, name: &str, largest_input: u64) -> u64 {
    output_size(execution, name, true, largest_input).unwrap_or(largest_input)
}

/// Whether the output's byte size follows from the configuration alone.
fn fixed_output(execution: &Execution<'_>, name: &str) -> bool {
    execution
        .model
        .output(name)
        .is_some_and(|spec| spec.dims.iter().all(|&d| d >= 0))
}

/// The bytes an output will need: exact from the configuration when its dims are fixed; for
/// variable dims, when allowed, the largest input's size (right for the common shape-preserving
/// models; a wrong guess costs one retry over the socket). BYTES outputs are never staged: their
/// size is unknown until produced.
fn output_size(
    execution: &Execution<'_>,
    name: &str,
    estimate_variable: bool,
    largest_input: u64,
) -> Option<u64> {
    let spec = execution.model.output(name)?;
    // BYTES: never staged.
    spec.datatype.element_size()?;
    if spec.dims.iter().all(|&d| d >= 0) {
        let batch = if execution.model.max_batch_size > 0 {
            execution.batch_size
        } else {
            1
        };
        fixed_byte_size(spec.datatype, &spec.dims)?.checked_mul(batch)
    } else if estimate_variable {
        Some(largest_input)
    } else {
        None
    }
}
