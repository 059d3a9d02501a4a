//! Sequences across replicas: every request of a sequence reaches the sidecar (and so the model
//! server) that holds the sequence's state, whichever replica the client's request landed on.
//!
//! The protocol between sidecars (docs/sequences.md has it with its guarantees):
//!
//! - Every sidecar knows the same list of peers, each one's gRPC address: a fixed list
//!   (`--sequence-peers`), or in Kubernetes the pods of a headless Service, whose EndpointSlices
//!   each sidecar watches ([`kubernetes`]). Each sidecar probes the others' `ServerReady` twice
//!   a second: ready, live (answering, not ready: starting or draining), or down.
//! - A sequence's ranking of the peers is rendezvous hashing of (model, sequence id) over the
//!   listed addresses ([`rendezvous`]); its owner is the first ready peer of the ranking.
//! - A request with `sequence_start` goes to the owner and is served there. Every sidecar
//!   remembers the sequences it serves ([`held`]) until their END or their idle timeout.
//! - Any other request of a sequence is served where it is held; a sidecar that does not hold it
//!   hands it to the next peer of the ranking (ready or live) that has not been asked yet,
//!   naming the peers asked so far in the metadata `infergate-sequence-route` (the answering
//!   peers first, then those the last probe found down). When a peer joins, the sequences it now
//!   wins were started on the peer that comes second: the walk finds them there. When the last
//!   peer asked does not hold it either, it serves the request itself, and the model answers as
//!   it does for a sequence it does not know.
//! - Forwarding happens over the peer's ordinary gRPC port (`ModelInfer`, tensors as raw bytes),
//!   so the answer the client gets is the peer's answer. Tensors in the client's shared memory
//!   cannot travel and are refused with a clear error when the sequence is held elsewhere.
//!
//! Without peers, and for requests without a sequence id or to models without a sequence
//! batcher, nothing here runs: the pipeline is called directly. The front door
//! (`crate::front_door`) calls in with the request's model, found once.

pub(crate) mod forward;
pub(crate) mod held;
pub mod kubernetes;
pub mod membership;
pub(crate) mod rendezvous;

use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_proto::inference::model_config::SchedulingChoice;
use opentelemetry::KeyValue;

use crate::core::model::Model;
use crate::core::pipeline;
use crate::core::request::{InferRequest, InferResponse};
use crate::core::sequence::{CorrelationId, SequenceParams};
use crate::error::{Code, Error, Result};
use crate::trace::Kind;
use forward::{Failed, Mark, forward};
use held::Held;
use membership::{List, Members, Peer, PeerState};

pub use forward::{ROUTE_METADATA, VARIANT_METADATA};

/// Triton's idle timeout of a sequence when its configuration names none.
const DEFAULT_IDLE: Duration = Duration::from_secs(1);

/// The peers of this sidecar and the sequences it holds.
pub struct Peers {
    members: Arc<Members>,
    held: Held,
    /// Where the membership comes from in Kubernetes; `None`: a fixed list.
    discovery: Option<kubernetes::Target>,
}

/// Where a request comes from.
#[derive(Clone, Debug, Default)]
pub enum Origin {
    /// A client.
    #[default]
    Client,
    /// A peer, with the addresses of the peers asked so far.
    Peer(Vec<String>),
    /// A client's call another sidecar gave this one's variant (a canary's share): served as a
    /// client's, not split again.
    Variant,
}

impl Origin {
    /// The origin a request's metadata names: `route` (`infergate-sequence-route`) and
    /// `variant` (`infergate-variant`).
    pub fn from_metadata(route: Option<&str>, variant: Option<&str>) -> Origin {
        match (route, variant) {
            (None, None) => Origin::Client,
            (None, Some(_)) => Origin::Variant,
            (Some(list), _) => Origin::Peer(
                list.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            ),
        }
    }
}

impl Peers {
    pub fn new(members: Members, discovery: Option<kubernetes::Target>) -> Peers {
        Peers {
            members: Arc::new(members),
            held: Held::default(),
            discovery,
        }
    }

    /// Probes the other peers, and keeps the membership where it is discovered, until aborted.
    pub fn spawn(&self) -> Vec<tokio::task::JoinHandle<()>> {
        keep(&self.members, self.discovery.as_ref())
    }

    /// How many sequences this sidecar holds now: started here or found here, neither ended nor
    /// past their idle timeout. A draining sidecar waits for them (`drain.rs`).
    pub fn held_sequences(&self) -> usize {
        self.held.live()
    }

    /// This sidecar's address, as listed.
    pub fn address(&self) -> &str {
        self.members.me()
    }

    /// The TLS the other peers are dialled with, if any (its files are watched for renewals).
    pub fn tls(&self) -> Option<Arc<crate::tls::ClientTls>> {
        self.members.tls().cloned()
    }

