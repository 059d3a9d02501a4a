"""Decoupled models: `repeat_int32` (Triton's repeat backend example), answered only on
ModelStreamInfer, any number of responses per request, written as the model produces them."""

import json
import queue
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import grpc_error
from test_model_control import index_entry, load_http, local_models, unload_http
from test_streaming import Stream, simple_request

MODEL = "repeat_int32"


def repeat_request(values, delays_ms, wait_ms=0, request_id="", empty_final=None):
    req = service_pb2.ModelInferRequest(model_name=MODEL, id=request_id)
    tensors = (
        ("IN", "INT32", np.array(values, dtype=np.int32)),
        ("DELAY", "UINT32", np.array(delays_ms, dtype=np.uint32)),
        ("WAIT", "UINT32", np.array([wait_ms], dtype=np.uint32)),
    )
    for name, datatype, data in tensors:
        req.inputs.add(name=name, datatype=datatype, shape=list(data.shape))
        req.raw_input_contents.append(data.tobytes())
    if empty_final is not None:
        req.parameters["triton_enable_empty_final_response"].bool_param = empty_final
    return req


def outputs_of(response):
    return {
        o.name: (o.datatype, list(o.shape), raw)
        for o, raw in zip(response.outputs, response.raw_output_contents)
    }


def final_flag(response):
    return response.parameters["triton_final_response"].bool_param


