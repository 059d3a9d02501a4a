"""Traces that join in front of MLServer (run by tests/upstream/run-mlserver.sh, which starts
MLServer with MLSERVER_TRACING_SERVER set to 127.0.0.1:$INFERGATE_OTLP_GRPC_PORT).

This test listens there with the project's OTLP receiver (OTLP/gRPC, as MLServer exports; OTLP/HTTP
for the sidecar), starts a sidecar of its own in front of that MLServer with the run's sidecar
configuration and tracing on, and sends a request with a `traceparent` over REST and gRPC. The
sidecar's `upstream` span hands its `traceparent` to MLServer in the gRPC metadata, so MLServer's
server span is its child, in the caller's trace.

Environment: INFERGATE_SIDECAR_CONFIG, INFERGATE_OTLP_GRPC_PORT, INFERGATE_SIDECAR_BIN.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS / "tools"))
sys.path.insert(0, str(TESTS / "conformance"))
import conftest as conformance  # noqa: E402  (its sidecar launcher)
import otlp_receiver  # noqa: E402

PARENT_ID = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def receiver():
    r = otlp_receiver.Receiver(0, grpc_port=int(os.environ["INFERGATE_OTLP_GRPC_PORT"]))
    yield r
    r.close()


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory, receiver):
    server = conformance._start_sidecar(tmp_path_factory.mktemp("traced"), extra_args=[
        "--config", os.environ["INFERGATE_SIDECAR_CONFIG"],
        "--trace-config", "mode=opentelemetry",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url=127.0.0.1:{receiver.http_port}/v1/traces",
        "--trace-config", "opentelemetry,bsp_schedule_delay=100",
    ])
    yield server
    conformance._stop(server.process)


def simple_inputs(module):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    return inputs


@pytest.mark.parametrize("client_protocol", ["http", "grpc"])
def test_mlservers_spans_join_the_sidecars(sidecar, receiver, client_protocol):
    trace_id = os.urandom(16).hex()
    headers = {"traceparent": f"00-{trace_id}-{PARENT_ID}-01"}
    if client_protocol == "http":
        client = httpclient.InferenceServerClient(sidecar.http)
        result = client.infer("simple", simple_inputs(httpclient), headers=headers)
    else:
        client = grpcclient.InferenceServerClient(sidecar.grpc)
        result = client.infer("simple", simple_inputs(grpcclient), headers=headers)
    assert (result.as_numpy("OUTPUT0") == 2 * np.arange(16)).all()

    def of_trace(spans):
        return [s for s in spans if s["trace_id"] == trace_id]

    def both_sides(spans):
        services = {s["service"] for s in of_trace(spans)}
        return len(of_trace(spans)) >= 5 and len(services) >= 2

    # MLServer exports every 5 s (its SDK's default batch delay).
    spans = of_trace(receiver.wait_for(both_sides, timeout=30))
    ours = {s["name"]: s for s in spans if s["service"] == "infergate-sidecar"}
    theirs = [s for s in spans if s["service"] != "infergate-sidecar"]
    assert sorted(ours) == ["InferRequest", "compute", "simple", "upstream"]
    assert ours["InferRequest"]["parent_span_id"] == PARENT_ID
    # MLServer's server span for the call is the child of the sidecar's call to it.
    served = [s for s in theirs if s["parent_span_id"] == ours["upstream"]["span_id"]]
    assert served, [(s["name"], s["parent_span_id"]) for s in theirs]
    assert served[0]["kind"] == 2  # SPAN_KIND_SERVER
    assert "ModelInfer" in served[0]["name"], served[0]["name"]
