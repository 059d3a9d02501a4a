//! Triton's dynamic batcher (`dynamic_batch_scheduler.cc`), for a model whose configuration has
//! `dynamic_batching` and that the sidecar runs or forwards to a model server without a batcher
//! of its own: requests that arrive close together run as one, along the batch dimension.
//!
//! Requests wait in the priority levels and under the queue policies of the schedule policy
//! (`core/schedule.rs`'s [`Policies`]). Whenever one of the model's instances is free, a batch is
//! formed from the head of the queue, highest level first, as Triton forms it (`GetDynamicBatch`):
//!
//! - requests join in queue order while they agree with the first on every input's datatype and
//!   non-batch dimensions (a ragged input's datatype only: `core/batch_input.rs`), the parameters the model is sent, and the classifications its server
//!   is asked for ([`Signature`]); the first that does not, or that would take the batch past
//!   `max_batch_size`, ends the batch, which is sent at once;
//! - a batch that reaches a `preferred_batch_size` is sent at once (the largest preferred size
//!   reached, when the next request would pass every preferred size);
//! - otherwise the batch waits for more requests until its oldest request has waited
//!   `max_queue_delay_microseconds`, and is then sent as it is; with no delay it is sent at once.
//!
//! A batch runs in a task of its own, so a client that goes away cannot cancel the others'
//! work: its request leaves the queue if it is still waiting, and its share of the answer is
//! dropped if not. One request is run as it came (its shared-memory regions handed on, its own
//! trace), several are joined into one request (`core/batch.rs`) whose answer is split back.
//! An error of the model fails every request of the batch with that error, as in Triton. With
//! `preserve_ordering`, answers are given in the order their requests were taken.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use infergate_proto::inference::ModelConfig;
use infergate_proto::inference::model_config::SchedulingChoice;
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};
// The runtime's clock, so that delays and timeouts follow it (and tests can pause it).
use tokio::time::Instant;

use futures::future::BoxFuture;

use super::batch::Signature;
use super::batch_input::JoinRules;
use super::params::Parameters;
use super::schedule::{Place, Policies, Refused};
use super::traced::ModelSpans;
use crate::error::{Error, Result};
use crate::shm::registry::ShmTarget;
use crate::tensor::Tensor;

/// One request as the batcher takes it: everything its execution needs, owned, since it runs in
/// the batch's task.
pub(super) struct Job {
    /// Validated inputs, full shapes (batch dimension first).
    pub inputs: Vec<Tensor>,
    /// Per input, the client's region that still holds it (see `Execution::input_regions`).
    pub input_regions: Vec<Option<ShmTarget>>,
    /// The outputs to produce, with their regions and the classifications the model server is
    /// asked for (see `Execution`).
    pub outputs: Vec<String>,
    pub output_shm: Vec<Option<ShmTarget>>,
    pub classification: Vec<u32>,
    /// The request's rows (1 for a model without batching).
    pub batch_size: u64,
    /// The parameters the model is sent (the scheduling controls taken out).
    pub parameters: Parameters,
    pub traced: Option<Traced>,
}

/// What a traced request's model spans need.
pub(super) struct Traced {
    pub scope: crate::trace::Scope,
    pub id: String,
    pub received: std::time::Instant,
    pub queued: std::time::Instant,
}

/// A request's share of its batch's answer.
pub(super) struct Ran {
    /// The outputs produced for its rows (every output the batch asked for; the request picks
    /// its own).
    pub outputs: Vec<Tensor>,
    /// When its batch started, and when the model had produced the batch's outputs.
    pub compute_start: std::time::Instant,
    pub infer_end: std::time::Instant,
    /// Its model spans, when traced, for the request to finish.
    pub spans: Option<ModelSpans>,
}

/// Why a request got no answer from its batch.
pub(super) enum Failed {
    /// The queue refused it (it waited past its timeout).
    Refused(Refused),
    /// Its batch failed: the model's error, when the model had finished (if it had), and its
    /// spans.
    Model {
        error: Error,
        infer_end: Option<std::time::Instant>,
        spans: Option<Box<ModelSpans>>,
    },
}

pub(super) type Reply = std::result::Result<Ran, Failed>;

/// What runs a formed batch on its model (`core/run_batch.rs`): the batcher decides who joins
/// and when, and knows nothing of the model.
pub(super) trait Runner: Send + Sync + 'static {
    /// Runs `jobs` as one batch: one reply per job, in their order.
    fn run(self: Arc<Self>, jobs: Vec<Job>) -> BoxFuture<'static, Vec<Reply>>;
}

