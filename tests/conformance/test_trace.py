"""The trace extension: the settings API (REST `/v2/trace/setting`, `/v2/models/{m}/trace/setting`,
gRPC `TraceSetting`) with Triton's answers, OpenTelemetry spans of sampled requests exported
over OTLP/HTTP to a real receiver (tests/tools/otlp_receiver.py, built from the
opentelemetry-proto definitions; over mutual TLS too), and Triton's own trace files.

The first part runs against the suite's server in its default mode (Triton's `triton` mode with
no trace file, where a trace level cannot be turned on), and holds for Triton 2.51 too. The others
start sidecars of their own, with `--trace-config mode=opentelemetry` or with a trace file
(`--trace-config triton,file=...`; the same runs against Triton 2.51 are in tests/triton-qa,
module L0_trace).
"""

import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import certs
import conftest
from support import own_sidecars

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import otlp_receiver  # noqa: E402

TRITON_DEFAULT = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}



def post(http_url, path, body):
    return requests.post(f"http://{http_url}{path}", data=body, timeout=10)


@pytest.fixture
def restore(http_url):
    """Puts the server-wide settings back as they were (null: the start's value)."""
    yield
    post(http_url, "/v2/trace/setting",
         '{"trace_rate": null, "trace_count": null, "log_frequency": null, "trace_level": null}')
    post(http_url, "/v2/models/simple/trace/setting",
         '{"trace_rate": null, "trace_count": null, "log_frequency": null, "trace_level": null}')


# ------------------------------------------------------------------ settings, default mode

def test_default_settings_are_tritons(http_url, grpc_client):
    r = requests.get(f"http://{http_url}/v2/trace/setting", timeout=10)
    assert (r.status_code, r.json()) == (200, TRITON_DEFAULT)
    r = requests.get(f"http://{http_url}/v2/models/simple/trace/setting", timeout=10)
    assert (r.status_code, r.json()) == (200, TRITON_DEFAULT)
    settings = grpc_client.get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in settings.items()} == {
        k: v if isinstance(v, list) else [v] for k, v in TRITON_DEFAULT.items()
    }


def test_a_level_needs_somewhere_to_write(http_url, grpc_client):
    r = post(http_url, "/v2/trace/setting", '{"trace_level": ["TIMESTAMPS"]}')
    assert (r.status_code, r.json()) == (
        400, {"error": "Attempting to set invalid trace setting :trace file name is not given"})
    with pytest.raises(InferenceServerException) as e:
        grpc_client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "trace file name is not given" in e.value.message()


def test_rate_count_and_frequency_change_and_a_model_keeps_its_own(http_url, grpc_client, restore):
    r = post(http_url, "/v2/trace/setting", '{"trace_rate": "7", "trace_count": "5"}')
    assert r.status_code == 200, r.text
    assert (r.json()["trace_rate"], r.json()["trace_count"]) == ("7", "5")
    r = post(http_url, "/v2/models/simple/trace/setting", '{"trace_rate": "3"}')
    assert r.json()["trace_rate"] == "3"
    r = post(http_url, "/v2/trace/setting", '{"trace_rate": "9", "log_frequency": "2"}')
    assert (r.json()["trace_rate"], r.json()["log_frequency"]) == ("9", "2")
    got = requests.get(f"http://{http_url}/v2/models/simple/trace/setting", timeout=10).json()
    assert got["trace_rate"] == "3"
    # gRPC reads the same settings; no values puts the model back on the server's.
    settings = grpc_client.get_trace_settings(model_name="simple", as_json=True)["settings"]
    assert settings["trace_rate"]["value"] == ["3"]
    settings = grpc_client.update_trace_settings(
        model_name="simple", settings={"trace_rate": None}, as_json=True)["settings"]
    assert settings["trace_rate"]["value"] == ["9"]
    # null server-wide: back to the value the server started with.
    r = post(http_url, "/v2/trace/setting", '{"trace_rate": null}')
    assert r.json()["trace_rate"] == "1000"


