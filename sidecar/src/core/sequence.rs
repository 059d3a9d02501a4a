//! The sequence extension: Triton's sequence-batcher semantics for models whose configuration
//! declares `sequence_batching`. Each correlation id is a sequence; a bounded number of
//! sequences hold a slot at once (the rest wait in FIFO order, the backlog); the requests of one
//! sequence run one at a time in arrival order; START (re)starts a sequence, END or an idle
//! timeout frees its slot. Control tensors (START, END, READY, CORRID) are added as the model's
//! configuration declares them.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use infergate_proto::DataType;
use infergate_proto::inference::model_config::SchedulingChoice;
use infergate_proto::inference::model_sequence_batching::StrategyChoice;
use infergate_proto::inference::model_sequence_batching::control::Kind as ControlKind;
use infergate_proto::inference::{ModelConfig, ModelSequenceBatching};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::params::{ParamValue, Parameters};
use crate::error::{Error, Result};
use crate::tensor::{Tensor, bytes_elements};

/// A correlation id. Numeric and string ids are different sequences even when they look alike.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorrelationId::Number(n) => write!(f, "{n}"),
            CorrelationId::Text(s) => write!(f, "{s}"),
        }
    }
}

/// The sequence parameters of one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SequenceParams {
    pub id: Option<CorrelationId>,
    pub start: bool,
    pub end: bool,
    /// The request's `timeout` (the schedule policy): how long its sequence may wait in the
    /// backlog for a slot. Zero: no limit.
    pub timeout: Duration,
}

impl SequenceParams {
    pub fn from_parameters(params: &Parameters) -> Result<Self> {
        let id = match params.get("sequence_id") {
            None | Some(ParamValue::Uint(0)) => None,
            Some(ParamValue::Uint(n)) => Some(CorrelationId::Number(*n)),
            Some(ParamValue::Int(n)) if *n != 0 => Some(CorrelationId::Number(*n as u64)),
            Some(ParamValue::String(s)) if s.is_empty() => None,
            Some(ParamValue::String(s)) => {
                if s.len() > 128 {
                    return Err(Error::unsupported(
                        "string correlation ID cannot be longer than 128 characters",
                    ));
                }
                Some(CorrelationId::Text(s.clone()))
            }
            Some(_) => None,
        };
        let flag = |key: &str| matches!(params.get(key), Some(ParamValue::Bool(true)));
        Ok(SequenceParams {
            id,
            start: flag("sequence_start"),
            end: flag("sequence_end"),
            timeout: Duration::from_micros(params.unsigned("timeout")),
        })
    }
}

#[derive(Clone, Debug)]
struct Control {
    name: String,
    kind: ControlKind,
    /// The datatype of the tensor: INT32, FP32 or BOOL for flags; the CORRID type for CORRID.
    datatype: DataType,
    /// Encoded false and true values for flags.
    values: [Vec<u8>; 2],
}

struct Sequence {
    /// Serializes the sequence's requests in arrival order (tokio's mutex is FIFO).
    lane: Arc<tokio::sync::Mutex<()>>,
    slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    /// When the sequence last had a request arrive or finish: the idle clock starts from the
    /// later of the two, so time spent waiting for a slot never counts as idleness.
    last_seen: Arc<Mutex<Instant>>,
    /// An END of this sequence is queued or running: requests that arrive meanwhile (calls that
    /// overtook one another on the way in) run behind it instead of being refused.
    ending: bool,
    /// Bumped by every START, so an END only forgets the sequence it ended.
    generation: u64,
    /// Its wait for a slot, while it has none.
    backlog: Arc<Backlog>,
}

/// A sequence waiting for a slot, as Triton's backlog queue: the requests that arrive meanwhile
/// with a `timeout` bound the wait (the earliest deadline wins); past it, the sequence and every
/// request of it that waits are refused, and it is forgotten. Requests that arrive once the
/// sequence has its slot are not bounded.
#[derive(Default)]
struct Backlog {
    deadline: Mutex<Option<Instant>>,
    /// Wakes the request waiting for the slot when the deadline moves closer.
    moved: tokio::sync::Notify,
    expired: std::sync::atomic::AtomicBool,
}

impl Backlog {
    /// A request with `timeout` joined the sequence while it waits: the deadline may come closer.
    fn bound(&self, now: Instant, timeout: Duration) {
        if timeout.is_zero() {
            return;
        }
        let at = now + timeout;
        let mut deadline = self.deadline.lock();
        if deadline.is_none_or(|d| at < d) {
            *deadline = Some(at);
            self.moved.notify_one();
        }
    }

