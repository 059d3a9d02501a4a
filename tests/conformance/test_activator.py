"""The activator (`server.activator`): the sidecar's binary in front of a service with no ready
sidecar. Calls it gets are held, in order and within caps, until a sidecar of the service is
ready, then passed on and answered by that sidecar; calls past the caps get 503 / UNAVAILABLE with
Retry-After; calls held past the timeout get 503 / UNAVAILABLE saying so; a gRPC caller's own
deadline ends its hold with DEADLINE_EXCEEDED.

Here the service's sidecar is a real sidecar (built-in models) on fixed ports, started while calls
wait; in Kubernetes it is the service's pods, and what starts them is the scale subresource
(tests/e2e/test_8_scale_from_zero.py).

Sidecar-specific setup: the tests start processes of their own (skipped when the suite is pointed
at a running server)."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

import conftest
from seq_support import EXAMPLE_VALUES, expected_outputs, grpc_seq_request, steps_of, unique_id
from support import own_sidecars, raw_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from ports import free_ports  # noqa: E402

pytestmark = own_sidecars


class Activator:
    """An activator process in front of the sidecar that will listen on `grpc_port` and
    `http_port`."""

    def __init__(self, tmp_dir, grpc_port, http_port, limits=None, **settings):
        binary = Path(os.environ.get("INFERGATE_SIDECAR_BIN", str(conftest.DEFAULT_SIDECAR_BIN)))
        activator = {"peers": [f"127.0.0.1:{grpc_port}"], "upstream_http_port": http_port}
        activator.update(settings)
        config = {"server": {"http_port": 0, "grpc_port": 0, "metrics_port": 0, "admin_port": 0,
                             "log_format": "json", "activator": activator},
                  "limits": limits or {}}
        path = tmp_dir / "activator.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        self.process = subprocess.Popen([str(binary), "--config", str(path)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines = []
        found = {}
        ready = threading.Event()

        def drain():
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))
                if not ready.is_set():
                    conftest.parse_addrs_from_line(line, found)
                    if "admin_addr" in line:
                        doc = json.loads(line)
                        address = doc.get("fields", doc).get("admin_addr")
                        if address:
                            found.setdefault("admin_addr", address)
                    if all(k in found for k in (*conftest.ADDR_KEYS, "admin_addr")):
                        ready.set()

        threading.Thread(target=drain, daemon=True).start()
        assert ready.wait(20), "the activator did not start:\n" + "\n".join(self.lines[-30:])
        self.http = conftest.connectable(found["http_addr"])
        self.grpc = conftest.connectable(found["grpc_addr"])
        self.metrics = conftest.connectable(found["metrics_addr"])
        self.admin = conftest.connectable(found["admin_addr"])

    def status(self):
        """The admin port's /status, from loopback (as the pod's own would read it)."""
        with urllib.request.urlopen(f"http://{self.admin}/status", timeout=10) as r:
            return json.load(r)["activator"]

    def calls(self):
        """`infergate_activator_calls_total` by outcome, and the held calls now."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("infergate_activator_calls_total{"):
                outcome = line.split('"')[1]
                out[outcome] = int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("infergate_activator_held_calls "):
                out["held"] = int(float(line.rsplit(" ", 1)[1]))
        return out

    def stop(self):
        conftest._stop(self.process)


class Service:
    """The ports the service's sidecar will take, an activator in front of them, and the sidecar
    once started."""

    def __init__(self, tmp_path_factory, limits=None, **settings):
        self.tmp = tmp_path_factory
        self.grpc_port, self.http_port = free_ports(2)
        self.activator = Activator(tmp_path_factory.mktemp("activator"), self.grpc_port,
                                   self.http_port, limits, **settings)
        self.sidecar = None

    def start_sidecar(self):
        self.sidecar = conftest._start_sidecar(self.tmp.mktemp("sidecar"),
                                               grpc_port=self.grpc_port, http_port=self.http_port)

    def stop(self):
        self.activator.stop()
        if self.sidecar:
            conftest._stop(self.sidecar.process)


@pytest.fixture
def service(tmp_path_factory):
    s = Service(tmp_path_factory)
    yield s
    s.stop()


def simple_inputs(module, a, b):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def check_simple(result):
    assert (result.as_numpy("OUTPUT0") == A + B).all()
    assert (result.as_numpy("OUTPUT1") == A - B).all()


def in_thread(fn):
    """Runs `fn` in a thread; the returned function joins it and gives its result (or raises)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join(timeout=60):
        thread.join(timeout)
        assert not thread.is_alive(), "the call never finished"
        if "error" in box:
            raise box["error"]
        return box["value"]

    join.done = lambda: not thread.is_alive()
    return join


def rest_infer(address):
    client = httpclient.InferenceServerClient(address, network_timeout=120)
    try:
        return client.infer("simple", simple_inputs(httpclient, A, B))
    finally:
        client.close()


def grpc_infer(address):
    client = grpcclient.InferenceServerClient(address)
    try:
        return client.infer("simple", simple_inputs(grpcclient, A, B), client_timeout=120)
    finally:
        client.close()


def stream_sequence(address, model, sid, values):
    """A whole sequence over one ModelStreamInfer stream: its outputs, in order."""
    channel = grpc.insecure_channel(address)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    requests = [grpc_seq_request(model, v, sid, start=s, end=e) for v, s, e in steps_of(values)]
    try:
        out = []
        for response in stub.ModelStreamInfer(iter(requests), timeout=120):
            assert not response.error_message, response.error_message
            out.append(int(np.frombuffer(response.infer_response.raw_output_contents[0],
                                         np.int32)[0]))
        return out
    finally:
        channel.close()


def unary_sequence(address, model, sid, values):
    channel = grpc.insecure_channel(address)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        out = []
        for v, s, e in steps_of(values):
            response = stub.ModelInfer(grpc_seq_request(model, v, sid, start=s, end=e), timeout=120)
            out.append(int(np.frombuffer(response.raw_output_contents[0], np.int32)[0]))
        return out
    finally:
        channel.close()


def wait_held(activator, n, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if activator.calls().get("held") == n:
            return
        time.sleep(0.05)
    raise AssertionError(f"never {n} held calls: {activator.calls()}")


def test_calls_held_while_no_sidecar_is_ready_are_answered_by_it_once_it_is(service):
    """REST and gRPC unary calls, a stream carrying a whole sequence and a unary sequence, a
    health check and model metadata: all held (none answered, none refused) until the sidecar
    starts, then every answer exact."""
    a = service.activator
    model = "sequence_accumulator"
    values = EXAMPLE_VALUES[:4]
    stream_id, unary_id = unique_id(), unique_id()
    waiting = {
        "rest": in_thread(lambda: rest_infer(a.http)),
        "grpc": in_thread(lambda: grpc_infer(a.grpc)),
        "stream": in_thread(lambda: stream_sequence(a.grpc, model, stream_id, values)),
        "sequence": in_thread(lambda: unary_sequence(a.grpc, model, unary_id, values)),
        "ready": in_thread(lambda: raw_request(a.http, "GET", "/v2/health/ready",
                                               timeout=120).status),
        "metadata": in_thread(lambda: json.loads(raw_request(
            a.http, "GET", "/v2/models/simple", timeout=120).body)),
    }
    wait_held(a, len(waiting))
    time.sleep(0.5)
    assert not any(join.done() for join in waiting.values()), "a call was answered with no sidecar"
    held = a.status()
    assert (held["phase"], held["held_calls"], held["ready_sidecars"]) == ("Starting", 6, 0), held
    # Four of them are inferences, the service's traffic; the health check and metadata are not.
    assert (held["in_flight"], held["quiet_seconds"]) == (4, 0), held
    service.start_sidecar()
    check_simple(waiting["rest"]())
    check_simple(waiting["grpc"]())
    want = expected_outputs(model, steps_of(values), stream_id)
    assert waiting["stream"]() == want
    assert waiting["sequence"]() == expected_outputs(model, steps_of(values), unary_id)
    assert waiting["ready"]() == 200
    direct = json.loads(raw_request(service.sidecar.http, "GET", "/v2/models/simple").body)
    assert waiting["metadata"]() == direct
    calls = a.calls()
    assert calls["released"] == len(waiting), calls
    status = a.status()
    assert status["phase"] == "Ready" and status["held_calls"] == 0, status
    assert status["in_flight"] == 0, status
    assert status["calls"]["released"] == len(waiting) and status["cold_starts"] == 1, status
    assert calls["refused"] == calls["timed_out"] == calls["failed"] == 0, calls


def test_once_a_sidecar_is_ready_calls_pass_straight_on(service):
    a = service.activator
    service.start_sidecar()
    deadline = time.monotonic() + 10
    while raw_request(a.http, "GET", "/v2/health/ready", timeout=10).status != 200:
        assert time.monotonic() < deadline
    before = a.calls()
    for _ in range(20):
        check_simple(rest_infer(a.http))
        check_simple(grpc_infer(a.grpc))
    after = a.calls()
    assert after["passed"] - before["passed"] == 40
    assert after["released"] == before["released"]


def test_quiet_seconds_count_from_the_last_inference_not_from_health_checks(service):
    """The operator takes a service whose pods cannot start to zero once its activators have been
    quiet for idleSeconds: a client polling readiness must not keep it up."""
    a = service.activator
    service.start_sidecar()
    deadline = time.monotonic() + 10
    while raw_request(a.http, "GET", "/v2/health/ready", timeout=10).status != 200:
        assert time.monotonic() < deadline
    check_simple(rest_infer(a.http))
    time.sleep(2.2)
    for _ in range(5):
        assert raw_request(a.http, "GET", "/v2/health/ready", timeout=10).status == 200
        assert raw_request(a.http, "GET", "/v2/models/simple", timeout=10).status == 200
    quiet = a.status()
    assert quiet["in_flight"] == 0 and quiet["quiet_seconds"] >= 2, quiet
    check_simple(grpc_infer(a.grpc))
    assert a.status()["quiet_seconds"] == 0


def test_held_calls_past_the_cap_are_refused_with_retry_after(tmp_path_factory):
    s = Service(tmp_path_factory, max_held_calls=3, retry_after_seconds=7)
    try:
        held = [in_thread(lambda: rest_infer(s.activator.http)) for _ in range(3)]
        wait_held(s.activator, 3)
        response = raw_request(
            s.activator.http, "POST", "/v2/models/simple/infer",
            body=json.dumps({"inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
            ]}).encode(), headers={"Content-Type": "application/json"}, timeout=10)
        assert response.status == 503, response
        assert response.headers["retry-after"] == "7"
        assert "holds as many calls as it may" in response.error
        with pytest.raises(grpc.RpcError) as refused:
            channel = grpc.insecure_channel(s.activator.grpc)
            try:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                    service_pb2.ServerReadyRequest(), timeout=10)
            finally:
                channel.close()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "holds as many calls as it may" in refused.value.details()
        s.start_sidecar()
        for join in held:
            check_simple(join())
        assert s.activator.calls()["refused"] == 2
    finally:
        s.stop()


def test_a_body_past_the_cap_on_held_bytes_is_refused(tmp_path_factory):
    s = Service(tmp_path_factory, max_held_bytes=1000)
    try:
        body = json.dumps({"id": "x" * 2000, "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
        ]})
        response = raw_request(s.activator.http, "POST", "/v2/models/simple/infer", body=body,
                               headers={"Content-Type": "application/json"}, timeout=10)
        assert response.status == 503, response
        assert "holds as many calls as it may" in response.error
        assert s.activator.calls()["held"] == 0, "the refused call's bytes were given back"
    finally:
        s.stop()


def test_a_body_past_the_processs_budget_is_refused_as_busy_once_ready(tmp_path_factory):
    s = Service(tmp_path_factory, limits={"max_inflight_request_bytes": 1024,
                                          "max_http_body_bytes": 1024,
                                          "max_grpc_message_bytes": 1024})
    try:
        s.start_sidecar()
        body = json.dumps({"id": "x" * 4000, "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
        ]})
        deadline = time.monotonic() + 10
        while raw_request(s.activator.http, "GET", "/v2/health/ready").status != 200:
            assert time.monotonic() < deadline
        response = raw_request(s.activator.http, "POST", "/v2/models/simple/infer", body=body,
                               headers={"Content-Type": "application/json"}, timeout=10)
        assert response.status == 503, response
        assert response.error == "server is busy"
        check_simple(rest_infer(s.activator.http))
    finally:
        s.stop()


def test_no_sidecar_in_time_is_said_and_a_callers_deadline_is_kept(tmp_path_factory):
    s = Service(tmp_path_factory, hold_timeout_seconds=2)
    try:
        started = time.monotonic()
        response = raw_request(s.activator.http, "GET", "/v2/health/ready", timeout=30)
        assert response.status == 503, response
        assert "no replica of the service was ready within 2 s" in response.error
        assert time.monotonic() - started >= 1.9
        with pytest.raises(grpc.RpcError) as late:
            grpc_infer_raw(s.activator.grpc, timeout=30)
        assert late.value.code() == grpc.StatusCode.UNAVAILABLE
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as deadline:
            grpc_infer_raw(s.activator.grpc, timeout=0.5)
        assert deadline.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 1.9, "the caller's deadline ended the hold"
    finally:
        s.stop()


def grpc_infer_raw(address, timeout):
    channel = grpc.insecure_channel(address)
    try:
        request = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            request.raw_input_contents.append(A.tobytes())
        return service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=timeout)
    finally:
        channel.close()