@pytest.mark.parametrize("body, status, error", [
    ('{"trace_rate": "abc"}', 400, "Unable to parse 'trace_rate', got: abc"),
    ('{"trace_count": "-5"}', 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"),
    ('{"trace_count": "x"}', 400, "Unable to parse 'trace_count', got: x"),
    ('{"log_frequency": "abc"}', 400, "Unable to parse 'log_frequency', got: abc"),
    ('{"trace_level": ["OFF", "TIMESTAMPS"]}', 400, "Expect only one trace level 'OFF' is specified"),
    ('{"trace_level": "TIMESTAMPS"}', 500, "attempt to access JSON non-array as array"),
    ('{"trace_rate": 5}', 500, "attempt to access JSON non-string as string"),
    ('{"trace_file": "/tmp/trace.json"}', 501,
     "trace file location can not be updated through network protocol"),
    ('{"trace_file": null}', 501, "trace file location can not be updated through network protocol"),
    ('{"trace_rate": "3000000000"}', 400,
     "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 3000000000"),
    ('{"trace_count": "3000000000"}', 400,
     "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 3000000000"),
    # Triton reads trace_file, trace_level, trace_rate, trace_count, log_frequency in that order,
    # whatever order the body gives them in: the first refusal in its order is the answer.
    ('{"trace_count": "x", "trace_file": "f"}', 501,
     "trace file location can not be updated through network protocol"),
    ('{"trace_rate": 5, "trace_level": "TIMESTAMPS"}', 500, "attempt to access JSON non-array as array"),
    ('{"log_frequency": 5, "trace_count": "-7"}', 400,
     "Unable to parse 'trace_count'. Expecting value >= -1, got:-7"),
    ('{"trace_count": "x", "trace_rate": "1", "trace_level": ["OFF", "TENSORS"]}', 400,
     "Expect only one trace level 'OFF' is specified"),
])
def test_bad_settings_are_refused_with_tritons_words(http_url, body, status, error, restore):
    r = post(http_url, "/v2/trace/setting", body)
    assert (r.status_code, r.json()) == (status, {"error": error})
    assert requests.get(f"http://{http_url}/v2/trace/setting", timeout=10).json() == TRITON_DEFAULT


def test_bad_settings_over_grpc(grpc_client, restore):
    for settings, code, words in [
        ({"trace_rate": "abc"}, "INVALID_ARGUMENT", "Unable to parse 'trace_rate', got: abc"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "INVALID_ARGUMENT",
         "Expect only one trace level 'OFF' is specified"),
        ({"trace_file": "x"}, "UNIMPLEMENTED",
         "trace file location can not be updated through network protocol"),
        # gRPC words one message with a space REST does not have.
        ({"trace_count": "-5"}, "INVALID_ARGUMENT", "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"),
        # gRPC settings are lists: a single-valued one given two values is refused.
        ({"trace_rate": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value for 'trace_rate'"),
        ({"trace_count": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value for 'trace_count'"),
        ({"log_frequency": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value for 'log_frequency'"),
        ({"trace_count": "x", "trace_rate": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value for 'trace_rate'"),
    ]:
        with pytest.raises(InferenceServerException) as e:
            grpc_client.update_trace_settings(settings=settings)
        assert (e.value.status(), e.value.message()) == (f"StatusCode.{code}", words)


def test_unknown_model(http_url, grpc_client):
    want = "Request for unknown model : nosuch"
    r = requests.get(f"http://{http_url}/v2/models/nosuch/trace/setting", timeout=10)
    assert (r.status_code, r.json()) == (400, {"error": want})
    r = post(http_url, "/v2/models/nosuch/trace/setting", '{"trace_rate": "2"}')
    assert (r.status_code, r.json()) == (400, {"error": want})
    for call in (lambda: grpc_client.get_trace_settings(model_name="nosuch"),
                 lambda: grpc_client.update_trace_settings(model_name="nosuch",
                                                           settings={"trace_rate": "2"})):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert (e.value.status(), e.value.message()) == ("StatusCode.INVALID_ARGUMENT", want)


def test_unknown_keys_change_nothing_and_an_empty_body_is_no_json(http_url):
    for body in ('{"bogus": 5, "trace_mode": "opentelemetry"}', "[1]"):
        r = post(http_url, "/v2/trace/setting", body)
        assert (r.status_code, r.json()) == (200, TRITON_DEFAULT), body
    r = post(http_url, "/v2/trace/setting", "")
    assert (r.status_code, r.json()) == (
        500, {"error": "failed to parse the request JSON buffer: The document is empty. at 0"})


# ------------------------------------------------------------------ spans, opentelemetry mode

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(scope="module")
def receiver():
    r = otlp_receiver.Receiver(0)
    yield r
    r.close()


@pytest.fixture(scope="module")
def traced(tmp_path_factory, receiver):
    """A sidecar tracing every request (rate 1) to the receiver, sending spans every 100 ms."""
    server = conftest._start_sidecar(tmp_path_factory.mktemp("traced"), extra_args=[
        "--trace-config", "mode=opentelemetry",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url=127.0.0.1:{receiver.http_port}/v1/traces",
        "--trace-config", "opentelemetry,bsp_schedule_delay=100",
        "--trace-config", "opentelemetry,resource=deployment.environment=conformance",
    ])
    yield server
    conftest._stop(server.process)


def simple_inputs(module, value=1):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.full((1, 16), value, dtype=np.int32))
    return inputs


def trace_of(receiver, trace_id, count, timeout=15.0):
    """The spans of one trace, once `count` of them have arrived, by name."""
    def of_trace(spans):
        return [s for s in spans if s["trace_id"] == trace_id]
    spans = of_trace(receiver.wait_for(lambda s: len(of_trace(s)) >= count, timeout))
    assert len(spans) == count, [s["name"] for s in spans]
    return {s["name"]: s for s in spans}


def events(span):
    return [e["name"] for e in span["events"]]


def check_tree(spans, parent, front):
    root, model, compute = spans["InferRequest"], spans["simple"], spans["compute"]
    assert root["parent_span_id"] == parent
    assert model["parent_span_id"] == root["span_id"]
    assert compute["parent_span_id"] == model["span_id"]
    assert root["kind"] == 2  # SPAN_KIND_SERVER
    assert root["service"] == "infergate-sidecar"
    assert root["resource"]["deployment.environment"] == "conformance"
    assert events(model) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert events(compute) == ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                               "COMPUTE_END"]
    assert model["attributes"] == {"triton.model_name": "simple", "triton.model_version": 1}
    names = events(root)
    assert names[0] == f"{front}_RECV_START" if front == "HTTP" else "GRPC_WAITREAD_START"
    assert "INFER_RESPONSE_COMPLETE" in names and names[-2:] == [f"{front}_SEND_START",
                                                                 f"{front}_SEND_END"]
    # Children within their parents, events in order.
    for child, outer in ((model, root), (compute, model)):
        assert outer["start_ns"] <= child["start_ns"] <= child["end_ns"] <= outer["end_ns"]
    for span in spans.values():
        stamps = [e["ns"] for e in span["events"]]
        assert stamps == sorted(stamps), span["name"]
        assert span["status"]["code"] == 0


@own_sidecars
def test_settings_in_opentelemetry_mode(traced, receiver):
    r = requests.get(f"http://{traced.http}/v2/trace/setting", timeout=10)
    assert r.json() == {
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
        "trace_mode": "opentelemetry", "url": f"127.0.0.1:{receiver.http_port}/v1/traces",
        "bsp_max_export_batch_size": "512", "bsp_schedule_delay": "100",
        "bsp_max_queue_size": "2048",
    }


@own_sidecars
def test_a_zero_rate_is_taken_only_while_no_level_is_on(traced):
    base = f"http://{traced.http}/v2/trace/setting"
    r = requests.post(base, json={"trace_level": ["OFF"], "trace_rate": "0"}, timeout=10)
    try:
        assert r.status_code == 200, r.text
        assert (r.json()["trace_level"], r.json()["trace_rate"]) == (["OFF"], "0")
        r = requests.post(base, json={"trace_level": ["TIMESTAMPS"]}, timeout=10)
        assert (r.status_code, r.json()) == (
            400, {"error": "Attempting to set invalid trace setting :sample rate must be non-zero"})
    finally:
        requests.post(base, json={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, timeout=10)


@own_sidecars
def test_a_zero_rate_is_refused_where_spans_are_made(traced):
    r = requests.post(f"http://{traced.http}/v2/trace/setting", json={"trace_rate": "0"},
                      timeout=10)
    assert (r.status_code, r.json()) == (
        400, {"error": "Attempting to set invalid trace setting :sample rate must be non-zero"})


@own_sidecars
def test_http_request_joins_the_callers_trace(traced, receiver):
    client = httpclient.InferenceServerClient(traced.http)
    client.infer("simple", simple_inputs(httpclient), headers={"traceparent": TRACEPARENT})
    check_tree(trace_of(receiver, TRACE_ID, 3), PARENT_ID, "HTTP")


@own_sidecars
def test_grpc_request_joins_the_callers_trace(traced, receiver):
    trace_id = "1" * 32
    client = grpcclient.InferenceServerClient(traced.grpc)
    client.infer("simple", simple_inputs(grpcclient),
                 headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
    check_tree(trace_of(receiver, trace_id, 3), PARENT_ID, "GRPC")


@own_sidecars
def test_each_request_of_a_stream_is_a_trace_under_the_streams_caller(traced, receiver):
    trace_id = "2" * 32
    client = grpcclient.InferenceServerClient(traced.grpc)
    answers = []
    client.start_stream(callback=lambda result, error: answers.append((result, error)),
                        headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
    for i in range(3):
        client.async_stream_infer("simple", simple_inputs(grpcclient, i), request_id=str(i))
    client.stop_stream()
    assert len(answers) == 3 and all(e is None for _, e in answers)
    spans = [s for s in receiver.wait_for(
        lambda s: len([x for x in s if x["trace_id"] == trace_id]) >= 9)
        if s["trace_id"] == trace_id]
    roots = [s for s in spans if s["name"] == "InferRequest"]
    assert len(roots) == 3 and all(r["parent_span_id"] == PARENT_ID for r in roots)


@own_sidecars
def test_a_request_without_a_caller_starts_a_trace(traced, receiver):
    receiver.clear()
    client = httpclient.InferenceServerClient(traced.http)
    client.infer("simple", simple_inputs(httpclient))
    spans = receiver.wait_for(lambda s: len(s) >= 3)
    roots = [s for s in spans if s["name"] == "InferRequest"]
    assert len(roots) == 1 and roots[0]["parent_span_id"] == ""
    assert len({s["trace_id"] for s in spans}) == 1


@own_sidecars
def test_a_failed_request_is_an_error_span(traced, receiver):
    trace_id = "3" * 32
    r = requests.post(f"http://{traced.http}/v2/models/simple/infer", timeout=10,
                      headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"},
                      json={"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                                        "data": list(range(16))}]})
    assert r.status_code == 400
    spans = trace_of(receiver, trace_id, 1)
    root = spans["InferRequest"]
    assert root["status"]["code"] == 2  # STATUS_CODE_ERROR
    assert root["status"]["message"] == r.json()["error"]


@own_sidecars
def test_rate_and_count_decide_which_requests_are_traced(traced, receiver):
    base = f"http://{traced.http}/v2/models/simple/trace/setting"
    r = requests.post(base, json={"trace_rate": "2", "trace_count": "2"}, timeout=10)
    assert r.status_code == 200, r.text
    try:
        receiver.clear()
        client = httpclient.InferenceServerClient(traced.http)
        for _ in range(8):
            client.infer("simple", simple_inputs(httpclient))
        # The others' spans would have come with these: wait a few export intervals.
        spans = receiver.wait_for(lambda s: len(s) >= 6)
        time.sleep(0.5)
        roots = [s for s in receiver.spans() if s["name"] == "InferRequest"]
        assert len(roots) == 2
        assert requests.get(base, timeout=10).json()["trace_count"] == "0"
        # The server's own settings are untouched, and other models are traced as before.
        server = requests.get(f"http://{traced.http}/v2/trace/setting", timeout=10).json()
        assert (server["trace_rate"], server["trace_count"]) == ("1", "-1")
        assert len(spans) >= 6
    finally:
        requests.post(base, json={"trace_rate": None, "trace_count": None}, timeout=10)


@own_sidecars
def test_level_off_for_one_model_and_tensors_for_another(traced, receiver):
    base = f"http://{traced.http}/v2/models/%s/trace/setting"
    requests.post(base % "simple", json={"trace_level": ["OFF"]}, timeout=10)
    requests.post(base % "identity_fp32", json={"trace_level": ["TIMESTAMPS", "TENSORS"]},
                  timeout=10)
    try:
        receiver.clear()
        client = httpclient.InferenceServerClient(traced.http)
        client.infer("simple", simple_inputs(httpclient))
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        client.infer("identity_fp32", [tensor])
        spans = receiver.wait_for(lambda s: len(s) >= 3)
        time.sleep(0.5)
        names = {s["name"] for s in receiver.spans()}
        assert "simple" not in names
        model = next(s for s in receiver.spans() if s["name"] == "identity_fp32")
        assert model["attributes"]["infergate.input.INPUT0"] == "FP32 [4]"
        assert model["attributes"]["infergate.output.OUTPUT0"] == "FP32 [4]"
        assert spans
    finally:
        for model in ("simple", "identity_fp32"):
            requests.post(base % model, json={"trace_level": None}, timeout=10)


@own_sidecars
def test_turning_tracing_off_stops_the_spans(traced, receiver):
    base = f"http://{traced.http}/v2/trace/setting"
    r = requests.post(base, json={"trace_level": ["OFF"]}, timeout=10)
    assert r.json()["trace_level"] == ["OFF"]
    try:
        receiver.clear()
        client = httpclient.InferenceServerClient(traced.http)
        for _ in range(3):
            client.infer("simple", simple_inputs(httpclient))
        time.sleep(0.6)
        assert receiver.spans() == []
    finally:
        requests.post(base, json={"trace_level": ["TIMESTAMPS"]}, timeout=10)


@own_sidecars
def test_spans_reach_a_collector_over_mutual_tls_and_only_one_that_proves_itself(tmp_path):
    """An `https://` collector that asks for a client certificate: spans arrive when the
    sidecar trusts the collector's CA and presents its own certificate, given by the trace
    settings or by the OpenTelemetry variables. Without its certificate the collector refuses
    the handshake; a collector whose certificate another CA signed is refused by the sidecar.
    Either way no span is delivered, the log says so once, and inference is unaffected."""
    authority = certs.ca(tmp_path / "ca")
    collector = certs.signed(tmp_path / "ca", "collector", authority, server=True)
    exporter = certs.signed(tmp_path / "ca", "exporter", authority, server=False)
    other = certs.ca(tmp_path / "other", "other")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.cert))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(collector.cert, collector.key)
    receiver = otlp_receiver.Receiver(0, tls=context)
    url = f"opentelemetry,url=https://localhost:{receiver.http_port}/v1/traces"

    def spans_sent(name, tls_settings, env=None, expect=True):
        trace_id = os.urandom(16).hex()
        (tmp_path / name).mkdir()
        with pytest.MonkeyPatch.context() as patch:  # the variables reach this sidecar only
            for variable, value in (env or {}).items():
                patch.setenv(variable, value)
            server = conftest._start_sidecar(tmp_path / name, extra_args=[
                "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
                "--trace-config", "rate=1", "--trace-config", url,
                "--trace-config", "opentelemetry,bsp_schedule_delay=100",
                *[a for setting in tls_settings for a in ("--trace-config", setting)]])
        try:
            client = httpclient.InferenceServerClient(server.http)
            answer = client.infer("simple", simple_inputs(httpclient),
                                  headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
            assert (answer.as_numpy("OUTPUT0") == 2).all()
            if expect:
                return len(trace_of(receiver, trace_id, 3))
            time.sleep(3)  # thirty export rounds
            # The failure is in the log, once.
            failed = [line for line in server.log_lines if "could not be sent to the collector" in line]
            assert len(failed) == 1, server.log_tail()
            return len([s for s in receiver.spans() if s["trace_id"] == trace_id])
        finally:
            conftest._stop(server.process)

    try:
        mutual = [f"opentelemetry,certificate={authority.cert}",
                  f"opentelemetry,client_certificate={exporter.cert}",
                  f"opentelemetry,client_key={exporter.key}"]
        assert spans_sent("settings", mutual) == 3
        assert spans_sent("variables", [], env={
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(authority.cert),
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(exporter.cert),
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(exporter.key)}) == 3
        assert spans_sent("no-client-cert", mutual[:1], expect=False) == 0
        assert spans_sent("other-ca", [f"opentelemetry,certificate={other.cert}"] + mutual[1:],
                          expect=False) == 0
    finally:
        receiver.close()


@own_sidecars
@pytest.mark.parametrize("setting, words", [
    ("level=TIMESTAMPS", "a trace level needs a trace file (--trace-config triton,file=<path>)"),
    ("triton,file=", "the trace file needs a path"),
    ("rate=0", "must be a whole number above 0"),
    ("opentelemetry,colour=red", "unknown opentelemetry setting 'colour'"),
    ("opentelemetry,certificate=/ca.crt", "but its url 'localhost:4318/v1/traces' is not https://"),
])
def test_settings_it_cannot_honour_stop_it_at_start(setting, words):
    binary = os.environ.get("INFERGATE_SIDECAR_BIN", str(conftest.DEFAULT_SIDECAR_BIN))
    done = subprocess.run([binary, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                           "--admin-port", "0", "--trace-config", setting],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "server.trace_config" in done.stderr and words in done.stderr, done.stderr


# ------------------------------------------------------------------ Triton's trace files

def file_sidecar(tmp_path, *settings):
    """A sidecar writing Triton's trace file `trace.json` in `tmp_path`."""
    path = tmp_path / "trace.json"
    args = ["--trace-config", f"triton,file={path}"]
    for setting in settings:
        args += ["--trace-config", setting]
    return conftest._start_sidecar(tmp_path, extra_args=args), path


def objects_by_id(objects):
    traces = {}
    for o in objects:
        traces.setdefault(o["id"], []).append(o)
    return traces


def stamps(trace):
    return {t["name"]: t["ns"] for o in trace for t in o.get("timestamps", [])}


@own_sidecars
def test_a_trace_file_holds_each_request_as_triton_writes_it(tmp_path):
    server, path = file_sidecar(tmp_path, "level=TIMESTAMPS", "rate=1")
    try:
        settings = requests.get(f"http://{server.http}/v2/trace/setting", timeout=10).json()
        assert settings == {"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "trace_count": "-1", "log_frequency": "0",
                            "trace_file": str(path), "trace_mode": "triton"}
        httpclient.InferenceServerClient(server.http).infer(
            "simple", simple_inputs(httpclient), request_id="req-1")
        grpcclient.InferenceServerClient(server.grpc).infer("simple", simple_inputs(grpcclient))
        # Not served: neither traced nor counted, as in Triton.
        with pytest.raises(InferenceServerException):
            httpclient.InferenceServerClient(server.http).infer("nosuch", simple_inputs(httpclient))
    finally:
        conftest._stop(server.process)
    # Written as the server stops: one JSON array.
    objects = json.loads(path.read_text())
    traces = objects_by_id(objects)
    assert sorted(traces) == [1, 2]
    http_trace, grpc_trace = traces[1], traces[2]
    headers = [o for o in http_trace if "model_name" in o]
    assert headers == [{"id": 1, "model_name": "simple", "model_version": 1, "request_id": "req-1"}]
    assert [o for o in grpc_trace if "model_name" in o] == [
        {"id": 2, "model_name": "simple", "model_version": 1}]
    for o in objects:
        assert set(o) in ({"id", "timestamps"}, {"id", "model_name", "model_version"},
                          {"id", "model_name", "model_version", "request_id"}), o
        assert len(o.get("timestamps", [{}])) == 1
    model = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
             "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
    for trace, front in ((http_trace, ["HTTP_RECV_START", "HTTP_RECV_END"]),
                         (grpc_trace, ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"])):
        ns = stamps(trace)
        prefix = front[0].split("_")[0]
        order = front + model + ["INFER_RESPONSE_COMPLETE", f"{prefix}_SEND_START",
                                 f"{prefix}_SEND_END"]
        assert sorted(ns) == sorted(order)
        assert [ns[name] for name in order] == sorted(ns[name] for name in order)
        # Nanoseconds of the monotonic clock, as Triton's steady_clock.
        assert abs(ns["REQUEST_START"] - time.monotonic_ns()) < 120 * 10**9


@own_sidecars
def test_tritons_deprecated_trace_flags_still_work(tmp_path):
    """--trace-file, --trace-level, --trace-rate, --trace-count and --trace-log-frequency, which
    Triton 2.51 still takes with a warning each; --trace-config wins where both are given."""
    path = tmp_path / "old.json"
    server = conftest._start_sidecar(tmp_path, extra_args=[
        "--trace-file", str(path), "--trace-level", "TIMESTAMPS", "--trace-rate", "3",
        "--trace-count", "5", "--trace-log-frequency", "0", "--trace-config", "rate=1"])
    try:
        settings = requests.get(f"http://{server.http}/v2/trace/setting", timeout=10).json()
        assert settings == {"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "trace_count": "5", "log_frequency": "0",
                            "trace_file": str(path), "trace_mode": "triton"}
        httpclient.InferenceServerClient(server.http).infer("simple", simple_inputs(httpclient))
    finally:
        conftest._stop(server.process)
    log = server.log_path.read_text()
    for flag in ("trace-file", "trace-level", "trace-rate", "trace-count", "trace-log-frequency"):
        assert f"Warning: '--{flag}' has been deprecated" in log, log
    assert [o["model_name"] for o in json.loads(path.read_text()) if "model_name" in o] == ["simple"]


@own_sidecars
def test_tensors_are_written_with_their_data(tmp_path):
    server, path = file_sidecar(tmp_path, "level=TENSORS", "rate=1")
    try:
        client = httpclient.InferenceServerClient(server.http)
        client.infer("simple", simple_inputs(httpclient, 3))
        tensor = httpclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(np.array([0.5, 1.0, 1e-5], dtype=np.float32))
        client.infer("identity_fp32", [tensor])
        strings = httpclient.InferInput("INPUT0", [2], "BYTES")
        strings.set_data_from_numpy(np.array([b"ab", b"c"], dtype=np.object_))
        client.infer("identity_bytes", [strings])
    finally:
        conftest._stop(server.process)
    objects = json.loads(path.read_text())
    # TENSORS alone: the tensors only, no timestamps or header, as Triton writes them.
    assert all(set(o) == {"id", "activity", "tensor"} for o in objects), objects
    by = {(o["id"], o["activity"], o["tensor"]["name"]): o["tensor"] for o in objects}
    assert by[(1, "TENSOR_QUEUE_INPUT", "INPUT0")] == {
        "name": "INPUT0", "data": ",".join(["3"] * 16), "shape": "1,16", "dtype": "INT32"}
    assert by[(1, "TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"] == ",".join(["6"] * 16)
    assert by[(1, "TENSOR_BACKEND_OUTPUT", "OUTPUT1")]["data"] == ",".join(["0"] * 16)
    assert by[(2, "TENSOR_QUEUE_INPUT", "INPUT0")]["data"] == "0.5,1,1e-05"
    assert by[(3, "TENSOR_BACKEND_OUTPUT", "OUTPUT0")] == {
        "name": "OUTPUT0", "data": '"ab","c"', "shape": "2", "dtype": "BYTES"}


@own_sidecars
def test_an_input_in_shared_memory_is_traced_with_its_data(tmp_path):
    import tritonclient.utils.shared_memory as shm
    server, path = file_sidecar(tmp_path, "level=TENSORS", "rate=1")
    key = f"/infergate-trace-{os.getpid()}"
    region = shm.create_shared_memory_region("trace_in", key, 64)
    try:
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        shm.set_shared_memory_region(region, [data])
        client = httpclient.InferenceServerClient(server.http)
        client.register_system_shared_memory("trace_in", key, 64)
        inputs = simple_inputs(httpclient)
        inputs[0].set_shared_memory("trace_in", 64)
        client.infer("simple", inputs)
    finally:
        conftest._stop(server.process)
        shm.destroy_shared_memory_region(region)
    objects = json.loads(path.read_text())
    queued = {o["tensor"]["name"]: o["tensor"]["data"] for o in objects
              if o["activity"] == "TENSOR_QUEUE_INPUT"}
    assert queued["INPUT0"] == ",".join(str(i) for i in range(16))
    assert queued["INPUT1"] == ",".join(["1"] * 16)


@own_sidecars
def test_log_frequency_and_count_write_numbered_files(tmp_path):
    server, path = file_sidecar(tmp_path, "level=TIMESTAMPS", "rate=1",
                                "triton,log-frequency=2")
    client = httpclient.InferenceServerClient(server.http)
    numbered = lambda n: tmp_path / f"trace.json.{n}"  # noqa: E731
    try:
        for _ in range(3):
            client.infer("simple", simple_inputs(httpclient))
        # Two traces are due as the second request finishes.
        assert len(objects_by_id(json.loads(numbered(0).read_text()))) == 2
        assert not numbered(1).exists()
        # A change of settings writes what the old ones held (one trace).
        r = requests.post(f"http://{server.http}/v2/trace/setting",
                          json={"log_frequency": "0", "trace_count": "2"}, timeout=10)
        assert r.json()["trace_count"] == "2"
        assert len(objects_by_id(json.loads(numbered(1).read_text()))) == 1
        # The count used up, its traces go to the next numbered file at once.
        for _ in range(3):
            client.infer("simple", simple_inputs(httpclient))
        assert len(objects_by_id(json.loads(numbered(2).read_text()))) == 2
        assert requests.get(f"http://{server.http}/v2/trace/setting",
                            timeout=10).json()["trace_count"] == "0"
    finally:
        conftest._stop(server.process)
    assert not numbered(3).exists()
    assert not path.exists()  # nothing was left for the main file


@own_sidecars
def test_a_models_own_settings_share_the_file(tmp_path):
    server, path = file_sidecar(tmp_path, "level=OFF", "rate=1")
    base = f"http://{server.http}/v2/models/simple/trace/setting"
    try:
        r = requests.post(base, json={"trace_level": ["TIMESTAMPS"]}, timeout=10)
        assert r.status_code == 200, r.text
        client = httpclient.InferenceServerClient(server.http)
        client.infer("simple", simple_inputs(httpclient))
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, dtype=np.float32))
        client.infer("identity_fp32", [tensor])  # the server's level: OFF
        # Back to the server's: the model's traces are written now.
        requests.post(base, json={"trace_level": None}, timeout=10)
        objects = json.loads(path.read_text() + "]")
        assert [o["model_name"] for o in objects if "model_name" in o] == ["simple"]
    finally:
        conftest._stop(server.process)
    assert json.loads(path.read_text()) == objects