struct Entry {
    job: Job,
    signature: Signature,
    /// Its rows as the batch sizes count them: at least one.
    rows: u64,
    enqueued: Instant,
    deadline: Option<Instant>,
    reply: oneshot::Sender<Reply>,
}

/// One priority level's requests: those in arrival order, then those delayed by a timeout.
#[derive(Default)]
struct Level {
    waiting: VecDeque<Entry>,
    delayed: VecDeque<Entry>,
}

impl Level {
    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.waiting.iter().chain(self.delayed.iter())
    }

    fn pop(&mut self) -> Option<Entry> {
        self.waiting
            .pop_front()
            .or_else(|| self.delayed.pop_front())
    }
}

#[derive(Default)]
struct State {
    levels: BTreeMap<u64, Level>,
    /// Batches running (at most one per instance).
    running: usize,
    /// Whether the driver task runs: it does whenever a request waits.
    driving: bool,
    /// The number the next batch gets, and the next whose answers are given (`preserve_ordering`).
    next_batch: u64,
    next_delivery: u64,
    /// Answers of batches that finished before an earlier one (`preserve_ordering`).
    held: BTreeMap<u64, Vec<(oneshot::Sender<Reply>, Reply)>>,
    /// Triton's test hook, `TRITONSERVER_DELAY_SCHEDULER`: no batch is formed until this many
    /// requests wait, once per load (0: none).
    hold: usize,
}

/// What the driver does next.
enum Step {
    /// Nobody waits: the driver ends.
    Idle,
    /// Run these requests as one batch (the batch's number).
    Run(Vec<Entry>, u64),
    /// Wait for a request, a free instance, or this moment.
    Wait(Option<Instant>),
}

/// How the head of the queue is batched now.
#[derive(Debug, PartialEq)]
enum Formed {
    /// Send the first this many requests.
    Send(usize),
    /// Wait until then for more.
    Wait(Instant),
}

/// `TRITONSERVER_DELAY_SCHEDULER`, read as Triton reads it when a model's batcher starts: a
/// whole number of requests to wait for before the first batch is formed, so that tests can
/// queue requests and see how they are batched (Triton's `qa/L0_batcher`); anything else is 0.
fn scheduler_hold() -> usize {
    std::env::var("TRITONSERVER_DELAY_SCHEDULER")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
}

pub struct Batcher {
    instances: usize,
    max_batch_size: u64,
    preferred: BTreeSet<u64>,
    /// The largest preferred size, or `max_batch_size` without any.
    max_preferred: u64,
    delay: Duration,
    preserve_ordering: bool,
    policies: Policies,
    /// How the model's requests join: its ragged inputs and batch inputs.
    rules: JoinRules,
    state: Mutex<State>,
    /// Rings the driver: a request arrived, or a batch finished.
    wake: Notify,
}

impl Batcher {
    /// The batcher of a model whose configuration has `dynamic_batching`, `None` for any other;
    /// a configuration Triton refuses is refused in its words.
    pub fn for_model(config: &ModelConfig, instances: usize) -> Result<Option<Arc<Self>>> {
        let Some(SchedulingChoice::DynamicBatching(batching)) = &config.scheduling_choice else {
            return Ok(None);
        };
        let policies = Policies::new(&config.name, batching)?;
        let rules = JoinRules::for_model(config)?;
        // A model without batching runs one request at a time through the same queue.
        let max_batch_size = u64::try_from(config.max_batch_size.max(1)).unwrap_or(1);
        // Triton's `ValidateModelConfig`.
        for &size in &batching.preferred_batch_size {
            if size <= 0 {
                return Err(Error::invalid_arg(format!(
                    "dynamic batching preferred size must be positive for {}",
                    config.name
                )));
            }
            if size > config.max_batch_size {
                return Err(Error::invalid_arg(format!(
                    "dynamic batching preferred size must be <= max batch size for {}",
                    config.name
                )));
            }
        }
        let preferred: BTreeSet<u64> = batching
            .preferred_batch_size
            .iter()
            .filter_map(|&n| u64::try_from(n).ok())
            .collect();
        let max_preferred = preferred.last().copied().unwrap_or(max_batch_size);
        Ok(Some(Arc::new(Batcher {
            instances: instances.max(1),
            max_batch_size,
            preferred,
            max_preferred,
            delay: Duration::from_micros(batching.max_queue_delay_microseconds),
            preserve_ordering: batching.preserve_ordering,
            policies,
            rules,
            state: Mutex::new(State {
                hold: scheduler_hold(),
                ..State::default()
            }),
            wake: Notify::new(),
        })))
    }