def test_custom_repeat_example(grpc_client):
    """simple_grpc_custom_repeat.py: ten responses, OUT = 100..109 in order."""
    results = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        inputs = [
            grpcclient.InferInput("IN", [10], "INT32"),
            grpcclient.InferInput("DELAY", [10], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(np.arange(100, 110, dtype=np.int32))
        inputs[1].set_data_from_numpy(np.full(10, 10, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([10], dtype=np.uint32))
        grpc_client.async_stream_infer(
            MODEL, inputs, outputs=[grpcclient.InferRequestedOutput("OUT")], request_id="rep"
        )
        got = []
        for _ in range(10):
            result, error = results.get(timeout=30)
            assert error is None, error
            assert result.get_response().id == "rep"
            got.append(result.as_numpy("OUT").tolist())
            assert result.as_numpy("IDX") is None  # only OUT was asked for
    finally:
        grpc_client.stop_stream()
    assert got == [[v] for v in range(100, 110)]


def test_responses_then_empty_final_response(grpc_stub):
    stream = Stream(grpc_stub)
    stream.send(repeat_request([7, -3, 12], [0, 0, 0], request_id="r1", empty_final=True))
    for index, value in enumerate([7, -3, 12]):
        message = stream.recv()
        assert message.error_message == ""
        response = message.infer_response
        assert (response.id, response.model_name, response.model_version) == ("r1", MODEL, "1")
        assert final_flag(response) is False
        out = outputs_of(response)
        assert out["OUT"][:2] == ("INT32", [1])
        assert out["IDX"][:2] == ("UINT32", [1])
        assert np.frombuffer(out["OUT"][2], np.int32).tolist() == [value]
        assert np.frombuffer(out["IDX"][2], np.uint32).tolist() == [index]
    last = stream.recv()
    assert last.error_message == ""
    # As Triton's: the id and model name, no version, no outputs.
    assert (last.infer_response.id, last.infer_response.model_name) == ("r1", MODEL)
    assert last.infer_response.model_version == ""
    assert list(last.infer_response.outputs) == []
    assert final_flag(last.infer_response) is True
    assert stream.close() == []


def test_no_elements_no_responses(grpc_stub):
    """Without the empty final response a request with nothing to repeat answers nothing."""
    stream = Stream(grpc_stub)
    stream.send(repeat_request([], [], request_id="none"))
    stream.send(repeat_request([], [], request_id="only-final", empty_final=True))
    last = stream.recv()
    assert last.infer_response.id == "only-final"
    assert final_flag(last.infer_response) is True
    assert stream.close() == []


def test_responses_written_as_produced(grpc_stub):
    """A later request to another model is answered while the decoupled one still runs."""
    stream = Stream(grpc_stub)
    stream.send(repeat_request([1, 2], [300, 300], request_id="slow"))
    stream.send(simple_request(request_id="quick"))
    order = [stream.recv().infer_response.id for _ in range(3)]
    assert order == ["quick", "slow", "slow"] or order == ["slow", "quick", "slow"]
    assert order[-1] == "slow"
    assert stream.close() == []


def test_mismatched_delay_is_an_error_on_the_stream(grpc_stub):
    stream = Stream(grpc_stub)
    stream.send(repeat_request([1], [0, 0], request_id="bad"))
    stream.send(repeat_request([5], [0], request_id="good"))
    first = stream.recv()
    assert first.infer_response.id == "bad"
    assert "expected IN and DELAY shape to match, got [1] and [2]" in first.error_message
    second = stream.recv()
    assert second.error_message == ""
    assert np.frombuffer(outputs_of(second.infer_response)["OUT"][2], np.int32).tolist() == [5]
    assert stream.close() == []


def _pending(metrics_url):
    text = requests.get(f"http://{metrics_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'nv_inference_pending_request_count{{model="{MODEL}"'):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no pending count for {MODEL} in the metrics")


def test_a_client_that_goes_away_stops_the_request(grpc_url, metrics_url, oracle):
    """The sidecar's own cleanup: a request whose client reset the stream does not run on (its
    next response is an hour away). Not a protocol rule: Triton 2.51's python-backend mirror
    sleeps on, and through the upstream backend the sidecar reads the upstream's call to its end
    instead of resetting it (skipped there)."""
    if oracle:
        pytest.skip("checks the sidecar's own cleanup, not Triton's")
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    requests_queue = queue.Queue()
    call = stub.ModelStreamInfer(iter(requests_queue.get, None))
    requests_queue.put(repeat_request([1, 2], [0, 3_600_000], request_id="gone"))
    first = next(call)
    assert first.infer_response.id == "gone"
    assert _pending(metrics_url) == 1
    call.cancel()
    channel.close()
    deadline = time.time() + 10
    while _pending(metrics_url) != 0 and time.time() < deadline:
        time.sleep(0.05)
    assert _pending(metrics_url) == 0


def test_unary_infer_is_unimplemented(grpc_stub):
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(repeat_request([1], [0]))
    assert grpc_error(info.value) == (
        "UNIMPLEMENTED",
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    )


def test_http_infer_is_not_implemented(http_url):
    body = {
        "inputs": [
            {"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]},
            {"name": "DELAY", "shape": [1], "datatype": "UINT32", "data": [0]},
            {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [0]},
        ]
    }
    r = requests.post(f"http://{http_url}/v2/models/{MODEL}/infer", json=body, timeout=10)
    assert r.status_code == 501
    assert r.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }


def test_config_says_decoupled(http_client):
    config = http_client.get_model_config(MODEL)
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert [o["name"] for o in config["output"]] == ["OUT", "IDX"]


def test_statistics_count_each_request_once(grpc_stub, http_client):
    before = http_client.get_inference_statistics(MODEL)["model_stats"][0]["inference_stats"]
    stream = Stream(grpc_stub)
    stream.send(repeat_request([1, 2, 3], [0, 0, 0], empty_final=True))
    for _ in range(4):
        stream.recv()
    stream.close()
    deadline = time.time() + 5
    while True:
        after = http_client.get_inference_statistics(MODEL)["model_stats"][0]["inference_stats"]
        if after["success"]["count"] == before["success"]["count"] + 1 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert after["success"]["count"] == before["success"]["count"] + 1


def test_client_library_rejects_nothing_else(grpc_client):
    """The unary client call fails with Triton's words; the model stays ready."""
    inputs = [grpcclient.InferInput("IN", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer(MODEL, inputs)
    assert "decoupled transaction policy" in info.value.message()
    assert grpc_client.is_model_ready(MODEL)


@pytest.fixture
def non_decoupled(raw_http):
    """`repeat_int32` loaded with `decoupled: false`, as L0_decoupled's NonDecoupledTest serves it;
    loaded from the repository again afterwards."""
    policy = {"model_transaction_policy": {"decoupled": False}}
    resp = load_http(raw_http, MODEL, {"parameters": {"config": json.dumps(policy)}})
    assert resp.status == 200, resp
    yield
    assert unload_http(raw_http, MODEL).status == 200
    index_entry(raw_http, MODEL)
    assert load_http(raw_http, MODEL).status == 200


def repeat_inputs(module, values, wait_ms=0):
    inputs = [module.InferInput("IN", [len(values)], "INT32"),
              module.InferInput("DELAY", [len(values)], "UINT32"),
              module.InferInput("WAIT", [1], "UINT32")]
    inputs[0].set_data_from_numpy(np.array(values, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.zeros(len(values), dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([wait_ms], dtype=np.uint32))
    return inputs


@local_models
def test_loaded_non_decoupled_answers_its_one_response(non_decoupled, http_client, grpc_client):
    """L0_decoupled NonDecoupledTest: IN [1] answers OUT [1], IDX [0] over HTTP and gRPC."""
    assert http_client.get_model_config(MODEL)["model_transaction_policy"] == {"decoupled": False}
    for module, client in [(httpclient, http_client), (grpcclient, grpc_client)]:
        result = client.infer(MODEL, repeat_inputs(module, [1]))
        assert result.as_numpy("OUT").tolist() == [1]
        assert result.as_numpy("IDX").tolist() == [0]


@local_models
def test_loaded_non_decoupled_answers_once_on_a_stream(non_decoupled, grpc_stub):
    """On a stream too, one response per request, in request order."""
    stream = Stream(grpc_stub)
    stream.send(repeat_request([7], [0], wait_ms=50, request_id="a"))
    stream.send(repeat_request([8], [0], request_id="b"))
    first, second = stream.recv(), stream.recv()
    assert stream.close() == []
    assert [first.infer_response.id, second.infer_response.id] == ["a", "b"]
    out = outputs_of(first.infer_response)
    assert np.frombuffer(out["OUT"][2], dtype=np.int32).tolist() == [7]
    assert np.frombuffer(out["IDX"][2], dtype=np.uint32).tolist() == [0]


@local_models
@pytest.mark.parametrize("values", [[], [4, 5]], ids=["none", "two"])
def test_loaded_non_decoupled_wants_exactly_one_response(non_decoupled, http_client, grpc_stub,
                                                         values):
    """The repeat backend sends a response per element all the same; Triton's front ends answer
    INTERNAL `expected a single response, got N` when there were not exactly one."""
    message = f"expected a single response, got {len(values)}"
    with pytest.raises(InferenceServerException) as info:
        http_client.infer(MODEL, repeat_inputs(httpclient, values))
    assert (info.value.status(), info.value.message()) == ("500", message)
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(repeat_request(values, [0] * len(values)))
    assert grpc_error(info.value) == ("INTERNAL", message)
