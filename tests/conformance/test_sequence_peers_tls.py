"""Sequences across replicas whose gRPC ports serve mutual TLS: each sidecar dials its peers over
TLS (`server.sequence_peers_tls`), trusts a peer only when it proves a certificate of the roots
*for the peers' name*, whatever address it was dialled at, and presents its own where the peer
asks for one. A sequence's steps sent round-robin over REST to both sidecars get the answers one
server gives; a peer that cannot prove the name is never made Ready, so nothing is forwarded to it.

Sidecar-specific setup: the tests start sidecars of their own, with certificates made here
(openssl)."""

import shutil
import time

import pytest

import certs
import conftest
from support import own_sidecars
from test_sequence_peers import Cluster, run_interleaved

pytestmark = [
    own_sidecars,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates"),
]

PEERS_NAME = "peers.infergate.test"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peers-pki")
    authority = certs.ca(folder, "service-ca")
    # The service's certificate: the peers' name, server and client authentication.
    service = certs.signed(folder, "service", authority, server=True, client_too=True,
                           names=("DNS:localhost", f"DNS:{PEERS_NAME}"))
    return {"folder": folder, "ca": authority, "service": service}


class TlsCluster(Cluster):
    """Sidecars whose gRPC ports are mutual TLS, each dialling the others for `names[i]`."""

    def __init__(self, tmp_path_factory, pki, names):
        super().__init__(tmp_path_factory, len(names))
        self.pki, self.names = pki, names

    def start(self, i):
        folder = self.tmp.mktemp(f"tls-peer{i}")
        ca, service = self.pki["ca"], self.pki["service"]
        config = folder / "config.yaml"
        config.write_text(
            "server:\n  sequence_peers_tls:\n"
            f"    root_cert: {ca.cert}\n    server_name: {self.names[i]}\n"
            f"    client_cert: {service.cert}\n    client_key: {service.key}\n")
        self.servers[i] = conftest._start_sidecar(folder, grpc_port=self.ports[i], extra_args=[
            "--config", str(config), "--sequence-peers", self.peers,
            "--grpc-use-ssl-mutual=1", f"--grpc-server-cert={service.cert}",
            f"--grpc-server-key={service.key}", f"--grpc-root-cert={ca.cert}"])
        return self.servers[i]


def started(tmp_path_factory, pki, names):
    cluster = TlsCluster(tmp_path_factory, pki, names)
    for i in range(len(names)):
        cluster.start(i)
    return cluster


def test_sequences_are_forwarded_over_mutual_tls(tmp_path_factory, pki):
    cluster = started(tmp_path_factory, pki, [PEERS_NAME, PEERS_NAME])
    try:
        cluster.wait_until_seen({0, 1})
        got, want = run_interleaved(cluster.running(), "sequence_accumulator", "http")
        assert got == want
    finally:
        cluster.stop()


def test_a_peer_that_cannot_prove_the_name_is_never_ready(tmp_path_factory, pki):
    """The second sidecar wants peers to prove another name: the first's certificate does not
    carry it, so to the second the first stays down (it never forwards to it), while the first,
    which wants the name the second proves, sees it Ready."""
    cluster = started(tmp_path_factory, pki, [PEERS_NAME, "another.infergate.test"])
    try:
        first, second = cluster.servers
        first_address = f"127.0.0.1:{cluster.ports[0]}"
        second_address = f"127.0.0.1:{cluster.ports[1]}"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not cluster._ready_seen_by(first, {second_address}):
            time.sleep(0.1)
        assert cluster._ready_seen_by(first, {second_address})
        time.sleep(2)  # four more probe rounds
        assert not cluster._ready_seen_by(second, {first_address})
        assert first.process.poll() is None and second.process.poll() is None
    finally:
        cluster.stop()