    /// How the model's requests join (see `core/batch_input.rs`).
    pub(super) fn rules(&self) -> &JoinRules {
        &self.rules
    }

    /// Where a request waits (see [`Policies::place`]).
    pub fn place(&self, parameters: Option<&Parameters>) -> Place {
        self.policies.place(parameters)
    }

    /// Queues `job`, which `runner` runs with the rest of its batch; the receiver gets its
    /// answer. A full level refuses it at once
    /// (`request_prefix` begins Triton's error).
    pub(super) fn submit(
        self: &Arc<Self>,
        runner: &Arc<dyn Runner>,
        place: Place,
        job: Job,
        request_prefix: &str,
    ) -> std::result::Result<oneshot::Receiver<Reply>, Refused> {
        let policy = self.policies.policy(place.level);
        let now = Instant::now();
        let (reply, answer) = oneshot::channel();
        let entry = Entry {
            signature: Signature::new(
                &job.inputs,
                &job.parameters,
                &job.outputs,
                &job.classification,
                &self.rules,
            ),
            rows: job.batch_size.max(1),
            enqueued: now,
            deadline: policy.deadline(now, place.timeout),
            reply,
            job,
        };
        let mut state = self.state.lock();
        let level = state.levels.entry(place.level).or_default();
        // Counted only under a bound: the count walks the level.
        if policy.max_queue_size != 0
            && level.entries().filter(|e| !e.reply.is_closed()).count() >= policy.max_queue_size
        {
            return Err(Refused::QueueFull(request_prefix.to_string()));
        }
        level.waiting.push_back(entry);
        if state.driving {
            drop(state);
            self.wake.notify_one();
        } else {
            state.driving = true;
            drop(state);
            tokio::spawn(self.clone().drive(runner.clone()));
        }
        Ok(answer)
    }

