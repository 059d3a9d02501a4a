"""A canary's share of the calls (`--canary-peers`, `--canary-traffic-percent-file`): a sidecar
given a canary sends that share of its clients' calls to the canary's sidecar, drawn per call, so
that one gRPC channel splits as well as REST; all of a sequence goes one way; the share changes
without a restart; a canary that is gone costs no call.

Which variant served a call is read from each sidecar's own statistics: a call the canary serves
is counted there, not on the sidecar that forwarded it.

Sidecar-specific setup: the tests start sidecars of their own (skipped when the suite is pointed at
a running server)."""

import json
import math
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2_grpc

import conftest
from seq_support import EXAMPLE_VALUES, expected_outputs, grpc_seq_request, steps_of, unique_id
from support import own_sidecars

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from ports import free_ports  # noqa: E402
from rendezvous import percentile  # noqa: E402

pytestmark = own_sidecars

CALLS = 2000


class Pair:
    """A canary sidecar, and a sidecar that gives it the share its file holds."""

    def __init__(self, tmp_path_factory, percent):
        (self.canary_port,) = free_ports(1)
        self.share = tmp_path_factory.mktemp("share") / "percent"
        self.share.write_text(f"{percent}\n")
        self.canary = conftest._start_sidecar(tmp_path_factory.mktemp("canary"),
                                              grpc_port=self.canary_port)
        self.stable = conftest._start_sidecar(
            tmp_path_factory.mktemp("stable"),
            extra_args=["--canary-peers", f"127.0.0.1:{self.canary_port}",
                        "--canary-traffic-percent-file", str(self.share)])
        self.wait_for_log(self.stable, lambda f: f.get("message") == "peer changed state"
                          and f.get("to") == "Ready")

    def set_share(self, percent):
        after = len(self.stable.log_lines)
        self.share.write_text(f"{percent}\n")
        self.wait_for_log(self.stable, lambda f: f.get("message") == "canary share changed"
                          and f.get("to") == percent, after=after)

    @staticmethod
    def wait_for_log(server, match, timeout=15.0, after=0):
        """Until a line logged after the first `after` matches."""
        deadline = time.monotonic() + timeout
        seen = after
        while time.monotonic() < deadline:
            lines = list(server.log_lines)
            for line in lines[seen:]:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if match(doc.get("fields", doc)):
                    return
            seen = len(lines)
            time.sleep(0.05)
        raise AssertionError(f"no such log line within {timeout} s:\n{server.log_tail()}")

    def stop(self):
        for server in (self.stable, self.canary):
            conftest._stop(server.process)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    p = Pair(tmp_path_factory, 30)
    yield p
    p.stop()


def served(server, model="simple"):
    """How many inferences of `model` `server` ran itself."""
    with urllib.request.urlopen(f"http://{server.http}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"]
    return sum(s["inference_count"] for s in stats)


def variant_calls(server):
    """`infergate_variant_requests_total` of `server`, by (variant, outcome)."""
    with urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("infergate_variant_requests_total{"):
            labels, value = line[len("infergate_variant_requests_total{"):].split("} ")
            fields = dict(kv.split("=") for kv in labels.split(","))
            out[(fields["variant"].strip('"'), fields["outcome"].strip('"'))] = int(float(value))
    return out


def within_binomial(k, n, percent):
    """Whether k of n is a plausible binomial count at `percent` (4.5 standard deviations: a
    false failure about once in 150,000 runs)."""
    p = percent / 100
    return abs(k - n * p) <= 4.5 * math.sqrt(n * p * (1 - p))


def simple_inputs(module, a, b):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def call_many(client, module, n):
    """`n` calls of `simple` on one client (one connection), each checked."""
    rng = np.random.default_rng(7)
    for _ in range(n):
        a = rng.integers(-1000, 1000, size=(1, 16), dtype=np.int32)
        b = rng.integers(-1000, 1000, size=(1, 16), dtype=np.int32)
        result = client.infer("simple", simple_inputs(module, a, b))
        assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
        assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_one_connections_calls_split_within_binomial_tolerance(pair, protocol):
    before_canary, before_stable = served(pair.canary), served(pair.stable)
    before_metrics = variant_calls(pair.stable)
    if protocol == "grpc":
        client = grpcclient.InferenceServerClient(pair.stable.grpc)
        call_many(client, grpcclient, CALLS)
    else:
        client = httpclient.InferenceServerClient(pair.stable.http, concurrency=1)
        call_many(client, httpclient, CALLS)
    client.close()
    to_canary = served(pair.canary) - before_canary
    here = served(pair.stable) - before_stable
    assert to_canary + here == CALLS
    assert within_binomial(to_canary, CALLS, 30), f"{to_canary} of {CALLS} went to the canary"
    metrics = variant_calls(pair.stable)
    grown = {k: metrics.get(k, 0) - before_metrics.get(k, 0) for k in metrics}
    assert grown == {("stable", "success"): here, ("stable", "failure"): 0,
                     ("canary", "success"): to_canary, ("canary", "failure"): 0}


