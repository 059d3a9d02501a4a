//! Who the peers are and which of them answer: the fixed list (`--sequence-peers`) or the one
//! discovery keeps ([`super::kubernetes`]), this sidecar's own place in it, and each other peer's
//! state, probed over its gRPC port.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

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

/// How a peer is dialled: the largest message either way, and TLS where the peers' gRPC ports
/// serve it.
#[derive(Clone, Debug)]
pub struct Dial {
    pub max_message_bytes: usize,
    pub tls: Option<Arc<crate::tls::ClientTls>>,
}

impl Dial {
    /// Plaintext, messages up to `max_message_bytes`.
    pub fn plain(max_message_bytes: usize) -> Dial {
        Dial {
            max_message_bytes,
            tls: None,
        }
    }
}

pub struct Peer {
    /// As listed: what the ranking hashes, the same on every peer.
    pub address: String,
    pub client: PeerClient,
    state: AtomicU8,
}

impl Peer {
    fn connect(address: &str, dial: &Dial) -> Result<Peer, String> {
        let max_message_bytes = dial.max_message_bytes;
        let settings = H2Settings {
            connect_timeout: Duration::from_secs(1),
            stream_window: 16 << 20,
            connection_window: 32 << 20,
        };
        let channel =
            H2Channel::lazy_with_tls(&format!("http://{address}"), settings, dial.tls.clone())
                .map_err(|e| format!("peer '{address}': {e}"))?;
        Ok(Peer {
            address: address.to_string(),
            client: GrpcInferenceServiceClient::new(channel)
                .max_decoding_message_size(max_message_bytes)
                .max_encoding_message_size(max_message_bytes),
            // Until the first probe answers: asked for the sequences it may hold (a sidecar that
            // starts among running peers must find their sequences at once), given none.
            state: AtomicU8::new(PeerState::Live as u8),
        })
    }

    pub fn state(&self) -> PeerState {
        PeerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, state: PeerState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }
}

/// `List::me` of a list this sidecar is not in.
pub const NOT_LISTED: usize = usize::MAX;

/// The peers as known at one moment, this sidecar among them (or [`NOT_LISTED`]). A request works on one snapshot
/// from start to end, so a change of membership never moves it halfway.
pub struct List {
    pub peers: Vec<Arc<Peer>>,
    pub me: usize,
}

/// The peers: a fixed list (`--sequence-peers`), or one that discovery replaces as replicas
/// come and go (`--sequence-peers-service`).
pub struct Members {
    list: RwLock<Arc<List>>,
    me: String,
    dial: Dial,
    /// What the peers are, for the log: `sequence` (this sidecar among them), `canary`, ...
    group: &'static str,
}

impl Members {
    /// The fixed list, and which entry is this sidecar: `me` if given, else the one entry whose
    /// port is `grpc_port` on a loopback address, this host's name, or `$POD_IP`.
    pub fn fixed(
        list: &[String],
        me: Option<&str>,
        grpc_port: u16,
        dial: Dial,
    ) -> Result<Members, String> {
        let mut peers: Vec<Arc<Peer>> = Vec::with_capacity(list.len());
        for address in list {
            if peers.iter().any(|p| p.address == *address) {
                return Err(format!("peer {address} is listed twice"));
            }
            peers.push(Arc::new(Peer::connect(address, &dial)?));
        }
        let me = match me {
            Some(me) => list
                .iter()
                .position(|a| a == me)
                .ok_or_else(|| format!("this sidecar's address {me} is not in the peer list"))?,
            None => find_self(list, grpc_port)?,
        };
        Ok(Members {
            me: list[me].clone(),
            list: RwLock::new(Arc::new(List { peers, me })),
            dial,
            group: "sequence",
        })
    }

    /// A list that discovery fills: this sidecar (`me`, its address as the others list it) alone
    /// until [`Members::replace`] is first called.
    pub fn discovered(me: &str, dial: Dial) -> Result<Members, String> {
        let peers = vec![Arc::new(Peer::connect(me, &dial)?)];
        Ok(Members {
            me: me.to_string(),
            list: RwLock::new(Arc::new(List { peers, me: 0 })),
            dial,
            group: "sequence",
        })
    }

    /// A list of other sidecars only (a canary's, or the service's for its activator), which
    /// this process is not one of, named `group` in the log: empty until [`Members::replace`]
    /// is first called.
    pub fn others(dial: Dial, group: &'static str) -> Members {
        Members {
            me: String::new(),
            list: RwLock::new(Arc::new(List {
                peers: Vec::new(),
                me: NOT_LISTED,
            })),
            dial,
            group,
        }
    }

