//! What the activator holds while no sidecar of the service is ready: the calls, within a cap on
//! their number and on the bytes of their bodies, in the order they came, until a sidecar is
//! ready (they go on, first come first), the service fails to start (they get its reason) or
//! their time is up.
//!
//! The order is kept by a fair lock (tokio's, first come first served) that the hold keeps
//! while no sidecar is ready: each held call queues for it on arrival, and on its turn passes
//! its request on before letting the next one have it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex as SyncMutex;
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, watch};

/// Where the service is, as the activator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No sidecar of the service is ready: calls are held.
    Starting,
    /// A sidecar is ready: calls pass.
    Ready,
    /// The service's pods fail to start, for this reason: held calls get it.
    Failed(Arc<str>),
}

/// The hold's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_calls: usize,
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// Why a call was not taken into the hold, or left it without going on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The cap on held calls, or on their bytes, is reached.
    Full,
    /// The service cannot start: the reason.
    Failed(Arc<str>),
    /// No sidecar was ready in time.
    TimedOut,
    /// The caller's own deadline came first.
    Deadline,
}

pub struct Hold {
    limits: Limits,
    calls: AtomicUsize,
    bytes: AtomicU64,
    phase: watch::Sender<Phase>,
    /// The calls' turns (module docs).
    turn: Arc<Mutex<()>>,
    /// The hold's own turn, kept while no sidecar is ready.
    closed: SyncMutex<Option<OwnedMutexGuard<()>>>,
    /// Told of each call held: wakes whatever starts the service.
    demand: Notify,
    /// When the first call held since the service was last ready came.
    waiting_since: SyncMutex<Option<Instant>>,
}

impl Hold {
    /// A hold that starts closed: no sidecar is known to be ready yet.
    pub fn new(limits: Limits) -> Hold {
        let turn = Arc::new(Mutex::new(()));
        let closed = turn.clone().try_lock_owned().ok();
        Hold {
            limits,
            calls: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            phase: watch::channel(Phase::Starting).0,
            turn,
            closed: SyncMutex::new(closed),
            demand: Notify::new(),
            waiting_since: SyncMutex::new(None),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn phase(&self) -> Phase {
        self.phase.borrow().clone()
    }

    pub fn is_ready(&self) -> bool {
        *self.phase.borrow() == Phase::Ready
    }

    /// Calls held now, and their bytes.
    pub fn held(&self) -> (usize, u64) {
        (
            self.calls.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }

    /// Resolves when a call has been held since the last time this was awaited.
    pub async fn demanded(&self) {
        self.demand.notified().await;
    }

    /// Moves to `phase`: opens the calls' turns when a sidecar is ready, closes them when none
    /// is. Returns how long the service took to start, when this makes it ready with calls
    /// having waited for it.
    pub async fn set_phase(&self, phase: Phase) -> Option<Duration> {
        let ready = phase == Phase::Ready;
        let changed = self.phase.send_if_modified(|now| {
            let changed = *now != phase;
            *now = phase;
            changed
        });
        if !changed {
            return None;
        }
        if ready {
            self.closed.lock().take();
            return self.waiting_since.lock().take().map(|t| t.elapsed());
        }
        if self.closed.lock().is_none() {
            // Behind the calls passing on now, if any: they were let through.
            let guard = self.turn.clone().lock_owned().await;
            let mut closed = self.closed.lock();
            // Ready again meanwhile: open it is.
            if !self.is_ready() && closed.is_none() {
                *closed = Some(guard);
            }
        }
        None
    }

    /// Takes a call into the hold, its body not yet read; `Full` past the cap on calls.
    pub fn admit(self: &Arc<Self>) -> Result<Held, Refusal> {
        let taken = self
            .calls
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.max_calls).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            return Err(Refusal::Full);
        }
        self.waiting_since.lock().get_or_insert_with(Instant::now);
        self.demand.notify_one();
        Ok(Held {
            hold: self.clone(),
            bytes: 0,
        })
    }

    /// Waits for the held call's turn to pass on, until `deadline` (the hold's, or the caller's
    /// own where `by_caller`). The turn is kept until the call has been passed on, so the next
    /// held call goes after it.
    pub async fn wait(
        &self,
        _held: &Held,
        deadline: Instant,
        by_caller: bool,
    ) -> Result<OwnedMutexGuard<()>, Refusal> {
        let mut phase = self.phase.subscribe();
        let failed = async {
            loop {
                if let Phase::Failed(reason) = &*phase.borrow_and_update() {
                    return reason.clone();
                }
                if phase.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            biased;
            reason = failed => Err(Refusal::Failed(reason)),
            turn = self.turn.clone().lock_owned() => Ok(turn),
            () = tokio::time::sleep_until(deadline.into()) => Err(if by_caller {
                Refusal::Deadline
            } else {
                Refusal::TimedOut
            }),
        }
    }
}

/// A call in the hold: counted, with its bytes, until dropped.
pub struct Held {
    hold: Arc<Hold>,
    bytes: u64,
}

impl Held {
    /// Counts `n` more bytes of the call's body; `Full` past the cap on bytes.
    pub fn take_bytes(&mut self, n: u64) -> Result<(), Refusal> {
        let hold = &self.hold;
        hold.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n)
                    .filter(|&total| total <= hold.limits.max_bytes)
            })
            .map_err(|_| Refusal::Full)?;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.hold.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.hold.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