def test_each_sequence_goes_whole_to_the_variant_of_its_percentile(pair):
    """Sixty sequences on one channel, four at a time interleaved (within the model's slots):
    every answer is exact (a sequence split between the variants would fail or sum wrong), and
    the canary ran exactly the requests of the sequences whose percentile is below its share."""
    model = "sequence_accumulator"
    ids = [unique_id() for _ in range(60)]
    values = {sid: [EXAMPLE_VALUES[(k + s) % len(EXAMPLE_VALUES)] for k in range(4)]
              for s, sid in enumerate(ids)}
    before = served(pair.canary, model)
    channel = grpc.insecure_channel(pair.stable.grpc)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    got = {sid: [] for sid in ids}
    for group in range(0, len(ids), 4):
        for j in range(4):
            for sid in ids[group:group + 4]:
                value, start, end = steps_of(values[sid])[j]
                request = grpc_seq_request(model, value, sid, start=start, end=end)
                response = stub.ModelInfer(request, timeout=30)
                got[sid].append(int(np.frombuffer(response.raw_output_contents[0], np.int32)[0]))
    channel.close()
    want = {sid: expected_outputs(model, steps_of(values[sid]), sid) for sid in ids}
    assert got == want
    on_canary = [sid for sid in ids if percentile(model, sid) < 30]
    assert 0 < len(on_canary) < len(ids)
    assert served(pair.canary, model) - before == 4 * len(on_canary)


def test_the_share_changes_without_a_restart(pair):
    client = grpcclient.InferenceServerClient(pair.stable.grpc)
    try:
        pair.set_share(0)
        before = served(pair.canary)
        call_many(client, grpcclient, 200)
        assert served(pair.canary) == before
        pair.set_share(100)
        before = served(pair.canary)
        call_many(client, grpcclient, 200)
        assert served(pair.canary) - before == 200
    finally:
        client.close()
        pair.set_share(30)


def test_a_canary_that_is_gone_costs_no_call(tmp_path_factory):
    p = Pair(tmp_path_factory, 100)
    try:
        conftest._stop(p.canary.process)
        client = grpcclient.InferenceServerClient(p.stable.grpc)
        # At once, before a probe has seen it go: the forward finds it unreachable.
        call_many(client, grpcclient, 200)
        client.close()
        assert served(p.stable) == 200
        assert variant_calls(p.stable)[("stable", "success")] == 200
    finally:
        p.stop()


def classify(module, address, x):
    client = module.InferenceServerClient(address)
    try:
        inputs = [module.InferInput("INPUT0", list(x.shape), "FP32")]
        inputs[0].set_data_from_numpy(x)
        kwargs = {"binary_data": False} if module is httpclient else {}
        outputs = [module.InferRequestedOutput("OUTPUT0", class_count=3, **kwargs)]
        result = client.infer("classifier", inputs, outputs=outputs)
        return [v.decode() if isinstance(v, bytes) else v
                for v in result.as_numpy("OUTPUT0").reshape(-1)]
    finally:
        client.close()


@pytest.mark.parametrize("module", [grpcclient, httpclient], ids=["grpc", "http"])
def test_the_canarys_answer_is_the_clients_as_the_canary_gives_it(pair, module):
    """Classification and binary or JSON outputs come back through the split as the canary
    answers them to a client of its own."""
    x = np.array([[0.5, 3.3, -1.0, 2.25]], dtype=np.float32)
    address = lambda s: s.grpc if module is grpcclient else s.http  # noqa: E731
    direct = classify(module, address(pair.canary), x)
    try:
        pair.set_share(100)
        before = served(pair.canary, "classifier")
        assert classify(module, address(pair.stable), x) == direct
        assert served(pair.canary, "classifier") == before + 1
    finally:
        pair.set_share(30)
