"""Decoupled models through the sidecar in front of Triton (run by run-triton.sh after the
conformance suite, against the same two servers): each response's final flag is Triton's.

`countdown_int32` (make_triton_repo.py) sends its last response with the FINAL flag on the data,
as python-backend and LLM models do; `repeat_int32` ends with a separate completion. The client
sees `triton_final_response` true exactly once per request, on the last response, and an empty
final response only when the model's completion carried no data and the client asked for one.

Over REST only (INFERGATE_UPSTREAM_PROTOCOL=http) the sidecar cannot reach a decoupled model:
it answers each request with UNIMPLEMENTED's text on the stream.

Environment: INFERGATE_GRPC_URL (the sidecar), INFERGATE_TRITON_GRPC_URL (Triton itself) and
INFERGATE_UPSTREAM_PROTOCOL (how run-triton.sh configured the sidecar).
"""

import os
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

SIDECAR = os.environ["INFERGATE_GRPC_URL"]
TRITON = os.environ.get("INFERGATE_TRITON_GRPC_URL", "")
TARGETS = [SIDECAR] + ([TRITON] if TRITON else [])
OVER_REST = os.environ.get("INFERGATE_UPSTREAM_PROTOCOL", "grpc") == "http"
needs_grpc = pytest.mark.skipif(OVER_REST, reason="the sidecar reaches Triton over REST only")


def countdown(n, empty_final):
    req = service_pb2.ModelInferRequest(model_name="countdown_int32", id=f"c{n}")
    req.inputs.add(name="IN", datatype="INT32", shape=[1])
    req.raw_input_contents.append(np.array([n], dtype=np.int32).tobytes())
    if empty_final:
        req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


def stream_answers(url, request):
    """Every stream message for one request, until the server ends the stream."""
    import grpc

    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return list(stub.ModelStreamInfer(iter([request]), timeout=30))


def summary(messages):
    out = []
    for m in messages:
        r = m.infer_response
        values = [np.frombuffer(raw, np.int32).tolist() for raw in r.raw_output_contents]
        out.append((m.error_message, r.id, values, r.parameters["triton_final_response"].bool_param))
    return out


@needs_grpc
@pytest.mark.parametrize("url", TARGETS, ids=["sidecar", "triton"][: len(TARGETS)])
@pytest.mark.parametrize("empty_final", [False, True])
def test_the_final_flag_rides_on_the_last_data_response(url, empty_final):
    got = summary(stream_answers(url, countdown(3, empty_final)))
    assert got == [
        ("", "c3", [[3]], False),
        ("", "c3", [[2]], False),
        ("", "c3", [[1]], True),
    ]


@needs_grpc
@pytest.mark.parametrize("url", TARGETS, ids=["sidecar", "triton"][: len(TARGETS)])
def test_a_completion_without_data_gives_the_empty_final_response_on_request(url):
    assert summary(stream_answers(url, countdown(0, False))) == []
    assert summary(stream_answers(url, countdown(0, True))) == [("", "c0", [], True)]


@needs_grpc
def test_the_tritonclient_stream_sees_every_response():
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(SIDECAR)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([4], dtype=np.int32))
        client.async_stream_infer("countdown_int32", [tensor], enable_empty_final_response=True)
        got = []
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            got.append(result.as_numpy("OUT").tolist())
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    assert got == [[4], [3], [2], [1]]


@pytest.mark.skipif(not OVER_REST, reason="the sidecar reaches Triton over gRPC")
def test_over_rest_only_a_decoupled_model_is_unimplemented():
    got = summary(stream_answers(SIDECAR, countdown(2, True)))
    assert len(got) == 1
    error, request_id, values, _ = got[0]
    assert request_id == "c2" and values == []
    assert "decoupled models need the upstream's gRPC endpoint" in error, error
