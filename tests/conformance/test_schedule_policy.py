"""The schedule_policy extension: a request's `priority` and `timeout` parameters under the
queue policies of its model's configuration.

The queue tests load `custom_identity_int32` (an INT32 identity that waits its
`execute_delay_ms` parameter) with a whole configuration: one instance, a batch of at most one
(so that no two waiting requests run together), a delay, and a `dynamic_batching` section. Each
restores the model's own configuration afterwards. Triton takes a load's configuration as the
whole configuration and the sidecar lays it over the model's own, so the same body serves both.
In front of an upstream the models are loaded in the model container, and these tests are
skipped there. The sequence test uses the built-in `sequence_accumulator` (8 slots).
"""

import json
import os
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support import local_models

BACKEND = os.environ.get("INFERGATE_BACKEND", "").strip().lower()

MODEL = "custom_identity_int32"
DELAY_MS = 1000


@pytest.mark.skipif(
    BACKEND not in ("upstream-kserve", "upstream-mlserver"),
    reason="in front of a model server without priority queues only")
def test_the_extension_is_not_listed_in_front_of_a_server_without_it(http_client, grpc_client):
    """KServe's ModelServer and MLServer do not list schedule_policy: `priority` and `timeout`
    reach them as plain parameters, so the sidecar does not list it either."""
    assert "schedule_policy" not in http_client.get_server_metadata()["extensions"]
    assert "schedule_policy" not in grpc_client.get_server_metadata().extensions


@pytest.mark.skipif(
    BACKEND in ("upstream-kserve", "upstream-mlserver"),
    reason="the model server does not offer schedule_policy (the test above)")
def test_the_extension_is_listed_where_triton_lists_it(http_client, grpc_client):
    extensions = http_client.get_server_metadata()["extensions"]
    assert "schedule_policy" in extensions
    at = extensions.index("schedule_policy")
    assert extensions[at - 1] == "model_repository(unload_dependents)", extensions
    assert extensions[at + 1] == "model_configuration", extensions
    assert list(grpc_client.get_server_metadata().extensions) == extensions


def load(raw_http, config):
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    resp = raw_http("POST", f"/v2/repository/models/{MODEL}/load", body)
    assert resp.status == 200, resp
    return resp


@pytest.fixture
def queued_model(raw_http):
    """load(dynamic_batching) puts MODEL behind a queue with those settings; restored after."""
    resp = raw_http("GET", f"/v2/models/{MODEL}/config")
    assert resp.status == 200, resp
    own = resp.json()

    def configure(dynamic_batching):
        config = dict(own)
        config.update({
            "max_batch_size": 1,
            "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
            "parameters": {"execute_delay_ms": {"string_value": str(DELAY_MS)}},
            "dynamic_batching": dynamic_batching,
        })
        load(raw_http, config)

    yield configure
    unload = raw_http("POST", f"/v2/repository/models/{MODEL}/unload")
    assert unload.status == 200, unload
    deadline = time.monotonic() + 20
    while True:
        resp = raw_http("POST", f"/v2/repository/models/{MODEL}/load")
        if resp.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert resp.status == 200, resp


def infer_json(raw_http, value, **parameters):
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
    }
    if parameters:
        body["parameters"] = parameters
    return raw_http("POST", f"/v2/models/{MODEL}/infer", json.dumps(body).encode())


class Requests:
    """Requests sent from threads, `gap` seconds apart; each answer with when it arrived."""

    def __init__(self, raw_http):
        self.raw_http = raw_http
        self.answers = {}
        self.threads = []
        self.lock = threading.Lock()

    def send(self, name, value, gap=0.25, **parameters):
        def run():
            resp = infer_json(self.raw_http, value, **parameters)
            with self.lock:
                self.answers[name] = (time.monotonic(), resp)

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)
        time.sleep(gap)

    def wait(self):
        for thread in self.threads:
            thread.join(timeout=60)
        return self.answers

    def order(self):
        """The names of the requests that succeeded, in the order their answers arrived."""
        done = sorted((at, name) for name, (at, resp) in self.wait().items() if resp.status == 200)
        return [name for _, name in done]


def rejected_failures(metrics_url):
    """nv_inference_request_failure{reason="REJECTED"} of MODEL."""
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_request_failure{") and f'model="{MODEL}"' in line \
                and 'reason="REJECTED"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no REJECTED failure counter for {MODEL}")


def output(resp):
    return resp.json()["outputs"][0]["data"]


