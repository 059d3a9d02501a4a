//! A canary: another variant of the service, on pods of its own, given a share of the calls
//! (`server.canary`; docs/sidecar.md, "Canary").
//!
//! The split is made here, per call, by the sidecars clients reach (the stable variant's; the
//! canary's pods are not behind the client Service). So it needs no gateway, and one gRPC channel
//! splits as well as many connections:
//!
//! - A client's call is the canary's when a draw in 0..100 falls below the share ([`share`]):
//!   a random draw, or for a request of a sequence the sequence's own percentile (a hash of the
//!   model and the sequence id), so that all of a sequence goes one way on every sidecar.
//!   Where a sequence went is remembered until its end or idle timeout, so that a change of the
//!   share moves no sequence in flight (on the sidecar that saw its start).
//! - The canary's calls are sent to a ready canary sidecar over its gRPC port, as sequence
//!   peers send theirs (`crate::peers::forward`), marked `infergate-variant: canary` so that
//!   they are not split again; a sequence's to the first ready one of its rendezvous ranking, so
//!   that the canary's own sequence routing finds it there; others round robin.
//! - Where no canary sidecar is ready or reachable, the call is served here: a canary that is
//!   starting, failing or going away costs no call. A canary that answers with an error gives
//!   the client that error. Calls whose tensors are in the client's shared memory (this pod's)
//!   and decoupled models' (whose answers are a stream) are served here.
//!
//! Each variant's calls and failures, as this sidecar saw them, are in `/status` and in the
//! metrics (`infergate_variant_requests_total`).

pub mod share;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::core::model::Model;
use crate::core::request::{InferRequest, InferResponse};
use crate::error::Result;
use crate::peers::forward::{Failed, Mark};
use crate::peers::held::Held;
use crate::peers::kubernetes;
use crate::peers::membership::{Members, PeerState};
use crate::peers::{Origin, Sequence, forward_traced, rendezvous, sequence_of};
use share::Share;

/// The two variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// This sidecar's: the model the service runs.
    Stable,
    /// The canary's.
    Canary,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Stable => "stable",
            Variant::Canary => "canary",
        }
    }
}

/// What [`Canary::split`] did with a call.
pub enum Split {
    /// The stable variant's: serve it here.
    Here(InferRequest),
    /// The canary answered (or failed): the client's answer.
    Served(Result<InferResponse>),
}

pub struct Canary {
    members: Arc<Members>,
    discovery: Option<kubernetes::Target>,
    share: Arc<Share>,
    /// Sequences sent to the canary, and those kept here, until their end or idle timeout.
    on_canary: Held,
    on_stable: Held,
    /// Where the round robin over the canary's sidecars is.
    next: AtomicUsize,
    /// Calls by variant, succeeded and failed.
    counts: [[AtomicU64; 2]; 2],
}

impl Canary {
    pub fn new(members: Members, discovery: Option<kubernetes::Target>, share: Share) -> Canary {
        Canary {
            members: Arc::new(members),
            discovery,
            share: Arc::new(share),
            on_canary: Held::default(),
            on_stable: Held::default(),
            next: AtomicUsize::new(0),
            counts: Default::default(),
        }
    }

    /// Probes the canary's sidecars, keeps their list where it is discovered, and reads the
    /// share again where a file holds it, until aborted.
    pub fn spawn(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = crate::peers::keep(&self.members, self.discovery.as_ref());
        if self.share.reloads() {
            let share = self.share.clone();
            tasks.push(tokio::spawn(crate::reload::every(
                share::RELOAD_EVERY,
                move || share.reload(),
            )));
        }
        tasks
    }

    /// Whether a call from `origin` is split: a client's, not one a sidecar already gave a
    /// variant or a sequence peer forwarded.
    pub fn splits(origin: &Origin) -> bool {
        matches!(origin, Origin::Client)
    }