    fn is_expired(&self) -> bool {
        self.expired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits for a slot until the deadline, if there is one; `None` once it has passed.
    async fn wait_for_slot(&self, slots: Arc<Semaphore>) -> Option<Result<OwnedSemaphorePermit>> {
        let acquire = slots.acquire_owned();
        tokio::pin!(acquire);
        loop {
            let deadline = *self.deadline.lock();
            let expiry = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                permit = &mut acquire => {
                    return Some(permit.map_err(|_| {
                        Error::unavailable("the sequence scheduler is shutting down")
                    }));
                }
                () = expiry => {
                    self.expired.store(true, std::sync::atomic::Ordering::Release);
                    return None;
                }
                () = self.moved.notified() => {}
            }
        }
    }
}

/// Triton's answer to the requests of a sequence whose backlog wait ran past a request's timeout.
const BACKLOG_EXPIRED: &str = "timeout of the corresponding sequence has been expired";

/// How long a request for a sequence that is not active waits for its START to arrive.
const START_GRACE: Duration = Duration::from_millis(100);

/// What a request needs of its sequence.
struct Handles {
    lane: Arc<tokio::sync::Mutex<()>>,
    slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    last_seen: Arc<Mutex<Instant>>,
    /// For an END request, the generation it ends.
    ends: Option<u64>,
    backlog: Arc<Backlog>,
}

/// Counters exported as metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct SequenceCounters {
    pub active: u64,
    pub backlog: u64,
    pub timeouts: u64,
}

pub struct Scheduler {
    model: String,
    controls: Vec<Control>,
    corrid_type: Option<DataType>,
    idle: Duration,
    slots: Arc<Semaphore>,
    total_slots: usize,
    sequences: Arc<Mutex<HashMap<CorrelationId, Sequence>>>,
    waiting: std::sync::atomic::AtomicU64,
    timeouts: std::sync::atomic::AtomicU64,
}

/// What one request needs to run: its lane and slot (held until it ends) and its controls.
pub struct Admission {
    _lane: tokio::sync::OwnedMutexGuard<()>,
    slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    last_seen: Arc<Mutex<Instant>>,
    /// For an END request: the sequence's generation, to forget once the END has run.
    ends: Option<u64>,
    sequences: Arc<Mutex<HashMap<CorrelationId, Sequence>>>,
    pub controls: Vec<Tensor>,
    pub id: CorrelationId,
}

impl Drop for Admission {
    fn drop(&mut self) {
        *self.last_seen.lock() = Instant::now();
        if let Some(generation) = self.ends {
            // Forget the sequence and free its slot, unless a START restarted it meanwhile.
            let mut sequences = self.sequences.lock();
            if sequences
                .get(&self.id)
                .is_some_and(|s| s.ending && s.generation == generation)
            {
                sequences.remove(&self.id);
                self.slot.lock().take();
            }
        }
    }
}

impl Scheduler {
    /// A scheduler for `config`, or `None` when the model is not a sequence model.
    pub fn for_model(config: &ModelConfig) -> Result<Option<Arc<Self>>> {
        let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else {
            return Ok(None);
        };
        let per_instance = match &sb.strategy_choice {
            Some(StrategyChoice::Oldest(o)) if o.max_candidate_sequences > 0 => {
                o.max_candidate_sequences as usize
            }
            _ => config.max_batch_size.max(1) as usize,
        };
        let total_slots = per_instance * super::schedule::instance_count(config);
        let idle = Duration::from_micros(if sb.max_sequence_idle_microseconds == 0 {
            1_000_000
        } else {
            sb.max_sequence_idle_microseconds
        });
        let (controls, corrid_type) = controls(&config.name, sb)?;
        let scheduler = Arc::new(Scheduler {
            model: config.name.clone(),
            controls,
            corrid_type,
            idle,
            slots: Arc::new(Semaphore::new(total_slots)),
            total_slots,
            sequences: Arc::new(Mutex::new(HashMap::new())),
            waiting: Default::default(),
            timeouts: Default::default(),
        });
        spawn_reaper(Arc::downgrade(&scheduler), idle);
        Ok(Some(scheduler))
    }

    pub fn counters(&self) -> SequenceCounters {
        use std::sync::atomic::Ordering::Relaxed;
        SequenceCounters {
            active: (self.total_slots - self.slots.available_permits()) as u64,
            backlog: self.waiting.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
        }
    }