@local_models
def test_a_full_queue_refuses_in_tritons_words(raw_http, metrics_url, queued_model):
    queued_model({"default_queue_policy": {"max_queue_size": 1}})
    rejected_before = rejected_failures(metrics_url)
    requests = Requests(raw_http)
    requests.send("running", 1)
    requests.send("queued", 2)
    refused = infer_json(raw_http, 3)
    assert refused.status == 503, refused
    assert refused.error == "[request id: <id_unknown>] Exceeds maximum queue size"
    answers = requests.wait()
    assert [output(answers[n][1]) for n in ("running", "queued")] == [[1], [2]]
    # The queued request waited for the running one (sent 0.25 s after it, which ran 1 s): that
    # wait is queue time. The refusal came before the request was queued: Triton counts it
    # neither as a failed inference nor as a REJECTED failure.
    stats = raw_http("GET", f"/v2/models/{MODEL}/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["queue"]["ns"] > 0.5e9, stats
    assert stats["inference_stats"]["fail"]["count"] == 0, stats
    assert rejected_failures(metrics_url) == rejected_before


@local_models
def test_a_full_queue_refuses_over_grpc_with_the_request_id(grpc_url, queued_model, raw_http):
    queued_model({"default_queue_policy": {"max_queue_size": 1}})
    requests = Requests(raw_http)
    requests.send("running", 1)
    requests.send("queued", 2)
    client = grpcclient.InferenceServerClient(grpc_url)
    data = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    data.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer(MODEL, [data], request_id="full")
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert refused.value.message() == "[request id: full] Exceeds maximum queue size"
    requests.wait()


@local_models
def test_a_request_waiting_past_the_default_timeout_is_rejected(raw_http, metrics_url, queued_model):
    queued_model({"default_queue_policy": {"default_timeout_microseconds": 200000}})
    rejected_before = rejected_failures(metrics_url)
    requests = Requests(raw_http)
    requests.send("running", 1)
    started = time.monotonic()
    expired = infer_json(raw_http, 2)
    assert expired.status == 503, expired
    assert expired.error == "Request timeout expired"
    assert time.monotonic() - started < DELAY_MS / 1000 + 1
    assert output(requests.wait()["running"][1]) == [1]
    stats = raw_http("GET", f"/v2/models/{MODEL}/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 1, "a queued request that timed out failed"
    assert rejected_failures(metrics_url) == rejected_before + 1


@local_models
def test_a_request_timeout_shortens_an_overridable_default(raw_http, queued_model):
    queued_model({"default_queue_policy": {
        "default_timeout_microseconds": 10000000, "allow_timeout_override": True}})
    requests = Requests(raw_http)
    requests.send("running", 1)
    requests.send("patient", 2, timeout=20000000)
    short = infer_json(raw_http, 3, timeout=100000)
    assert short.status == 503, short
    assert short.error == "Request timeout expired"
    answers = requests.wait()
    assert output(answers["patient"][1]) == [2], "a longer timeout than the default is ignored"


@local_models
def test_a_request_timeout_is_ignored_without_an_override(raw_http, queued_model):
    queued_model({"default_queue_policy": {"allow_timeout_override": False}})
    requests = Requests(raw_http)
    requests.send("running", 1)
    waited = infer_json(raw_http, 2, timeout=1000)
    assert waited.status == 200, waited
    assert output(waited) == [2]
    requests.wait()


@local_models
def test_the_highest_priority_waiting_runs_first(raw_http, queued_model):
    queued_model({"priority_levels": 2, "default_priority_level": 2})
    requests = Requests(raw_http)
    requests.send("running", 1)
    requests.send("low", 2, priority=2)
    requests.send("default", 3)
    requests.send("high", 4, priority=1)
    assert requests.order() == ["running", "high", "low", "default"]


@local_models
def test_a_delayed_request_goes_behind_the_timely_ones(raw_http, queued_model):
    queued_model({"default_queue_policy": {
        "timeout_action": "DELAY", "default_timeout_microseconds": 10000000,
        "allow_timeout_override": True}})
    requests = Requests(raw_http)
    requests.send("running", 1)
    requests.send("delayed", 2, gap=0.4, timeout=100000)
    requests.send("timely", 3)
    assert requests.order() == ["running", "timely", "delayed"]


@local_models
@pytest.mark.parametrize("config", [
    # "default priority level must be in range [1, 2] for custom_identity_int32"
    {"priority_levels": 2},
    # "priority queue policy must have priority level in range [1, 2] for custom_identity_int32"
    {"priority_levels": 2, "default_priority_level": 1,
     "priority_queue_policy": {"3": {"max_queue_size": 1}}},
])
def test_priority_settings_triton_refuses_fail_the_load(raw_http, queued_model, config):
    """Triton validates the configuration while it polls the repository: the load fails as a
    failed poll, with the reason (above each case) in its log alone."""
    own = raw_http("GET", f"/v2/models/{MODEL}/config").json()
    own["dynamic_batching"] = config
    body = json.dumps({"parameters": {"config": json.dumps(own)}}).encode()
    resp = raw_http("POST", f"/v2/repository/models/{MODEL}/load", body)
    assert resp.status == 500, resp
    assert resp.error == f"failed to load '{MODEL}', failed to poll from model repository"


SEQUENCE_MODEL = "sequence_accumulator"


def sequence_step(raw_http, sequence_id, start=False, end=False, **parameters):
    body = {
        "parameters": {"sequence_id": sequence_id, "sequence_start": start,
                       "sequence_end": end, **parameters},
        "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}],
    }
    return raw_http("POST", f"/v2/models/{SEQUENCE_MODEL}/infer", json.dumps(body).encode())


def test_a_backlogged_sequence_past_its_timeout_is_refused(raw_http):
    """All 8 slots held: a ninth sequence waits in the backlog; past its request's timeout it
    is refused in Triton's words, and forgotten."""
    base = 7_000_000 + (os.getpid() % 1000) * 100
    holders = [base + i for i in range(8)]
    try:
        for sequence_id in holders:
            resp = sequence_step(raw_http, sequence_id, start=True)
            assert resp.status == 200, resp
        started = time.monotonic()
        waiting = sequence_step(raw_http, base + 99, start=True, timeout=200000)
        assert waiting.status == 503, waiting
        assert waiting.error == "timeout of the corresponding sequence has been expired"
        assert time.monotonic() - started < 3
        forgotten = sequence_step(raw_http, base + 99)
        assert forgotten.status == 400, forgotten
        assert "must specify the START flag" in forgotten.error
    finally:
        for sequence_id in holders:
            sequence_step(raw_http, sequence_id, end=True)
