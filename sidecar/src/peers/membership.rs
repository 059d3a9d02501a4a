//! Who the peers are and which of them answer: the static list (`--sequence-peers`), this
//! sidecar's own place in it, and each other peer's state, probed over its gRPC port.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use infergate_proto::inference::ServerReadyRequest;
use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;

use crate::backend::upstream::{H2Channel, H2Settings};

/// How often every other peer is probed, and how long a probe may take.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A peer as the last probe found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PeerState {
    /// Not answering: neither owns sequences nor is asked for them.
    Down = 0,
    /// Answering but not ready (starting, or draining before it stops): asked for the sequences
    /// it holds, never given new ones.
    Live = 1,
    /// Ready: owns the sequences it wins.
    Ready = 2,
}

impl PeerState {
    fn from_u8(v: u8) -> PeerState {
        match v {
            2 => PeerState::Ready,
            1 => PeerState::Live,
            _ => PeerState::Down,
        }
    }
}

pub type PeerClient = GrpcInferenceServiceClient<H2Channel>;

pub struct Peer {
    /// As listed: what the ranking hashes, the same on every peer.
    pub address: String,
    pub client: PeerClient,
    state: AtomicU8,
}

impl Peer {
    pub fn state(&self) -> PeerState {
        PeerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, state: PeerState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }
}

/// The peers in the listed order, this sidecar among them.
pub struct Members {
    pub peers: Vec<Peer>,
    pub me: usize,
}

impl Members {
    /// The list, and which entry is this sidecar: `me` if given, else the one entry whose port
    /// is `grpc_port` on a loopback address, this host's name, or `$POD_IP`.
    pub fn new(
        list: &[String],
        me: Option<&str>,
        grpc_port: u16,
        max_message_bytes: usize,
    ) -> Result<Members, String> {
        let mut peers = Vec::with_capacity(list.len());
        for address in list {
            if peers.iter().any(|p: &Peer| p.address == *address) {
                return Err(format!("peer {address} is listed twice"));
            }
            let settings = H2Settings {
                connect_timeout: Duration::from_secs(1),
                stream_window: 16 << 20,
                connection_window: 32 << 20,
            };
            let channel = H2Channel::lazy(&format!("http://{address}"), settings)
                .map_err(|e| format!("peer '{address}': {e}"))?;
            peers.push(Peer {
                address: address.clone(),
                client: GrpcInferenceServiceClient::new(channel)
                    .max_decoding_message_size(max_message_bytes)
                    .max_encoding_message_size(max_message_bytes),
                // Until the first probe answers: asked for the sequences it may hold (a sidecar
                // that starts among running peers must find their sequences at once), given none.
                state: AtomicU8::new(PeerState::Live as u8),
            });
        }
        let me = match me {
            Some(me) => list
                .iter()
                .position(|a| a == me)
                .ok_or_else(|| format!("this sidecar's address {me} is not in the peer list"))?,
            None => find_self(list, grpc_port)?,
        };
        Ok(Members { peers, me })
    }

    /// Probes every other peer, forever.
    pub async fn probe(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let probes = self
                .peers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != self.me)
                .map(|(_, peer)| async move {
                    let mut client = peer.client.clone();
                    let state =
                        match tokio::time::timeout(PROBE_TIMEOUT, client.server_ready(ServerReadyRequest {})).await {
                            Ok(Ok(r)) if r.get_ref().ready => PeerState::Ready,
                            Ok(Ok(_)) => PeerState::Live,
                            _ => PeerState::Down,
                        };
                    let was = peer.state();
                    if was != state {
                        tracing::info!(peer = %peer.address, from = ?was, to = ?state, "sequence peer changed state");
                    }
                    peer.set_state(state);
                });
            futures::future::join_all(probes).await;
        }
    }
}

fn find_self(list: &[String], grpc_port: u16) -> Result<usize, String> {
    let pod_ip = std::env::var("POD_IP").ok();
    let host_name = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    let is_me = |address: &str| {
        let Some((host, port)) = address.rsplit_once(':') else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        port.parse::<u16>() == Ok(grpc_port)
            && (matches!(host, "localhost" | "127.0.0.1" | "::1")
                || pod_ip.as_deref() == Some(host)
                || host_name.as_deref() == Some(host))
    };
    let mine: Vec<usize> = (0..list.len()).filter(|&i| is_me(&list[i])).collect();
    match mine[..] {
        [me] => Ok(me),
        [] => Err(format!(
            "none of the peers is this sidecar (gRPC port {grpc_port} on a loopback address, this host's name or $POD_IP): name it with --sequence-self"
        )),
        _ => Err("more than one peer could be this sidecar: name it with --sequence-self".into()),
    }
}
