"""Statistics extension (what perf_analyzer reads) and Prometheus metrics."""

import json
import re
import time

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from support import MODELS, grpc_error, local_models, raw_request, simple_json_request

DURATIONS = ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"]


def is_uint(v):
    return type(v) is int and v >= 0


def model_stats(raw_http, path="/v2/models/simple/stats"):
    resp = raw_http("GET", path)
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/json"
    doc = resp.json()
    assert list(doc) == ["model_stats"]
    return doc["model_stats"]


def check_entry(entry):
    assert isinstance(entry["name"], str)
    assert entry["version"] == "1"
    for key in ("last_inference", "inference_count", "execution_count"):
        assert is_uint(entry[key]), (key, entry)
    stats = entry["inference_stats"]
    for key in DURATIONS:
        assert set(stats[key]) >= {"count", "ns"}, (key, stats)
        assert is_uint(stats[key]["count"]) and is_uint(stats[key]["ns"]), (key, stats)
    assert isinstance(entry["batch_stats"], list)
    for b in entry["batch_stats"]:
        assert is_uint(b["batch_size"])
        for key in ("compute_input", "compute_infer", "compute_output"):
            assert is_uint(b[key]["count"]) and is_uint(b[key]["ns"])


def test_all_model_stats(raw_http):
    entries = model_stats(raw_http, "/v2/models/stats")
    names = [e["name"] for e in entries]
    for name in MODELS:
        assert name in names
    for e in entries:
        check_entry(e)


@pytest.mark.parametrize("path", ["/v2/models/simple/stats", "/v2/models/simple/versions/1/stats"])
def test_single_model_stats(raw_http, path):
    entries = model_stats(raw_http, path)
    assert len(entries) == 1
    assert entries[0]["name"] == "simple"
    check_entry(entries[0])


def test_stats_grow_after_inference(raw_http):
    before = model_stats(raw_http)[0]
    for _ in range(3):
        resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request()))
        assert resp.status == 200, resp
    a = np.zeros((4, 16), dtype=np.int32)
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request(a, a)))
    assert resp.status == 200, resp
    after = model_stats(raw_http)[0]
    b, c = before["inference_stats"], after["inference_stats"]
    assert c["success"]["count"] - b["success"]["count"] == 4
    assert c["queue"]["count"] - b["queue"]["count"] == 4
    assert c["compute_infer"]["count"] - b["compute_infer"]["count"] == 4
    assert after["inference_count"] - before["inference_count"] == 3 + 4  # batch elements
    assert after["execution_count"] - before["execution_count"] == 4
    assert c["success"]["ns"] > b["success"]["ns"]
    assert after["last_inference"] >= before["last_inference"]
    now_ms = int(time.time() * 1000)
    assert abs(after["last_inference"] - now_ms) < 120_000  # ms since the epoch
    sizes = {e["batch_size"]: e for e in after["batch_stats"]}
    assert 4 in sizes and 1 in sizes


def test_failed_request_not_counted_as_success(raw_http):
    before = model_stats(raw_http)[0]["inference_stats"]["success"]["count"]
    bad = simple_json_request()
    bad["inputs"][0]["datatype"] = "FP32"
    assert raw_http("POST", "/v2/models/simple/infer", json.dumps(bad)).status == 400
    after = model_stats(raw_http)[0]["inference_stats"]["success"]["count"]
    assert after == before


def test_stats_errors(raw_http):
    resp = raw_http("GET", "/v2/models/no_such_model/stats")
    assert resp.status == 400, resp
    assert resp.json() == {"error": "requested model 'no_such_model' is not available"}
    resp = raw_http("GET", "/v2/models/simple/versions/9/stats")
    assert resp.status == 400, resp
    assert resp.json() == {"error": "requested model version is not available for model 'simple'"}


def test_grpc_stats(grpc_stub, grpc_client):
    before = grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="simple")).model_stats[0]
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="INT32", shape=[2, 16])
        req.raw_input_contents.append(np.zeros((2, 16), np.int32).tobytes())
    grpc_stub.ModelInfer(req)
    after = grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="simple", version="1")).model_stats[0]
    assert after.name == "simple" and after.version == "1"
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1
    assert after.inference_stats.queue.count == before.inference_stats.queue.count + 1
    assert after.inference_count == before.inference_count + 2
    everything = grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest())
    assert {m.name for m in everything.model_stats} >= set(MODELS)
    as_json = grpc_client.get_inference_statistics("simple", as_json=True)
    assert as_json["model_stats"][0]["name"] == "simple"


def test_grpc_stats_errors(grpc_stub):
    with pytest.raises(Exception) as info:
        grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="no_such_model"))
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", "requested model 'no_such_model' is not available")
    with pytest.raises(Exception) as info:
        grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="simple", version="9"))
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", "requested model version is not available for model 'simple'")


# --------------------------------------------------------------------------- metrics
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(metrics_url):
    resp = raw_request(metrics_url, "GET", "/metrics")
    assert resp.status == 200, resp
    assert resp.headers.get("content-type", "").startswith("text/plain")
    samples = {}
    for line in resp.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
        samples[(m.group(1), labels)] = float(m.group(3))
    return resp.body.decode(), samples


def simple_metric(samples, name):
    return samples.get((name, (("model", "simple"), ("version", "1"))))


