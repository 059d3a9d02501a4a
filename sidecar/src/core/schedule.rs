//! The schedule_policy extension: a dynamic batcher's priority levels and queue policies
//! ([`Policies`], which the batcher of `core/batcher.rs` applies), and the queue of a decoupled
//! model whose configuration declares `dynamic_batching` ([`Queue`]): it runs at most as many
//! requests at once as it has instances, one by one; the others wait. The rules are Triton's
//! (its `PriorityQueue` in `scheduler_utils.cc`):
//!
//! - a request's `priority` parameter picks its level: 1 is the highest; 0, none, or a level past
//!   `priority_levels` means `default_priority_level`;
//! - each level has its policy (`priority_queue_policy[level]`, else `default_queue_policy`): at
//!   most `max_queue_size` requests wait (0: no bound), and one waiting longer than its timeout
//!   is rejected (UNAVAILABLE "Request timeout expired") or, with `timeout_action: DELAY`, goes
//!   behind every request of its level that has not timed out;
//! - the timeout is the policy's `default_timeout_microseconds`; with `allow_timeout_override`,
//!   a request's `timeout` parameter replaces it only when shorter (Triton's rule, so a policy
//!   without a default timeout ignores the parameter);
//! - a freed instance takes the oldest request of the highest level that has one.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use infergate_proto::inference::model_config::SchedulingChoice;
use infergate_proto::inference::model_queue_policy::TimeoutAction;
use infergate_proto::inference::{ModelConfig, ModelDynamicBatching, ModelQueuePolicy};
use parking_lot::Mutex;
use tokio::sync::oneshot;
// The runtime's clock, so that timeouts follow it (and tests can pause it).
use tokio::time::Instant;

use super::params::Parameters;
use crate::error::{Error, Result};

/// The word of a request that waited past its timeout under a REJECT policy.
pub const TIMEOUT_EXPIRED: &str = "Request timeout expired";

/// Why a request did not get an instance. Triton counts the two apart: a full queue refuses
/// the request before it is queued (counted neither in the statistics nor in the metrics), a
/// timeout fails a queued request (a failed inference, REJECTED in the metrics).
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// Its level already held `max_queue_size` requests; the request's log prefix.
    QueueFull(String),
    /// It waited past its timeout under a REJECT policy.
    TimedOut,
    /// The queue lost track of it (a defect).
    Lost,
}

impl From<Refused> for Error {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::QueueFull(prefix) => {
                Error::unavailable(format!("{prefix}Exceeds maximum queue size"))
            }
            Refused::TimedOut => Error::unavailable(TIMEOUT_EXPIRED),
            Refused::Lost => Error::internal("a queued request lost its place"),
        }
    }
}

type Admitted = std::result::Result<Permit, Refused>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Policy {
    pub(super) delay_on_timeout: bool,
    default_timeout: Duration,
    allow_override: bool,
    /// 0: no bound.
    pub(super) max_queue_size: usize,
}

impl From<&ModelQueuePolicy> for Policy {
    fn from(p: &ModelQueuePolicy) -> Self {
        Policy {
            delay_on_timeout: p.timeout_action == TimeoutAction::Delay as i32,
            default_timeout: Duration::from_micros(p.default_timeout_microseconds),
            allow_override: p.allow_timeout_override,
            max_queue_size: p.max_queue_size as usize,
        }
    }
}

impl Policy {
    /// When a request that starts waiting at `now` times out, if it does.
    pub(super) fn deadline(&self, now: Instant, requested: Duration) -> Option<Instant> {
        let mut timeout = self.default_timeout;
        if self.allow_override && !requested.is_zero() && requested < timeout {
            timeout = requested;
        }
        (!timeout.is_zero()).then(|| now + timeout)
    }
}

/// What a waiting request is told.
#[derive(Debug)]
enum Turn {
    /// An instance is its own now (handed over by the request that freed it).
    Run,
    /// It waited past its timeout under a REJECT policy.
    Expired,
}

struct Waiter {
    ticket: u64,
    deadline: Option<Instant>,
    turn: oneshot::Sender<Turn>,
}

/// One priority level's requests: those in arrival order, then those delayed by a timeout.
#[derive(Default)]
struct Level {
    waiting: VecDeque<Waiter>,
    delayed: VecDeque<Waiter>,
}

impl Level {
    fn len(&self) -> usize {
        self.waiting.len() + self.delayed.len()
    }
}

#[derive(Default)]
struct State {
    running: usize,
    levels: BTreeMap<u64, Level>,
    next_ticket: u64,
}