    /// The peers and their states, this sidecar's (ready or not) included.
    pub fn states(&self, ready: bool) -> Vec<(String, PeerState)> {
        let list = self.members.current();
        (0..list.peers.len())
            .map(|i| (list.peers[i].address.clone(), state(&list, i, ready)))
            .collect()
    }
}

/// Probes `members`, and keeps them equal to the pods `discovery`'s Service lists where there is
/// one, until aborted.
pub(crate) fn keep(
    members: &Arc<Members>,
    discovery: Option<&kubernetes::Target>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(members.clone().probe())];
    if let Some(target) = discovery {
        tasks.push(tokio::spawn(kubernetes::watch(
            members.clone(),
            target.clone(),
        )));
    }
    tasks
}

/// A peer's state; this sidecar's is `ready` (not starting, not draining), or live.
fn state(list: &List, i: usize, ready: bool) -> PeerState {
    match (i == list.me, ready) {
        (true, true) => PeerState::Ready,
        (true, false) => PeerState::Live,
        (false, _) => list.peers[i].state(),
    }
}

/// The peers in the sequence's order, those at least `at_least`; this sidecar `ready` or not.
fn ranking(
    list: &List,
    model: &str,
    id: &CorrelationId,
    at_least: PeerState,
    ready: bool,
) -> Vec<usize> {
    let addresses: Vec<&str> = list.peers.iter().map(|p| p.address.as_str()).collect();
    rendezvous::rank(&addresses, model, id)
        .into_iter()
        .filter(|&i| state(list, i, ready) as u8 >= at_least as u8)
        .collect()
}

/// One inference, served here or by the peer that holds its sequence. `ready`: whether this
/// sidecar is ready (only a ready sidecar is given new sequences), asked only of a request of a
/// sequence when there are peers.
pub async fn infer(
    model: Arc<Model>,
    peers: Option<&Peers>,
    ready: impl FnOnce() -> bool,
    request: InferRequest,
    origin: Origin,
) -> Result<InferResponse> {
    let Some(peers) = peers else {
        return pipeline::infer(model, request).await;
    };
    let Some(sequence) = sequence_of(&model, &request) else {
        return pipeline::infer(model, request).await;
    };
    peers.route(model, request, sequence, origin, ready()).await
}

/// Whether a request to a decoupled model may run here: its sequence is not held by a peer.
/// (Decoupled requests are not forwarded: their answers are a stream.)
pub fn check_decoupled(
    model: &Model,
    peers: Option<&Peers>,
    ready: bool,
    request: &InferRequest,
) -> Result<()> {
    let (Some(peers), Some(sequence)) = (peers, sequence_of(model, request)) else {
        return Ok(());
    };
    let list = peers.members.current();
    let ranking = ranking(
        &list,
        &request.model_name,
        &sequence.id,
        PeerState::Ready,
        ready,
    );
    let owner_here = ranking.first().is_none_or(|&i| i == list.me);
    if owner_here || peers.held.contains(&request.model_name, &sequence.id) {
        return Ok(());
    }
    Err(Error::unsupported(format!(
        "sequence {} of the decoupled model '{}' belongs to another replica, and decoupled requests are not forwarded between replicas: send the sequence to one replica",
        sequence.id, request.model_name
    )))
}

/// Whether a peer's error says it holds none of the model's sequences, so the walk goes on: it
/// does not serve the model (a pod still starting has not found its models yet), or it is not
/// ready and cannot serve at all (starting, or draining with its model server gone).
fn holds_none(error: &Error, peer: PeerState) -> bool {
    error.code == Code::NotFound || (error.code == Code::Unavailable && peer != PeerState::Ready)
}

/// A request's sequence: its id, flags and the model's idle timeout, where the model has a
/// sequence batcher and the request names a sequence.
pub(crate) struct Sequence {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
    pub idle: Duration,
}

pub(crate) fn sequence_of(model: &Model, request: &InferRequest) -> Option<Sequence> {
    let Some(SchedulingChoice::SequenceBatching(batching)) = &model.config.scheduling_choice else {
        return None;
    };
    // Parameters the pipeline refuses are refused there, with its words.
    let params = SequenceParams::from_parameters(request.sequence_parameters()?).ok()?;
    let idle = match batching.max_sequence_idle_microseconds {
        0 => DEFAULT_IDLE,
        us => Duration::from_micros(us),
    };
    Some(Sequence {
        id: params.id?,
        start: params.start,
        end: params.end,
        idle,
    })
}