    /// Admits one request of a sequence: checks the parameters, waits for its turn in the
    /// sequence and for a slot, and returns the control tensors to add. As in Triton, only the
    /// CORRID datatype error carries the request-id prefix.
    pub async fn admit(
        &self,
        params: &SequenceParams,
        batch_size: u64,
        batched: bool,
        request_prefix: &str,
    ) -> Result<Admission> {
        let m = &self.model;
        if let Some(want) = self.corrid_type {
            // A request without an id carries the numeric id 0.
            let got_text = matches!(params.id, Some(CorrelationId::Text(_)));
            if got_text != (want == DataType::Bytes) {
                let got = if got_text { "BYTES" } else { "UINT64" };
                return Err(Error::invalid_arg(format!(
                    "{request_prefix}sequence batching control 'CORRID' data-type is '{got}', but model '{m}' expects '{want}'"
                )));
            }
        }
        let Some(id) = params.id.clone() else {
            return Err(Error::invalid_arg(format!(
                "inference request to model '{m}' must specify a non-zero or non-empty correlation ID"
            )));
        };
        if batch_size > 1 {
            return Err(Error::invalid_arg(format!(
                "inference request to model '{m}' must specify batch-size 1 due to requirements of sequence batcher"
            )));
        }
        // Separate calls of one sequence can overtake each other on their way here (a client
        // that pipelines a sequence's requests): a request for a sequence not started yet waits a
        // moment for its START before it is refused. Only the error path pays for this.
        let deadline = Instant::now() + START_GRACE;
        let Handles {
            lane,
            slot,
            last_seen,
            ends,
            backlog,
        } = loop {
            match self.enter(params, &id) {
                Some(handles) => break handles,
                None if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                None => {
                    return Err(Error::invalid_arg(format!(
                        "inference request for sequence {id} to model '{m}' must specify the START flag on the first request of the sequence"
                    )));
                }
            }
        };
        let lane = lane.lock_owned().await;
        if backlog.is_expired() {
            return Err(Error::unavailable(BACKLOG_EXPIRED));
        }
        let needs_slot = slot.lock().is_none();
        if needs_slot {
            use std::sync::atomic::Ordering::Relaxed;
            self.waiting.fetch_add(1, Relaxed);
            let permit = backlog.wait_for_slot(self.slots.clone()).await;
            self.waiting.fetch_sub(1, Relaxed);
            let Some(permit) = permit else {
                self.forget_expired(&id, &backlog);
                return Err(Error::unavailable(BACKLOG_EXPIRED));
            };
            *slot.lock() = Some(permit?);
            *backlog.deadline.lock() = None;
        }
        let controls = self.control_tensors(params, &id, batched);
        Ok(Admission {
            _lane: lane,
            slot,
            last_seen,
            ends,
            sequences: self.sequences.clone(),
            controls,
            id,
        })
    }

    /// Finds (or, for START, creates) the sequence and takes its handles; `None` when a
    /// non-START request names a sequence that is not active.
    fn enter(&self, params: &SequenceParams, id: &CorrelationId) -> Option<Handles> {
        let mut sequences = self.sequences.lock();
        match sequences.get_mut(id) {
            Some(seq) if params.start => {
                // A new START restarts an active (or ending) sequence.
                seq.generation += 1;
                seq.ending = false;
            }
            Some(_) => {}
            None if params.start => {
                sequences.insert(
                    id.clone(),
                    Sequence {
                        lane: Arc::default(),
                        slot: Arc::default(),
                        last_seen: Arc::new(Mutex::new(Instant::now())),
                        ending: false,
                        generation: 0,
                        backlog: Arc::default(),
                    },
                );
            }
            None => return None,
        }
        let seq = sequences.get_mut(id)?;
        let now = Instant::now();
        *seq.last_seen.lock() = now;
        if params.end {
            seq.ending = true;
        }
        if seq.slot.lock().is_none() {
            seq.backlog.bound(now, params.timeout);
        }
        let ends = params.end.then_some(seq.generation);
        Some(Handles {
            lane: seq.lane.clone(),
            slot: seq.slot.clone(),
            last_seen: seq.last_seen.clone(),
            ends,
            backlog: seq.backlog.clone(),
        })
    }