/// Where a request waits in a queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    pub(super) level: u64,
    /// The request's own timeout (zero: none).
    pub(super) timeout: Duration,
}

/// A dynamic batcher's priority levels and the queue policy of each: where a request waits and
/// under which rules. Shared by the queue below and by the batcher (`core/batcher.rs`).
#[derive(Debug)]
pub struct Policies {
    priority_levels: u64,
    default_level: u64,
    default_policy: Policy,
    policies: HashMap<u64, Policy>,
}

impl Policies {
    /// The levels and policies of `batching`; a configuration Triton refuses is refused in its
    /// words.
    pub fn new(model: &str, batching: &ModelDynamicBatching) -> Result<Self> {
        check(model, batching)?;
        Ok(Policies {
            priority_levels: batching.priority_levels,
            default_level: batching.default_priority_level,
            default_policy: Policy::from(&batching.default_queue_policy.unwrap_or_default()),
            // Without priority levels Triton has one queue, under the default policy alone.
            policies: batching
                .priority_queue_policy
                .iter()
                .filter(|_| batching.priority_levels > 0)
                .map(|(level, policy)| (*level, Policy::from(policy)))
                .collect(),
        })
    }

    /// Where a request waits: the level its `priority` parameter puts it in, and the `timeout`
    /// it asks for. `None` (parameters that are not scheduling controls): the default level.
    pub fn place(&self, parameters: Option<&Parameters>) -> Place {
        let number = |key: &str| parameters.map_or(0, |p| p.unsigned(key));
        let asked = number("priority");
        let level = if asked == 0 || asked > self.priority_levels {
            self.default_level
        } else {
            asked
        };
        Place {
            level,
            timeout: Duration::from_micros(number("timeout")),
        }
    }

    pub(super) fn policy(&self, level: u64) -> Policy {
        self.policies
            .get(&level)
            .copied()
            .unwrap_or(self.default_policy)
    }
}

pub struct Queue {
    instances: usize,
    policies: Policies,
    state: Mutex<State>,
}

/// One of the model's instances, held while the request runs; dropping it hands the instance to
/// the next waiting request.
pub struct Permit {
    queue: Arc<Queue>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.queue.release();
    }
}

impl Queue {
    /// The queue of a model whose configuration declares `dynamic_batching`, `None` for any
    /// other; a configuration Triton refuses is refused in its words.
    pub fn for_model(config: &ModelConfig, instances: usize) -> Result<Option<Arc<Self>>> {
        let Some(SchedulingChoice::DynamicBatching(batching)) = &config.scheduling_choice else {
            return Ok(None);
        };
        Ok(Some(Arc::new(Queue {
            instances: instances.max(1),
            policies: Policies::new(&config.name, batching)?,
            state: Mutex::default(),
        })))
    }

    /// Where a request waits (see [`Policies::place`]).
    pub fn place(&self, parameters: Option<&Parameters>) -> Place {
        self.policies.place(parameters)
    }

    fn policy(&self, level: u64) -> Policy {
        self.policies.policy(level)
    }

    /// Waits for an instance: at once when one is free and no one is waiting, else in the
    /// request's level. `request_prefix` begins the queue-full error, as Triton's does.
    pub async fn admit(self: &Arc<Self>, place: Place, request_prefix: &str) -> Admitted {
        let Place { level, timeout } = place;
        let policy = self.policy(level);
        let mut waiting = {
            let mut state = self.state.lock();
            let nobody_waits = state.levels.values().all(|l| l.len() == 0);
            if state.running < self.instances && nobody_waits {
                state.running += 1;
                return Ok(Permit {
                    queue: self.clone(),
                });
            }
            let queued = state.levels.get(&level).map_or(0, Level::len);
            if policy.max_queue_size != 0 && queued >= policy.max_queue_size {
                return Err(Refused::QueueFull(request_prefix.to_string()));
            }
            let (sender, turn) = oneshot::channel();
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            let deadline = policy.deadline(Instant::now(), timeout);
            state
                .levels
                .entry(level)
                .or_default()
                .waiting
                .push_back(Waiter {
                    ticket,
                    deadline,
                    turn: sender,
                });
            Waiting {
                queue: self.clone(),
                level,
                ticket,
                deadline,
                turn,
                answered: false,
            }
        };
        waiting.wait().await
    }

    /// Hands a freed instance to the next waiting request, or counts it free.
    fn release(&self) {
        let mut state = self.state.lock();
        let now = Instant::now();
        while let Some(waiter) = self.next_waiter(&mut state, now) {
            // A waiter whose receiver is gone has left; the instance goes to the next.
            if waiter.turn.send(Turn::Run).is_ok() {
                return;
            }
        }
        state.running = state.running.saturating_sub(1);
    }

