//! The schedule_policy extension for models the sidecar runs itself: a model whose configuration
//! declares `dynamic_batching` runs at most as many requests at once as it has instances; the
//! others wait in priority queues under Triton's queue policies (its `PriorityQueue` in
//! `scheduler_utils.cc`):
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
//!
//! Requests are run one by one: they are not merged into batches, so `preferred_batch_size` and
//! `max_queue_delay_microseconds` have no effect here.

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
struct Policy {
    delay_on_timeout: bool,
    default_timeout: Duration,
    allow_override: bool,
    /// 0: no bound.
    max_queue_size: usize,
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
    fn deadline(&self, now: Instant, requested: Duration) -> Option<Instant> {
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
    level: u64,
    /// The request's own timeout (zero: none).
    timeout: Duration,
}

pub struct Queue {
    instances: usize,
    priority_levels: u64,
    default_level: u64,
    default_policy: Policy,
    policies: HashMap<u64, Policy>,
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
        check(&config.name, batching)?;
        let default_policy = Policy::from(&batching.default_queue_policy.unwrap_or_default());
        Ok(Some(Arc::new(Queue {
            instances: instances.max(1),
            priority_levels: batching.priority_levels,
            default_level: batching.default_priority_level,
            default_policy,
            // Without priority levels Triton has one queue, under the default policy alone.
            policies: batching
                .priority_queue_policy
                .iter()
                .filter(|_| batching.priority_levels > 0)
                .map(|(level, policy)| (*level, Policy::from(policy)))
                .collect(),
            state: Mutex::default(),
        })))
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