    /// Forgets a sequence whose backlog wait expired (unless a new sequence took its id since),
    /// so that its next request needs a START, as in Triton.
    fn forget_expired(&self, id: &CorrelationId, backlog: &Arc<Backlog>) {
        let mut sequences = self.sequences.lock();
        if sequences
            .get(id)
            .is_some_and(|seq| Arc::ptr_eq(&seq.backlog, backlog))
        {
            sequences.remove(id);
        }
        tracing::debug!(model = %self.model, sequence = %id, "backlogged sequence timed out");
    }

    fn control_tensors(
        &self,
        params: &SequenceParams,
        id: &CorrelationId,
        batched: bool,
    ) -> Vec<Tensor> {
        let shape = if batched { vec![1, 1] } else { vec![1] };
        self.controls
            .iter()
            .map(|c| {
                let data = match c.kind {
                    ControlKind::ControlSequenceStart => {
                        c.values[usize::from(params.start)].clone()
                    }
                    ControlKind::ControlSequenceEnd => c.values[usize::from(params.end)].clone(),
                    ControlKind::ControlSequenceReady => c.values[1].clone(),
                    ControlKind::ControlSequenceCorrid => corrid_bytes(id, c.datatype),
                };
                Tensor::new(c.name.clone(), c.datatype, shape.clone(), Bytes::from(data))
            })
            .collect()
    }

    /// Frees the slots of sequences idle for longer than the timeout.
    fn reap(&self) {
        let now = Instant::now();
        let mut sequences = self.sequences.lock();
        let before = sequences.len();
        sequences.retain(|_, seq| {
            let idle = now.duration_since(*seq.last_seen.lock()) > self.idle;
            // A sequence with a request running or queued (holding a clone of its lane) is busy.
            let busy = Arc::strong_count(&seq.lane) > 1;
            if idle && !busy {
                seq.slot.lock().take();
                return false;
            }
            true
        });
        let reaped = before - sequences.len();
        if reaped > 0 {
            self.timeouts
                .fetch_add(reaped as u64, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(model = %self.model, reaped, "idle sequences released");
        }
    }
}

fn spawn_reaper(scheduler: Weak<Scheduler>, idle: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let period = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            match scheduler.upgrade() {
                Some(s) => s.reap(),
                None => return,
            }
        }
    });
}

fn corrid_bytes(id: &CorrelationId, datatype: DataType) -> Vec<u8> {
    match (id, datatype) {
        (CorrelationId::Text(s), _) => {
            let mut out = Vec::new();
            bytes_elements::push(&mut out, s.as_bytes());
            out
        }
        (CorrelationId::Number(n), dt) => {
            let width = dt.element_size().unwrap_or(8);
            n.to_le_bytes()[..width].to_vec()
        }
    }
}

fn controls(model: &str, sb: &ModelSequenceBatching) -> Result<(Vec<Control>, Option<DataType>)> {
    let mut out = Vec::new();
    let mut corrid_type = None;
    for input in &sb.control_input {
        for c in &input.control {
            let kind = ControlKind::try_from(c.kind).map_err(|_| {
                Error::invalid_arg(format!(
                    "model '{model}': unknown sequence control kind {}",
                    c.kind
                ))
            })?;
            let bad = || {
                Error::invalid_arg(format!(
                    "model '{model}': control '{}' needs exactly two false/true values",
                    input.name
                ))
            };
            let (datatype, values) = if kind == ControlKind::ControlSequenceCorrid {
                let dt = DataType::from_config(c.data_type).ok_or_else(|| {
                    Error::invalid_arg(format!("model '{model}': CORRID control needs a data_type"))
                })?;
                corrid_type = Some(dt);
                (dt, [Vec::new(), Vec::new()])
            } else if !c.int32_false_true.is_empty() {
                let v = &c.int32_false_true;
                if v.len() != 2 {
                    return Err(bad());
                }
                (
                    DataType::Int32,
                    [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                )
            } else if !c.fp32_false_true.is_empty() {
                let v = &c.fp32_false_true;
                if v.len() != 2 {
                    return Err(bad());
                }
                (
                    DataType::Fp32,
                    [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                )
            } else {
                let v = &c.bool_false_true;
                if v.len() != 2 {
                    return Err(bad());
                }
                (DataType::Bool, [vec![u8::from(v[0])], vec![u8::from(v[1])]])
            };
            out.push(Control {
                name: input.name.clone(),
                kind,
                datatype,
                values,
            });
        }
    }
    Ok((out, corrid_type))
}

#[cfg(test)]
mod tests;