    /// The next request to run, highest level first, each level's timely requests before its
    /// delayed ones; requests found timed out on the way are rejected or delayed by their
    /// level's policy.
    fn next_waiter(&self, state: &mut State, now: Instant) -> Option<Waiter> {
        for (&number, level) in state.levels.iter_mut() {
            while let Some(waiter) = level.waiting.pop_front() {
                match waiter.deadline {
                    Some(deadline) if deadline <= now => {
                        if self.policy(number).delay_on_timeout {
                            level.delayed.push_back(Waiter {
                                deadline: None,
                                ..waiter
                            });
                        } else {
                            let _ = waiter.turn.send(Turn::Expired);
                        }
                    }
                    _ => return Some(waiter),
                }
            }
            if let Some(waiter) = level.delayed.pop_front() {
                return Some(waiter);
            }
        }
        None
    }

    /// Requests running and waiting.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.running, state.levels.values().map(Level::len).sum())
    }
}

/// A request in the queue. Dropped before its turn came (the client went away), it leaves the
/// queue; dropped after its turn came but before taking it, it passes the instance on.
struct Waiting {
    queue: Arc<Queue>,
    level: u64,
    ticket: u64,
    deadline: Option<Instant>,
    turn: oneshot::Receiver<Turn>,
    /// Its turn was taken (an instance, now held by a `Permit`) or it was refused.
    answered: bool,
}

impl Waiting {
    async fn wait(&mut self) -> Admitted {
        if let Some(deadline) = self.deadline {
            tokio::select! {
                turn = &mut self.turn => return self.answer(turn),
                () = tokio::time::sleep_until(deadline) => {}
            }
            // Timed out while waiting: refused, or behind the level's other requests. Not found
            // in the level's line, it was served (or moved) meanwhile and its turn says how.
            let mut state = self.queue.state.lock();
            if let Some(level) = state.levels.get_mut(&self.level)
                && let Some(at) = level.waiting.iter().position(|w| w.ticket == self.ticket)
                && let Some(mut waiter) = level.waiting.remove(at)
            {
                if !self.queue.policy(self.level).delay_on_timeout {
                    drop(state);
                    return self.answer(Ok(Turn::Expired));
                }
                waiter.deadline = None;
                level.delayed.push_back(waiter);
            }
        }
        let turn = (&mut self.turn).await;
        self.answer(turn)
    }

    fn answer(&mut self, turn: std::result::Result<Turn, oneshot::error::RecvError>) -> Admitted {
        self.answered = true;
        match turn {
            Ok(Turn::Run) => Ok(Permit {
                queue: self.queue.clone(),
            }),
            Ok(Turn::Expired) => Err(Refused::TimedOut),
            Err(_) => Err(Refused::Lost),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let mut state = self.queue.state.lock();
        if let Some(level) = state.levels.get_mut(&self.level) {
            level.waiting.retain(|w| w.ticket != self.ticket);
            level.delayed.retain(|w| w.ticket != self.ticket);
        }
        drop(state);
        // Its turn came but was never taken: the instance goes to the next request.
        if let Ok(Turn::Run) = self.turn.try_recv() {
            self.queue.release();
        }
    }
}

/// How many instances the configuration's groups add up to (at least one): how many requests
/// the model runs at once, and how many sequence slots it has per batch slot.
pub fn instance_count(config: &ModelConfig) -> usize {
    let n: i64 = config
        .instance_group
        .iter()
        .map(|g| i64::from(g.count.max(1)))
        .sum();
    usize::try_from(n.max(1)).unwrap_or(1)
}

/// Triton's checks of a dynamic batcher's priority settings (`ValidateModelConfig`).
fn check(model: &str, batching: &ModelDynamicBatching) -> Result<()> {
    let levels = batching.priority_levels;
    if levels == 0 {
        return Ok(());
    }
    if batching.default_priority_level == 0 || batching.default_priority_level > levels {
        return Err(Error::invalid_arg(format!(
            "default priority level must be in range [1, {levels}] for {model}"
        )));
    }
    if batching
        .priority_queue_policy
        .keys()
        .any(|&level| level == 0 || level > levels)
    {
        return Err(Error::invalid_arg(format!(
            "priority queue policy must have priority level in range [1, {levels}] for {model}"
        )));
    }
    if batching.preserve_ordering && levels > 1 {
        return Err(Error::invalid_arg(format!(
            "Only one priority level is allowed when 'preserve_ordering' is true for {model}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