    fn policy(&self, level: u64) -> Policy {
        self.policies
            .get(&level)
            .copied()
            .unwrap_or(self.default_policy)
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
mod tests {
    use infergate_proto::model_config;

    use super::*;
    use crate::core::params::ParamValue;

    /// A one-instance model with this `dynamic_batching` body.
    fn queue(batching: &str) -> Arc<Queue> {
        let text = format!("name: \"m\" dynamic_batching {{ {batching} }}");
        let config = model_config::parse_text(&text).unwrap();
        Queue::for_model(&config, 1).unwrap().unwrap()
    }

    fn place(queue: &Queue, priority: u64, timeout_us: u64) -> Place {
        let mut parameters = Parameters::default();
        parameters.insert("priority", ParamValue::Uint(priority));
        parameters.insert("timeout", ParamValue::Uint(timeout_us));
        queue.place(Some(&parameters))
    }

    /// Starts a request's wait for the instance; its answer arrives on the returned channel.
    fn spawn_admit(
        queue: &Arc<Queue>,
        place: Place,
        done: &tokio::sync::mpsc::UnboundedSender<(&'static str, Admitted)>,
        name: &'static str,
    ) -> tokio::task::JoinHandle<()> {
        let (queue, done) = (queue.clone(), done.clone());
        tokio::spawn(async move {
            let answer = queue.admit(place, "[request id: <id_unknown>] ").await;
            let _ = done.send((name, answer));
        })
    }

    /// Lets every spawned task run as far as it can.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_instance_runs_at_once_and_a_busy_one_is_waited_for_in_order() {
        let q = queue("");
        let first = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        spawn_admit(&q, place(&q, 0, 0), &done, "second");
        settle().await;
        spawn_admit(&q, place(&q, 0, 0), &done, "third");
        settle().await;
        assert_eq!(q.counts(), (1, 2));
        assert!(
            answers.try_recv().is_err(),
            "nothing runs while the instance is busy"
        );
        drop(first);
        let (name, second) = answers.recv().await.unwrap();
        assert_eq!(name, "second");
        assert_eq!(q.counts(), (1, 1), "the instance passed on, not freed");
        drop(second.unwrap());
        let (name, third) = answers.recv().await.unwrap();
        assert_eq!(name, "third");
        drop(third.unwrap());
        assert_eq!(q.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_level_refuses_in_tritons_words() {
        let q = queue("default_queue_policy { max_queue_size: 1 }");
        let _running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, _answers) = tokio::sync::mpsc::unbounded_channel();
        spawn_admit(&q, place(&q, 0, 0), &done, "queued");
        settle().await;
        let refused = Error::from(
            q.admit(place(&q, 0, 0), "[request id: 7] ")
                .await
                .unwrap_err(),
        );
        assert_eq!(refused.code, crate::error::Code::Unavailable);
        assert_eq!(
            refused.message,
            "[request id: 7] Exceeds maximum queue size"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_levels_only_the_default_policy_applies() {
        let q = queue("priority_queue_policy { key: 0 value { max_queue_size: 1 } }");
        let _running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, _answers) = tokio::sync::mpsc::unbounded_channel();
        for name in ["first", "second"] {
            spawn_admit(&q, place(&q, 0, 0), &done, name);
            settle().await;
        }
        assert_eq!(
            q.counts(),
            (1, 2),
            "the unbounded default policy queued both"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_highest_level_goes_first_and_unknown_levels_take_the_default() {
        let q = queue("priority_levels: 3 default_priority_level: 3");
        assert_eq!(place(&q, 0, 0).level, 3);
        assert_eq!(place(&q, 4, 0).level, 3, "past the last level: the default");
        assert_eq!(place(&q, 2, 0).level, 2);
        assert_eq!(q.place(None).level, 3, "plain parameters: the default");
        let running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        for (name, priority) in [("low", 3), ("middle", 2), ("high", 1), ("high-2", 1)] {
            spawn_admit(&q, place(&q, priority, 0), &done, name);
            settle().await;
        }
        drop(running);
        let mut order = Vec::new();
        for _ in 0..4 {
            let (name, permit) = answers.recv().await.unwrap();
            order.push(name);
            drop(permit.unwrap());
        }
        assert_eq!(order, ["high", "high-2", "middle", "low"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waiting_past_its_timeout_is_rejected() {
        let q = queue("default_queue_policy { default_timeout_microseconds: 1000 }");
        let running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        spawn_admit(&q, place(&q, 0, 0), &done, "late");
        let (_, answer) = answers.recv().await.unwrap();
        assert_eq!(answer.unwrap_err(), Refused::TimedOut);
        let error = Error::from(Refused::TimedOut);
        assert_eq!(error.code, crate::error::Code::Unavailable);
        assert_eq!(error.message, TIMEOUT_EXPIRED);
        assert_eq!(q.counts(), (1, 0), "it left the queue");
        drop(running);
        assert_eq!(q.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_timeout_only_shortens_an_overridable_default() {
        let q = queue(
            "default_queue_policy { default_timeout_microseconds: 10000000 allow_timeout_override: true }",
        );
        let now = Instant::now();
        let deadline = |timeout_us| {
            let p = place(&q, 0, timeout_us);
            q.policy(p.level).deadline(now, p.timeout)
        };
        assert_eq!(deadline(1000), Some(now + Duration::from_millis(1)));
        assert_eq!(deadline(20_000_000), Some(now + Duration::from_secs(10)));
        assert_eq!(deadline(0), Some(now + Duration::from_secs(10)));
        let fixed = queue("default_queue_policy { default_timeout_microseconds: 10000000 }");
        let p = place(&fixed, 0, 1000);
        assert_eq!(
            fixed.policy(p.level).deadline(now, p.timeout),
            Some(now + Duration::from_secs(10)),
            "no override allowed"
        );
        let none = queue("default_queue_policy { allow_timeout_override: true }");
        let p = place(&none, 0, 1000);
        assert_eq!(
            none.policy(p.level).deadline(now, p.timeout),
            None,
            "Triton's rule: only a shorter timeout than the default replaces it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_request_goes_behind_its_level_but_before_lower_levels() {
        let q = queue(
            "priority_levels: 2 default_priority_level: 2 \
             priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 1000 } }",
        );
        let running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        spawn_admit(&q, place(&q, 1, 0), &done, "delayed");
        settle().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
        spawn_admit(&q, place(&q, 2, 0), &done, "low");
        settle().await;
        spawn_admit(&q, place(&q, 1, 0), &done, "timely");
        settle().await;
        assert_eq!(q.counts(), (1, 3), "a delayed request still waits");
        drop(running);
        let mut order = Vec::new();
        for _ in 0..3 {
            let (name, permit) = answers.recv().await.unwrap();
            order.push(name);
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(permit.unwrap());
        }
        assert_eq!(order, ["timely", "delayed", "low"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_leaves_the_queue_gives_up_its_place_and_its_turn() {
        let q = queue("");
        let running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let gone = spawn_admit(&q, place(&q, 0, 0), &done, "gone");
        settle().await;
        spawn_admit(&q, place(&q, 0, 0), &done, "stays");
        settle().await;
        gone.abort();
        settle().await;
        assert_eq!(q.counts(), (1, 1));
        drop(running);
        let (name, permit) = answers.recv().await.unwrap();
        assert_eq!(name, "stays");
        drop(permit.unwrap());
        assert_eq!(q.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_given_to_a_request_that_has_left_passes_on() {
        let q = queue("");
        let running = q.admit(place(&q, 0, 0), "").await.unwrap();
        let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let gone = spawn_admit(&q, place(&q, 0, 0), &done, "gone");
        settle().await;
        spawn_admit(&q, place(&q, 0, 0), &done, "next");
        settle().await;
        // The turn goes to "gone", which is stopped before it can take it (the test's runtime
        // has one thread, so it has not run since).
        drop(running);
        gone.abort();
        let (name, permit) = answers.recv().await.unwrap();
        assert_eq!(name, "next");
        drop(permit.unwrap());
        assert_eq!(q.counts(), (0, 0));
    }

    #[test]
    fn priority_settings_triton_refuses_are_refused_in_its_words() {
        for (batching, message) in [
            (
                "priority_levels: 2",
                "default priority level must be in range [1, 2] for m",
            ),
            (
                "priority_levels: 2 default_priority_level: 3",
                "default priority level must be in range [1, 2] for m",
            ),
            (
                "priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value { } }",
                "priority queue policy must have priority level in range [1, 2] for m",
            ),
            (
                "priority_levels: 2 default_priority_level: 1 preserve_ordering: true",
                "Only one priority level is allowed when 'preserve_ordering' is true for m",
            ),
        ] {
            let text = format!("name: \"m\" dynamic_batching {{ {batching} }}");
            let config = model_config::parse_text(&text).unwrap();
            let error = Queue::for_model(&config, 1).err().unwrap();
            assert_eq!(error.message, message, "{batching}");
        }
        let config = model_config::parse_text("name: \"m\"").unwrap();
        assert!(Queue::for_model(&config, 1).unwrap().is_none());
    }
}