impl Peers {
    async fn route(
        &self,
        handle: Arc<Model>,
        request: InferRequest,
        sequence: Sequence,
        origin: Origin,
        ready: bool,
    ) -> Result<InferResponse> {
        let model = request.model_name.clone();
        let list = self.members.current();
        let me = list.me;
        let mut asked = match origin {
            Origin::Client | Origin::Variant => Vec::new(),
            // A peer sent it: a START because this sidecar owns it, anything else because the
            // peers before it do not hold it.
            Origin::Peer(_) if sequence.start => {
                return self.serve_here(handle, request, &sequence).await;
            }
            Origin::Peer(asked) => asked,
        };
        if sequence.start {
            for i in ranking(&list, &model, &sequence.id, PeerState::Ready, ready) {
                if i == me {
                    return self.serve_here(handle, request, &sequence).await;
                }
                match self
                    .forward_to(&list.peers[i], &request, &[self.address()])
                    .await
                {
                    Err(Failed::Unreachable(_)) => continue,
                    Err(Failed::Answered(e)) => return Err(e),
                    Ok(response) => {
                        // Restarted elsewhere: what this sidecar held of it is stale.
                        self.held.forget(&model, &sequence.id);
                        return Ok(response);
                    }
                }
            }
            // No peer ready, this one included (starting or draining): serve it here.
            return self.serve_here(handle, request, &sequence).await;
        }
        if self.held.contains(&model, &sequence.id) {
            return self.serve_here(handle, request, &sequence).await;
        }
        asked.push(self.address().to_string());
        // Peers that answer first, in the sequence's order; then those the last probe found
        // down, since a peer that has just started may hold sequences before every other has
        // probed it (asking one that is really down costs a refused connection, on a path that
        // otherwise ends in an error).
        let (answering, down): (Vec<usize>, Vec<usize>) =
            ranking(&list, &model, &sequence.id, PeerState::Down, ready)
                .into_iter()
                .partition(|&i| state(&list, i, ready) as u8 >= PeerState::Live as u8);
        let walk = answering.into_iter().chain(down);
        for i in walk {
            let address = list.peers[i].address.as_str();
            if i == me || asked.iter().any(|a| a == address) {
                continue;
            }
            let route: Vec<&str> = asked.iter().map(String::as_str).collect();
            match self.forward_to(&list.peers[i], &request, &route).await {
                // Gone since the last probe: neither holds nor answers.
                Err(Failed::Unreachable(_)) => continue,
                Err(Failed::Answered(e)) if holds_none(&e, state(&list, i, ready)) => continue,
                Err(Failed::Answered(e)) => return Err(e),
                Ok(response) => return Ok(response),
            }
        }
        // No peer holds it: the model answers as for any sequence it does not know.
        self.serve_here(handle, request, &sequence).await
    }

    async fn serve_here(
        &self,
        handle: Arc<Model>,
        request: InferRequest,
        sequence: &Sequence,
    ) -> Result<InferResponse> {
        let model = request.model_name.clone();
        let response = pipeline::infer(handle, request).await?;
        self.held
            .served(&model, &sequence.id, sequence.idle, sequence.end);
        Ok(response)
    }

    async fn forward_to(
        &self,
        peer: &Peer,
        request: &InferRequest,
        route: &[&str],
    ) -> std::result::Result<InferResponse, Failed> {
        forward_traced(peer, request, Mark::Route(route), "sequence peer").await
    }
}

/// Sends `request` to `peer` (see [`forward`]) in a client span named `span_name` where the
/// request is traced. A peer that cannot be reached is marked down until its next probe.
pub(crate) async fn forward_traced(
    peer: &Peer,
    request: &InferRequest,
    mark: Mark<'_>,
    span_name: &'static str,
) -> std::result::Result<InferResponse, Failed> {
    let mut span = request.trace.as_ref().map(|scope| {
        let mut span = scope.start(span_name, Kind::Client, Instant::now());
        span.attribute(KeyValue::new("server.address", peer.address.clone()));
        span
    });
    let context = span
        .as_ref()
        .map(crate::trace::Span::context_headers)
        .unwrap_or_default();
    let result = forward(&peer.client, &peer.address, request, mark, &context).await;
    if let Err(Failed::Unreachable(e)) = &result {
        tracing::warn!(peer = %peer.address, error = %e, "{span_name} unreachable");
        peer.set_state(PeerState::Down);
    }
    if let Some(mut span) = span.take() {
        if let Err(Failed::Unreachable(e) | Failed::Answered(e)) = &result {
            span.fail(&e.message);
        }
        span.end(Instant::now());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_passes_over_peers_that_hold_none_of_the_models_sequences() {
        let missing = Error::not_found("Request for unknown model: 'm' is not found");
        let down = Error::unavailable("the model server is unavailable");
        // A peer without the model holds none of its sequences, whatever its state.
        assert!(holds_none(&missing, PeerState::Ready));
        assert!(holds_none(&missing, PeerState::Live));
        // A peer not ready that cannot serve holds none either (starting, or stopped after
        // its drain); a ready one that fails may hold the sequence: its error is the answer.
        assert!(holds_none(&down, PeerState::Live));
        assert!(!holds_none(&down, PeerState::Ready));
        assert!(!holds_none(
            &Error::invalid_arg("wrong shape"),
            PeerState::Live
        ));
    }
}