def test_metrics_families(metrics_url):
    text, samples = scrape(metrics_url)
    for family, kind in (
        ("nv_inference_request_success", "counter"),
        ("nv_inference_request_failure", "counter"),
        ("nv_inference_count", "counter"),
        ("nv_inference_exec_count", "counter"),
    ):
        assert f"# TYPE {family} {kind}" in text, family
    assert simple_metric(samples, "nv_inference_request_success") is not None
    assert 'nv_inference_request_success{model="simple",version="1"}' in text


def test_metrics_success_counter_grows(metrics_url, raw_http):
    _, before = scrape(metrics_url)
    start = simple_metric(before, "nv_inference_request_success")
    count_start = simple_metric(before, "nv_inference_count")
    a = np.zeros((2, 16), dtype=np.int32)
    for _ in range(5):
        assert raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request(a, a))).status == 200
    deadline = time.monotonic() + 10
    while True:
        _, after = scrape(metrics_url)
        if simple_metric(after, "nv_inference_request_success") - start >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert simple_metric(after, "nv_inference_request_success") - start == 5
    assert simple_metric(after, "nv_inference_count") - count_start == 10


def test_metrics_wrong_method(metrics_url):
    resp = raw_request(metrics_url, "POST", "/metrics")
    assert resp.status == 405, resp


def test_metrics_host_gauges(metrics_url):
    # Triton's host gauges: CPU utilization in [0, 1], memory of the host, its pinned pool.
    text, samples = scrape(metrics_url)
    for family in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes",
                   "nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"):
        assert f"# TYPE {family} gauge" in text, family
    assert 0.0 <= samples[("nv_cpu_utilization", ())] <= 1.0
    total = samples[("nv_cpu_memory_total_bytes", ())]
    assert 0 < samples[("nv_cpu_memory_used_bytes", ())] <= total


def test_metrics_failure_line_as_triton_writes_it(metrics_url):
    text, _ = scrape(metrics_url)
    reasons = [line.split('reason="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith('nv_inference_request_failure{model="simple",reason=')]
    assert reasons == ["OTHER", "BACKEND", "CANCELED", "REJECTED"], text


# --------------------------------------------------------------------------- across loads
RELOADED = "custom_identity_int32"


def reloaded_metric(metrics_url, family):
    """The family's value for RELOADED (version 1); None when the model has no line."""
    return scrape(metrics_url)[1].get((family, (("model", RELOADED), ("version", "1"))))


def reloaded_successes(raw_http):
    (entry,) = model_stats(raw_http, f"/v2/models/{RELOADED}/stats")
    return entry["inference_stats"]["success"]["count"]


def infer_reloaded(raw_http, times):
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 4],
                                   "data": [1, 2, 3, 4]}]})
    for _ in range(times):
        resp = raw_http("POST", f"/v2/models/{RELOADED}/infer", body)
        assert resp.status == 200, resp


def wait_metric(metrics_url, family, want):
    deadline = time.monotonic() + 10
    while reloaded_metric(metrics_url, family) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return reloaded_metric(metrics_url, family)


@local_models
def test_metrics_count_on_across_a_reload_and_end_with_an_unload(raw_http, metrics_url):
    """Triton's metric reporter is shared by a model and the one that replaces it on a reload (a
    load of a loaded model with a changed configuration), so its counters go on; the statistics
    belong to the model and start again. A load with the configuration the model has changes
    nothing. An unload ends both: the model's lines go, and a later load starts from 0."""
    own = raw_http("GET", f"/v2/models/{RELOADED}/config").json()
    assert raw_http("POST", f"/v2/repository/models/{RELOADED}/unload").status == 200
    try:
        deadline = time.monotonic() + 10
        while reloaded_metric(metrics_url, "nv_inference_request_success") is not None:
            assert time.monotonic() < deadline, "an unloaded model still has metrics"
            time.sleep(0.1)
        assert raw_http("POST", f"/v2/repository/models/{RELOADED}/load").status == 200
        assert wait_metric(metrics_url, "nv_inference_request_success", 0) == 0
        infer_reloaded(raw_http, 3)
        assert wait_metric(metrics_url, "nv_inference_request_success", 3) == 3
        assert reloaded_successes(raw_http) == 3

        def load_with(config):
            body = json.dumps({"parameters": {"config": json.dumps(config)}})
            resp = raw_http("POST", f"/v2/repository/models/{RELOADED}/load", body)
            assert resp.status == 200, resp

        # Its own configuration again: nothing changed, so Triton keeps the model as it is.
        load_with(own)
        assert reloaded_successes(raw_http) == 3
        # A changed configuration: a reload.
        config = dict(own)
        config["parameters"] = {**own.get("parameters", {}), "execute_delay_ms": {"string_value": "1"}}
        load_with(config)
        assert raw_http("GET", f"/v2/models/{RELOADED}/config").json()["parameters"] == config["parameters"]
        assert reloaded_successes(raw_http) == 0
        assert reloaded_metric(metrics_url, "nv_inference_request_success") == 3
        infer_reloaded(raw_http, 2)
        assert wait_metric(metrics_url, "nv_inference_request_success", 5) == 5
        assert reloaded_metric(metrics_url, "nv_inference_count") == 5
        assert reloaded_metric(metrics_url, "nv_inference_exec_count") == 5
        assert reloaded_successes(raw_http) == 2
    finally:
        raw_http("POST", f"/v2/repository/models/{RELOADED}/unload")
        assert raw_http("POST", f"/v2/repository/models/{RELOADED}/load").status == 200
