"""Sequences across replicas: several sidecars started with the same `--sequence-peers` list, each
sequence's requests sent round-robin across all of them, over REST, unary gRPC and gRPC streams.
Every answer must be the one a single server gives (the model contracts in seq_support.py, and a
sidecar without peers run through the same schedule), while peers join and leave.

Sidecar-specific setup: the tests start sidecars of their own (skipped when the suite is pointed at
a running server)."""

import json
import os
import sys
import queue
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2_grpc
import grpc

import conftest
from seq_support import (EXAMPLE_VALUES, expected_outputs, grpc_seq_request, http_output,
                         http_seq, start_error, steps_of, unique_id)
from support import own_sidecars

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from ports import free_ports  # noqa: E402
from rendezvous import owner  # noqa: E402

pytestmark = own_sidecars

MODELS = ("simple_sequence", "sequence_accumulator", "simple_string_dyna_sequence")


class Cluster:
    """Sidecars listed as one another's peers; `start(i)` starts the i-th (listed from the start)."""

    def __init__(self, tmp_path_factory, size):
        self.ports = free_ports(size)
        self.peers = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.servers = [None] * size
        self.tmp = tmp_path_factory

    def start(self, i):
        self.servers[i] = conftest._start_sidecar(
            self.tmp.mktemp(f"peer{i}"), grpc_port=self.ports[i],
            extra_args=["--sequence-peers", self.peers])
        return self.servers[i]

    def running(self):
        return [s for s in self.servers if s is not None and s.process.poll() is None]

    def wait_until_seen(self, ready, timeout=15.0):
        """Until every running sidecar's log says each peer of `ready` (indexes) is Ready and
        every other listed peer is not."""
        want = {f"127.0.0.1:{self.ports[i]}" for i in ready}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._ready_seen_by(s, want) for s in self.running()):
                return
            time.sleep(0.1)
        raise AssertionError(f"peers never saw {sorted(want)} ready")

    def _ready_seen_by(self, server, want):
        state = {}
        for line in list(server.log_lines):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            fields = doc.get("fields", doc)
            if fields.get("message") == "peer changed state":
                state[fields["peer"]] = fields["to"]
        me = f"127.0.0.1:{self.ports[self.servers.index(server)]}"
        return all(state.get(p) == "Ready" for p in want - {me}) and not any(
            v == "Ready" for p, v in state.items() if p not in want)

    def stop(self):
        for s in self.servers:
            if s is not None:
                conftest._stop(s.process)


def three_sidecars(tmp_path_factory):
    c = Cluster(tmp_path_factory, 3)
    try:
        for i in range(3):
            c.start(i)
        c.wait_until_seen({0, 1, 2})
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three sidecars the module's tests share."""
    yield from three_sidecars(tmp_path_factory)


@pytest.fixture
def fresh_cluster(tmp_path_factory):
    """Three sidecars of the test's own, which it may kill or drain."""
    yield from three_sidecars(tmp_path_factory)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    server = conftest._start_sidecar(tmp_path_factory.mktemp("single"))
    yield server
    conftest._stop(server.process)


def seq_id_for(model):
    n = unique_id()
    # The string model adds its id as a number at the END: digits, as Triton's example sends.
    return str(n) if model == "simple_string_dyna_sequence" else n


def http_step(server, model, seq_id, value, start, end):
    r = http_seq(server.http, model, value, seq_id, start=start, end=end)
    return http_output(r) if r.status == 200 else ("error", r.status, r.json()["error"])


def grpc_step(server, model, seq_id, value, start, end):
    channel = grpc.insecure_channel(server.grpc)
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(grpc_seq_request(model, value, seq_id, start=start, end=end),
                                   timeout=30)
        return int(np.frombuffer(response.raw_output_contents[0], np.int32)[0])
    except grpc.RpcError as e:
        return ("error", e.code().name, e.details())
    finally:
        channel.close()


STEPS = {"http": http_step, "grpc": grpc_step}


def run_interleaved(servers, model, transport, sequences=6, length=5, ids=None):
    """`sequences` sequences (with `ids`, or fresh ones), their steps interleaved, step j of
    sequence s sent to server (s + j) mod len(servers); returns {seq_id: outputs} and the
    expected ones."""
    step = STEPS[transport]
    ids = ids or [seq_id_for(model) for _ in range(sequences)]
    values = {sid: [EXAMPLE_VALUES[(k + s) % len(EXAMPLE_VALUES)] for k in range(length)]
              for s, sid in enumerate(ids)}
    got = {sid: [] for sid in ids}
    for j in range(length):
        for s, sid in enumerate(ids):
            value, start, end = steps_of(values[sid])[j]
            got[sid].append(step(servers[(s + j) % len(servers)], model, sid, value, start, end))
    want = {sid: expected_outputs(model, steps_of(values[sid]), _corrid(sid)) for sid in ids}
    return got, want