    /// Sends the call to the canary when it is the canary's and a canary sidecar takes it;
    /// gives it back to be served here otherwise.
    pub async fn split(&self, model: &Model, request: InferRequest) -> Split {
        let sequence = sequence_of(model, &request);
        let variant = self.variant_of(&request.model_name, sequence.as_ref());
        if variant == Variant::Stable || !crate::peers::forward::travels(&request) {
            self.remember(&request.model_name, sequence.as_ref(), Variant::Stable);
            return Split::Here(request);
        }
        let list = self.members.current();
        let mut ready: Vec<usize> = (0..list.peers.len())
            .filter(|&i| list.peers[i].state() == PeerState::Ready)
            .collect();
        match &sequence {
            Some(sequence) => {
                let addresses: Vec<&str> = ready
                    .iter()
                    .map(|&i| list.peers[i].address.as_str())
                    .collect();
                let ranking = rendezvous::rank(&addresses, &request.model_name, &sequence.id);
                ready = ranking.into_iter().map(|r| ready[r]).collect();
            }
            None if !ready.is_empty() => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
                ready.rotate_left(start);
            }
            None => {}
        }
        for i in ready {
            let peer = &list.peers[i];
            let result = forward_traced(
                peer,
                &request,
                Mark::Variant(Variant::Canary.as_str()),
                "canary",
            )
            .await;
            let answer = match result {
                Err(Failed::Unreachable(_)) => continue,
                Err(Failed::Answered(e)) => Err(e),
                Ok(response) => Ok(response),
            };
            self.remember(&request.model_name, sequence.as_ref(), Variant::Canary);
            self.count(Variant::Canary, answer.is_ok());
            return Split::Served(answer);
        }
        // No canary sidecar ready or reachable: served here.
        self.remember(&request.model_name, sequence.as_ref(), Variant::Stable);
        Split::Here(request)
    }

    /// The variant a call is given: where its sequence already is, else by the draw.
    fn variant_of(&self, model: &str, sequence: Option<&Sequence>) -> Variant {
        let draw = match sequence {
            Some(s) if !s.start && self.on_canary.contains(model, &s.id) => {
                return Variant::Canary;
            }
            Some(s) if !s.start && self.on_stable.contains(model, &s.id) => {
                return Variant::Stable;
            }
            Some(s) => rendezvous::percentile(model, &s.id),
            None => fastrand::u8(0..100),
        };
        if self.share.takes(draw) {
            Variant::Canary
        } else {
            Variant::Stable
        }
    }

    /// Remembers where a sequence's request went (its end forgets it).
    fn remember(&self, model: &str, sequence: Option<&Sequence>, variant: Variant) {
        let Some(s) = sequence else {
            return;
        };
        let (to, other) = match variant {
            Variant::Canary => (&self.on_canary, &self.on_stable),
            Variant::Stable => (&self.on_stable, &self.on_canary),
        };
        to.served(model, &s.id, s.idle, s.end);
        if s.start {
            other.forget(model, &s.id);
        }
    }

    /// Counts a call of `variant`, answered or failed.
    pub fn count(&self, variant: Variant, ok: bool) {
        let row = match variant {
            Variant::Stable => 0,
            Variant::Canary => 1,
        };
        self.counts[row][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `variant` this sidecar saw: (succeeded, failed).
    pub fn calls(&self, variant: Variant) -> (u64, u64) {
        let row = &self.counts[usize::from(variant == Variant::Canary)];
        (
            row[0].load(Ordering::Relaxed),
            row[1].load(Ordering::Relaxed),
        )
    }

    /// The share now, in percent.
    pub fn percent(&self) -> u8 {
        self.share.percent()
    }

    /// The canary's sidecars and their states.
    pub fn peers(&self) -> Vec<(String, PeerState)> {
        let list = self.members.current();
        list.peers
            .iter()
            .map(|p| (p.address.clone(), p.state()))
            .collect()
    }
}