    /// Forms and starts batches while requests wait.
    async fn drive(self: Arc<Self>, runner: Arc<dyn Runner>) {
        // The moment a finished sleep waited for: it has come, though the runtime's clock may
        // not show it yet (its resolution is a millisecond; `sleep_finely`).
        let mut reached: Option<Instant> = None;
        loop {
            match self.next_step(reached.take()) {
                Step::Idle => return,
                Step::Run(entries, number) => {
                    tokio::spawn(self.clone().run(runner.clone(), entries, number));
                }
                Step::Wait(None) => self.wake.notified().await,
                Step::Wait(Some(until)) => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = sleep_finely(until) => reached = Some(until),
                    }
                }
            }
        }
    }

    fn next_step(&self, reached: Option<Instant>) -> Step {
        let mut state = self.state.lock();
        let now = reached.map_or_else(Instant::now, |at| at.max(Instant::now()));
        self.expire(&mut state, now);
        if state.levels.values().all(|l| l.entries().next().is_none()) {
            state.driving = false;
            return Step::Idle;
        }
        let closest_timeout = state
            .levels
            .values()
            .flat_map(|l| l.waiting.iter())
            .filter_map(|e| e.deadline)
            .min();
        if state.running >= self.instances {
            return Step::Wait(closest_timeout);
        }
        if state.hold > 0 {
            let waiting: usize = state
                .levels
                .values()
                .map(|l| l.waiting.len() + l.delayed.len())
                .sum();
            if waiting < state.hold {
                // The next request rings the driver.
                return Step::Wait(closest_timeout);
            }
            state.hold = 0;
        }
        let entries = state.levels.values().flat_map(Level::entries);
        match self.form(entries, now) {
            Formed::Send(count) => {
                let mut batch = Vec::with_capacity(count);
                for level in state.levels.values_mut() {
                    while batch.len() < count {
                        match level.pop() {
                            Some(entry) => batch.push(entry),
                            None => break,
                        }
                    }
                }
                state.levels.retain(|_, l| l.entries().next().is_some());
                state.running += 1;
                let number = state.next_batch;
                state.next_batch += 1;
                Step::Run(batch, number)
            }
            Formed::Wait(until) => {
                Step::Wait(Some(closest_timeout.map_or(until, |t| t.min(until))))
            }
        }
    }

    /// Takes out the requests whose clients went away, and those past their timeout: refused,
    /// or put behind their level's timely requests under a `DELAY` policy.
    fn expire(&self, state: &mut State, now: Instant) {
        for (&number, level) in state.levels.iter_mut() {
            let delay = self.policies.policy(number).delay_on_timeout;
            let mut kept = VecDeque::with_capacity(level.waiting.len());
            for mut entry in level.waiting.drain(..) {
                if entry.reply.is_closed() {
                    continue;
                }
                match entry.deadline {
                    Some(deadline) if deadline <= now => {
                        if delay {
                            entry.deadline = None;
                            level.delayed.push_back(entry);
                        } else {
                            let _ = entry.reply.send(Err(Failed::Refused(Refused::TimedOut)));
                        }
                    }
                    _ => kept.push_back(entry),
                }
            }
            level.waiting = kept;
            level.delayed.retain(|e| !e.reply.is_closed());
        }
        state.levels.retain(|_, l| l.entries().next().is_some());
    }

    /// Triton's `GetDynamicBatch`: how many of the waiting requests (in queue order) to send
    /// now, or until when to wait for more.
    fn form<'a>(&self, entries: impl Iterator<Item = &'a Entry>, now: Instant) -> Formed {
        let mut first: Option<&Signature> = None;
        let mut rows = 0u64;
        let mut count = 0usize;
        let mut oldest: Option<Instant> = None;
        // The last preferred size reached: (requests, rows).
        let mut preferred: Option<(usize, u64)> = None;
        let mut send_now = false;
        for entry in entries {
            match first {
                None => first = Some(&entry.signature),
                Some(signature) => {
                    if rows + entry.rows > self.max_preferred && preferred.is_none() {
                        preferred = Some((count, rows));
                    }
                    if rows + entry.rows > self.max_batch_size || *signature != entry.signature {
                        send_now = true;
                        break;
                    }
                }
            }
            rows += entry.rows;
            count += 1;
            oldest = Some(oldest.map_or(entry.enqueued, |o| o.min(entry.enqueued)));
            if self.preferred.contains(&rows) {
                preferred = Some((count, rows));
            }
        }
        let Some(oldest) = oldest else {
            return Formed::Send(0);
        };
        let delay_exceeded = !self.delay.is_zero() && now >= oldest + self.delay;
        if let Some((requests, _)) = preferred
            && !delay_exceeded
            && requests > 0
        {
            return Formed::Send(requests);
        }
        if send_now || rows >= self.max_preferred || delay_exceeded || self.delay.is_zero() {
            return Formed::Send(count);
        }
        Formed::Wait(oldest + self.delay)
    }

    /// Runs one batch (the runner's part) and gives each request its answer.
    async fn run(self: Arc<Self>, runner: Arc<dyn Runner>, entries: Vec<Entry>, number: u64) {
        let (jobs, to): (Vec<Job>, Vec<_>) = entries.into_iter().map(|e| (e.job, e.reply)).unzip();
        let count = jobs.len();
        // A panic in the model's code fails its batch like an error: the batch's slot is
        // freed and, with `preserve_ordering`, the answers after it are not held for ever.
        let answers = AssertUnwindSafe(runner.run(jobs))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                (0..count)
                    .map(|_| {
                        Err(Failed::Model {
                            error: Error::internal("the model's execution panicked"),
                            infer_end: None,
                            spans: None,
                        })
                    })
                    .collect()
            });
        let replies: Vec<_> = to.into_iter().zip(answers).collect();
        let mut state = self.state.lock();
        state.running = state.running.saturating_sub(1);
        if self.preserve_ordering {
            state.held.insert(number, replies);
            while let Some(ready) = {
                let next = state.next_delivery;
                state.held.remove(&next)
            } {
                state.next_delivery += 1;
                deliver(ready);
            }
        } else {
            deliver(replies);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// Requests waiting, and batches running.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.state.lock();
        let waiting = state.levels.values().map(|l| l.entries().count()).sum();
        (waiting, state.running)
    }
}

/// Sleeps until `until` more finely than the runtime's timer, whose resolution is a millisecond
/// (it rounds a deadline up to the next one, which would add up to a millisecond to every
/// `max_queue_delay_microseconds`): the runtime's timer for all but the last millisecond, then
/// a blocking thread's sleep, which the kernel's high-resolution timer ends within tens of
/// microseconds. Dropped early (a request arrived), the thread finishes its short sleep unheard.
async fn sleep_finely(until: Instant) {
    if let Some(coarse) = until.checked_sub(Duration::from_millis(1))
        && coarse > Instant::now()
    {
        tokio::time::sleep_until(coarse).await;
    }
    let rest = until.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

fn deliver(replies: Vec<(oneshot::Sender<Reply>, Reply)>) {
    for (to, reply) in replies {
        // A client that went away drops its share.
        let _ = to.send(reply);
    }
}

#[cfg(test)]
mod tests;