def _corrid(sid):
    return int(sid)


@pytest.mark.parametrize("transport", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_round_robin_sequences_answer_as_one_server(cluster, single, model, transport):
    got, want = run_interleaved(cluster.running(), model, transport)
    assert got == want
    # The same schedule, the same ids, against one sidecar without peers: the same answers.
    alone, _ = run_interleaved([single], model, transport, ids=list(got))
    assert alone == got


def test_streams_on_every_replica(cluster):
    """One stream per sidecar; each sequence's requests go round-robin over the streams."""
    model = "sequence_accumulator"
    clients, answers = [], []
    for server in cluster.running():
        client = grpcclient.InferenceServerClient(server.grpc)
        q = queue.Queue()
        client.start_stream(callback=lambda result, error, q=q: q.put((result, error)))
        clients.append(client)
        answers.append(q)
    try:
        ids = [unique_id() for _ in range(4)]
        values = {sid: [3, 1, 4, 1, 5, 9][: 3 + i] for i, sid in enumerate(ids)}
        got = {sid: [] for sid in ids}
        for j in range(6):
            for s, sid in enumerate(ids):
                if j >= len(values[sid]):
                    continue
                value, start, end = steps_of(values[sid])[j]
                k = (s + j) % len(clients)
                tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
                clients[k].async_stream_infer(model, [tensor], sequence_id=sid,
                                              sequence_start=start, sequence_end=end)
                result, error = answers[k].get(timeout=30)
                assert error is None, error
                got[sid].append(int(result.as_numpy("OUTPUT")[0][0]))
        for sid in ids:
            assert got[sid] == expected_outputs(model, steps_of(values[sid]), sid)
    finally:
        for client in clients:
            client.stop_stream()


def test_many_interleaved_ids_from_threads(cluster):
    """Sequences run concurrently from several threads, each request on the next replica."""
    model, errors = "sequence_accumulator", []

    def worker(w):
        servers = cluster.running()
        for n in range(4):
            sid = unique_id()
            values = [(w * 7 + n * 3 + k) % 11 for k in range(6)]
            outs = [http_step(servers[(w + k) % len(servers)], model, sid, *step)
                    for k, step in enumerate(steps_of(values))]
            want = expected_outputs(model, steps_of(values), sid)
            if outs != want:
                errors.append((sid, outs, want))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_peer_joining_under_load_breaks_no_sequence(tmp_path_factory):
    """Two of three listed sidecars run; sequences run from threads while the third starts.
    Sequences that the newcomer now owns were started on their old owner: they stay there."""
    c = Cluster(tmp_path_factory, 3)
    try:
        c.start(0)
        c.start(1)
        c.wait_until_seen({0, 1})
        model, errors, done = "sequence_accumulator", [], threading.Event()
        counts = []

        def worker(w):
            n = 0
            while not done.is_set():
                sid = unique_id()
                values = [(w + n + k) % 9 + 1 for k in range(8)]
                outs = []
                for k, step in enumerate(steps_of(values)):
                    servers = c.running()
                    outs.append(http_step(servers[(w + k) % len(servers)], model, sid, *step))
                    time.sleep(0.02)
                want = expected_outputs(model, steps_of(values), sid)
                if outs != want:
                    errors.append((sid, outs, want))
                n += 1
            counts.append(n)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        c.start(2)
        c.wait_until_seen({0, 1, 2})
        time.sleep(2.0)
        done.set()
        for t in threads:
            t.join()
        assert errors == []
        assert sum(counts) >= 12
        # New sequences now start on the newcomer too (it owns about a third of them).
        got, want = run_interleaved(c.running(), model, "http", sequences=9)
        assert got == want
    finally:
        c.stop()


def test_a_peer_killed_mid_sequence_ends_its_sequences_with_an_error(fresh_cluster):
    """Twelve sequences, four owned by each of three sidecars, are started; one sidecar is
    killed (SIGKILL). The sequences it held end with the model's START error, never a wrong
    answer; the others continue exactly. A new START of an ended sequence works."""
    c = fresh_cluster
    model = "sequence_accumulator"
    listed = c.peers.split(",")
    by_owner = {0: [], 1: [], 2: []}
    while min(len(v) for v in by_owner.values()) < 4:
        sid = unique_id()
        if len(by_owner[owner(listed, model, sid)]) < 4:
            by_owner[owner(listed, model, sid)].append(sid)
    ids = [sid for v in by_owner.values() for sid in v]
    for s, sid in enumerate(ids):
        for k, value in enumerate([5, 6]):
            out = http_step(c.servers[(s + k) % 3], model, sid, value, k == 0, False)
            assert out == [5, 11][k], (sid, out)
    c.servers[2].process.kill()
    c.servers[2].process.wait(timeout=10)
    c.wait_until_seen({0, 1})
    survivors = c.running()
    for s, sid in enumerate(ids):
        out = http_step(survivors[s % 2], model, sid, 7, False, True)
        if sid in by_owner[2]:
            assert out == ("error", 400, start_error(sid, model)), (sid, out)
            # Starting it again works, on a survivor.
            assert http_step(survivors[(s + 1) % 2], model, sid, 4, True, False) == 4
            assert http_step(survivors[s % 2], model, sid, 2, False, True) == 6
        else:
            assert out == 18, (sid, out)


def test_a_peer_without_the_model_is_passed_over(tmp_path_factory):
    """A peer that does not serve the model (here unloaded there; in a pod, one still starting)
    holds none of its sequences: the walk goes past its NOT_FOUND to the peer that holds the
    sequence, over REST and gRPC."""
    c = Cluster(tmp_path_factory, 3)
    try:
        c.start(0)
        c.start(2)
        c.wait_until_seen({0, 2})
        model = "sequence_accumulator"
        listed = c.peers.split(",")
        # First in the order of all three is 1, then 0: started while 1 is away, it is held by
        # 0, and the walk from 2 asks 1 first.
        sid = unique_id()
        while not (owner(listed, model, sid) == 1
                   and owner([listed[0], listed[2]], model, sid) == 0):
            sid = unique_id()
        assert http_step(c.servers[2], model, sid, 5, True, False) == 5
        c.start(1)
        r = urllib.request.urlopen(urllib.request.Request(
            f"http://{c.servers[1].http}/v2/repository/models/{model}/unload", data=b"{}",
            method="POST"), timeout=10)
        assert r.status == 200
        c.wait_until_seen({0, 1, 2})
        assert http_step(c.servers[2], model, sid, 6, False, False) == 11
        assert grpc_step(c.servers[2], model, sid, 7, False, True) == 18
    finally:
        c.stop()


def admin_address(server):
    """The admin port's address, from the sidecar's log of what it bound."""
    for line in list(server.log_lines):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        address = doc.get("fields", doc).get("admin_addr")
        if address:
            return conftest.connectable(address)
    raise AssertionError(f"no admin_addr logged:\n{server.log_tail()}")


def drain(server, query, answers):
    """Calls the preStop hook (`/drain?QUERY`), which answers when the drain is over."""
    with urllib.request.urlopen(f"http://{admin_address(server)}/drain?{query}", timeout=120) as r:
        answers.append(json.loads(r.read()))


def test_a_draining_peer_keeps_its_sequences_until_they_end(fresh_cluster):
    """The pod of one of three sidecars terminates (its preStop hook drains it, with
    `sequences=`) while six sequences run, three of them held there. It turns not ready and no
    client sends it anything more, yet every sequence continues exactly through the other two,
    which send it the requests of its own: its drain lasts until those have ended, not longer."""
    c = fresh_cluster
    model = "sequence_accumulator"
    listed = c.peers.split(",")
    leaving, staying = [], []
    while len(leaving) < 3 or len(staying) < 3:
        sid = unique_id()
        mine = leaving if owner(listed, model, sid) == 2 else staying
        if len(mine) < 3:
            mine.append(sid)
    ids = leaving + staying
    for s, sid in enumerate(ids):
        assert http_step(c.servers[s % 3], model, sid, 5, True, False) == 5, sid

    answers = []
    drainer = threading.Thread(target=drain, args=(c.servers[2], "seconds=1&sequences=60",
                                                   answers))
    drainer.start()
    c.wait_until_seen({0, 1})
    staying_servers = c.servers[:2]
    for k, value in enumerate([6, 7, 8]):
        for s, sid in enumerate(ids):
            step = grpc_step if k % 2 else http_step
            out = step(staying_servers[(s + k) % 2], model, sid, value, False, False)
            assert out == 5 + sum([6, 7, 8][:k + 1]), (sid, k, out)
    time.sleep(1.5)  # past the drain's own seconds: it waits for the sequences held there
    assert drainer.is_alive(), answers
    for s, sid in enumerate(ids):
        assert http_step(staying_servers[s % 2], model, sid, 1, False, True) == 27, sid
    drainer.join(timeout=10)
    assert not drainer.is_alive(), "the drain went on after the sequences held there ended"
    assert answers == [{"draining": True, "seconds": 1, "sequences_held": 0}], answers


def test_a_drain_ends_at_its_bound_with_sequences_still_held(tmp_path_factory):
    """A sequence held by a draining sidecar that no client goes on with: the drain ends at its
    bound (`seconds` + `sequences`, here before the model's 5 s idle timeout), and says how many
    sequences were still held there."""
    c = Cluster(tmp_path_factory, 2)
    try:
        c.start(0)
        c.start(1)
        c.wait_until_seen({0, 1})
        model = "sequence_accumulator"
        sid = unique_id()
        while owner(c.peers.split(","), model, sid) != 1:
            sid = unique_id()
        assert http_step(c.servers[0], model, sid, 5, True, False) == 5
        answers = []
        drain(c.servers[1], "seconds=1&sequences=1", answers)
        assert answers == [{"draining": True, "seconds": 1, "sequences_held": 1}], answers
    finally:
        c.stop()


def test_shared_memory_cannot_follow_a_sequence_to_another_replica(cluster):
    """A request whose tensors are in the client's shared memory is served where it lands only
    if its sequence is held there; otherwise it is refused, with the reason."""
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    model = "sequence_accumulator"
    servers = cluster.running()
    # A sequence started on one replica, then a request with a shared-memory input sent to the
    # replicas in turn: where the sequence is not held, the refusal names shared memory.
    sid = unique_id()
    assert http_step(servers[0], model, sid, 1, True, False) == 1
    refused = served = 0
    for server in servers:
        client = httpclient.InferenceServerClient(server.http)
        key = f"/infergate-peers-{sid}-{server.grpc.rsplit(':', 1)[1]}"
        handle = shm.create_shared_memory_region("in", key, 4)
        try:
            shm.set_shared_memory_region(handle, [np.array([[2]], dtype=np.int32)])
            client.register_system_shared_memory("in", key, 4)
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_shared_memory("in", 4)
            try:
                client.infer(model, [tensor], sequence_id=sid)
                served += 1
            except Exception as e:  # noqa: BLE001 (the client's exception type)
                assert "shared memory" in str(e), e
                refused += 1
            client.unregister_system_shared_memory("in")
        finally:
            shm.destroy_shared_memory_region(handle)
    # Where it is held (exactly one replica) it is served; elsewhere refused.
    assert (served, refused) == (1, len(servers) - 1)
    assert http_step(servers[0], model, sid, 0, False, True) == 1 + 2


@pytest.mark.parametrize("args, env, words", [
    (["--sequence-peers-service", "models/seq-peers"], {}, "$POD_IP is not set"),
    (["--sequence-peers-service", "seq-peers"], {"POD_IP": "pod-a", "POD_NAMESPACE": "models"},
     "is not an IP address"),
    (["--sequence-peers-service", "seq-peers"], {"POD_IP": "10.0.0.1"}, "no namespace given"),
    (["--sequence-peers-service", "a/b/c"], {"POD_IP": "10.0.0.1"}, "is not [NAMESPACE/]SERVICE"),
])
def test_discovery_without_what_it_needs_stops_the_sidecar_at_start(args, env, words):
    """--sequence-peers-service needs the pod's address and a Service name: without them the
    sidecar does not start (and so never serves sequences as if it were alone)."""
    import subprocess
    binary = os.environ.get("INFERGATE_SIDECAR_BIN", str(conftest.DEFAULT_SIDECAR_BIN))
    base = {k: v for k, v in os.environ.items() if k not in ("POD_IP", "POD_NAMESPACE")}
    (grpc_port,) = free_ports(1)
    done = subprocess.run([binary, "--http-port", "0", "--grpc-port", str(grpc_port),
                           "--metrics-port", "0", "--admin-port", "0", *args],
                          capture_output=True, text=True, timeout=30, env={**base, **env})
    assert done.returncode != 0
    assert words in done.stdout + done.stderr, done.stdout + done.stderr