    fn group(&self) -> &'static str {
        self.group
    }

    /// The TLS peers are dialled with, if any.
    pub fn tls(&self) -> Option<&Arc<crate::tls::ClientTls>> {
        self.dial.tls.as_ref()
    }

    /// This sidecar's address.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The peers now.
    pub fn current(&self) -> Arc<List> {
        self.list.read().clone()
    }

    /// Replaces the list with `addresses` (this sidecar is kept in it, listed or not yet). Peers
    /// that stay keep their connection and their last probed state; new ones start live.
    pub fn replace(&self, addresses: &[String]) {
        let old = self.current();
        let mut wanted: Vec<&str> = addresses.iter().map(String::as_str).collect();
        if !self.me.is_empty() {
            wanted.push(&self.me);
        }
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() == old.peers.len()
            && wanted
                .iter()
                .all(|a| old.peers.iter().any(|p| p.address == *a))
        {
            return;
        }
        let mut peers = Vec::with_capacity(wanted.len());
        for address in wanted {
            if let Some(peer) = old.peers.iter().find(|p| p.address == address) {
                peers.push(peer.clone());
                continue;
            }
            match Peer::connect(address, &self.dial) {
                Ok(peer) => peers.push(Arc::new(peer)),
                Err(e) => tracing::warn!(group = self.group(), error = %e, "peer left out"),
            }
        }
        let me = if self.me.is_empty() {
            NOT_LISTED
        } else {
            let Some(me) = peers.iter().position(|p| p.address == self.me) else {
                return;
            };
            me
        };
        let names: Vec<&str> = peers.iter().map(|p| p.address.as_str()).collect();
        tracing::info!(group = self.group(), peers = ?names, "peers changed");
        *self.list.write() = Arc::new(List { peers, me });
    }

    /// Probes every other peer, forever.
    pub async fn probe(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let group = self.group();
        loop {
            tick.tick().await;
            let list = self.current();
            let probes = list
                .peers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != list.me)
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
                        tracing::info!(group, peer = %peer.address, from = ?was, to = ?state, "peer changed state");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(list: &List) -> Vec<&str> {
        list.peers.iter().map(|p| p.address.as_str()).collect()
    }

    #[tokio::test]
    async fn discovery_replaces_the_list_keeping_this_sidecar_and_the_states_it_probed() {
        let members = Members::discovered("10.0.0.5:8001", Dial::plain(1 << 20)).unwrap();
        assert_eq!(addresses(&members.current()), ["10.0.0.5:8001"]);

        members.replace(&["10.0.0.7:8001".into(), "10.0.0.6:8001".into()]);
        let list = members.current();
        assert_eq!(
            addresses(&list),
            ["10.0.0.5:8001", "10.0.0.6:8001", "10.0.0.7:8001"]
        );
        assert_eq!(list.peers[list.me].address, "10.0.0.5:8001");
        assert_eq!(
            list.peers[2].state(),
            PeerState::Live,
            "new peers start live"
        );
        list.peers[2].set_state(PeerState::Ready);

        // A peer leaves and another joins: the one that stays keeps its state.
        members.replace(&[
            "10.0.0.7:8001".into(),
            "10.0.0.8:8001".into(),
            "10.0.0.5:8001".into(),
        ]);
        let now = members.current();
        assert_eq!(
            addresses(&now),
            ["10.0.0.5:8001", "10.0.0.7:8001", "10.0.0.8:8001"]
        );
        assert_eq!(now.peers[1].state(), PeerState::Ready);
        assert!(Arc::ptr_eq(&now.peers[1], &list.peers[2]));
        // The snapshot a request took is unchanged.
        assert_eq!(list.peers.len(), 3);
        assert_eq!(list.peers[1].address, "10.0.0.6:8001");
    }

    #[tokio::test]
    async fn a_fixed_list_finds_this_sidecar_or_refuses() {
        let list = ["127.0.0.1:9101".to_string(), "127.0.0.1:9102".to_string()];
        let members = Members::fixed(&list, None, 9102, Dial::plain(1 << 20)).unwrap();
        assert_eq!(members.me(), "127.0.0.1:9102");
        assert_eq!(members.current().me, 1);
        let twice = ["127.0.0.1:9101".to_string(), "127.0.0.1:9101".to_string()];
        assert!(Members::fixed(&twice, None, 9101, Dial::plain(1 << 20)).is_err());
        assert!(Members::fixed(&list, None, 9200, Dial::plain(1 << 20)).is_err());
    }
}
