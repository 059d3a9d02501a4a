"""gRPC ModelStreamInfer: many requests on one stream, in-stream errors."""

import queue

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import SIMPLE_A, SIMPLE_B

_END = object()


def simple_request(a=SIMPLE_A, b=SIMPLE_B, request_id="", model="simple"):
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        req.inputs.add(name=name, datatype="INT32", shape=list(x.shape))
        req.raw_input_contents.append(x.tobytes())
    return req


def fp32_request(n, request_id):
    req = service_pb2.ModelInferRequest(model_name="identity_fp32", id=request_id)
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[n])
    req.raw_input_contents.append(np.arange(n, dtype=np.float32).tobytes())
    return req


class Stream:
    """Bidirectional stream driven step by step (send, then read)."""

    def __init__(self, stub):
        self._q = queue.Queue()
        self._responses = stub.ModelStreamInfer(iter(self._q.get, _END), timeout=60)

    def send(self, req):
        self._q.put(req)

    def recv(self):
        return next(self._responses)

    def close(self):
        self._q.put(_END)
        rest = list(self._responses)  # stream must end cleanly (OK status)
        return rest


def _int32(raw):
    return np.frombuffer(raw, dtype=np.int32).reshape(-1).tolist()


def test_stream_many_requests_in_order(grpc_stub):
    stream = Stream(grpc_stub)
    ids = []
    for i in range(12):
        rid = f"req-{i}"
        ids.append(rid)
        if i % 3 == 2:
            stream.send(fp32_request(1000 * (i + 1), rid))  # bigger work in between
        else:
            stream.send(simple_request(np.full((1, 16), i, np.int32), request_id=rid))
    got = [stream.recv() for _ in ids]
    assert [r.infer_response.id for r in got] == ids
    for i, r in enumerate(got):
        assert r.error_message == ""
        resp = r.infer_response
        assert resp.model_version == "1"
        if i % 3 == 2:
            assert resp.model_name == "identity_fp32"
            assert list(resp.outputs[0].shape) == [1000 * (i + 1)]
        else:
            assert resp.model_name == "simple"
            outs = {o.name: _int32(raw) for o, raw in zip(resp.outputs, resp.raw_output_contents)}
            assert outs["OUTPUT0"] == [i + 3] * 16
            assert outs["OUTPUT1"] == [i - 3] * 16
    assert stream.close() == []


def test_stream_final_response_parameter(grpc_stub):
    stream = Stream(grpc_stub)
    stream.send(simple_request(request_id="f1"))
    r = stream.recv()
    params = r.infer_response.parameters
    assert "triton_final_response" in params
    assert params["triton_final_response"].WhichOneof("parameter_choice") == "bool_param"
    assert params["triton_final_response"].bool_param is True
    assert stream.close() == []


def test_stream_errors_do_not_close_stream(grpc_stub):
    stream = Stream(grpc_stub)
    bad_dtype = simple_request(request_id="e-dtype")
    bad_dtype.inputs[0].datatype = "FP32"
    plan = [
        (simple_request(request_id="ok-1"), None),
        (simple_request(request_id="e-model", model="no_such_model"),
         "Request for unknown model: 'no_such_model' is not found"),
        (bad_dtype,
         "[request id: e-dtype] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"),
        (simple_request(request_id="ok-2"), None),
    ]
    for req, _ in plan:
        stream.send(req)
    for req, err in plan:
        r = stream.recv()
        assert r.infer_response.id == req.id
        if err is None:
            assert r.error_message == ""
            assert len(r.infer_response.outputs) == 2
        else:
            assert r.error_message == err
            assert len(r.infer_response.outputs) == 0
            assert len(r.infer_response.raw_output_contents) == 0
    # still usable afterwards
    stream.send(simple_request(request_id="ok-3"))
    r = stream.recv()
    assert r.error_message == "" and r.infer_response.id == "ok-3"
    assert stream.close() == []


def test_stream_error_of_a_running_request_is_its_final_response(grpc_stub):
    """A refused request is answered with the error and its id alone; an error the model raises
    once the request runs (here the backend's refusal of a string element cut short) is the
    request's final response: the error, the model's name and the version asked for, and
    `triton_final_response`."""
    refused = service_pb2.ModelInferRequest(model_name="identity_bytes", id="refused")
    refused.inputs.add(name="INPUT0", datatype="BYTES", shape=[3])
    refused.raw_input_contents.append(b"\x01\x00\x00\x00a")
    running = service_pb2.ModelInferRequest(model_name="identity_bytes", id="running")
    running.inputs.add(name="INPUT0", datatype="BYTES", shape=[1])
    running.raw_input_contents.append(b"\x05\x00\x00\x00ab")
    stream = Stream(grpc_stub)
    stream.send(refused)
    stream.send(running)
    first, second = stream.recv(), stream.recv()
    assert first.error_message == ("[request id: refused] expected 3 string elements for inference input "
                                   "'INPUT0' for model 'identity_bytes', got 1")
    assert (first.infer_response.id, first.infer_response.model_name) == ("refused", "")
    assert dict(first.infer_response.parameters) == {}
    assert second.error_message == ("incomplete string data for inference input 'INPUT0', expecting string "
                                    "of length 5 but only 2 bytes available")
    response = second.infer_response
    assert (response.id, response.model_name, response.model_version) == ("running", "identity_bytes", "")
    assert response.parameters["triton_final_response"].bool_param is True
    assert len(response.outputs) == 0
    assert stream.close() == []


def test_stream_with_client_callbacks(grpc_client):
    """simple_grpc_sequence_stream_infer_client.py style: results routed by echoed id."""
    results = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(5):
            a = np.full((1, 16), i, np.int32)
            inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(SIMPLE_B)
            model = "no_such_model" if i == 2 else "simple"
            grpc_client.async_stream_infer(model, inputs, request_id=f"cb_{i}")
        seen = []
        for i in range(5):
            result, error = results.get(timeout=30)
            if i == 2:
                assert result is None
                assert isinstance(error, InferenceServerException)
                assert error.message() == "Request for unknown model: 'no_such_model' is not found"
                seen.append("error")
            else:
                assert error is None, error
                resp = result.get_response()
                seen.append(resp.id)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), i, np.int32) + SIMPLE_B)
                assert resp.parameters["triton_final_response"].bool_param is True
        assert seen == ["cb_0", "cb_1", "error", "cb_3", "cb_4"]
    finally:
        grpc_client.stop_stream()


def test_stream_reserved_parameter_allowed(grpc_stub):
    """triton_enable_empty_final_response is the one triton_* key a stream may send."""
    stream = Stream(grpc_stub)
    req = simple_request(request_id="empty-final")
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    stream.send(req)
    r = stream.recv()
    assert r.error_message == ""
    assert r.infer_response.id == "empty-final"
    assert r.infer_response.parameters["triton_final_response"].bool_param is True
    assert stream.close() == []


def test_two_streams_in_parallel(grpc_stub):
    s1, s2 = Stream(grpc_stub), Stream(grpc_stub)
    for i in range(5):
        s1.send(simple_request(request_id=f"s1-{i}"))
        s2.send(simple_request(request_id=f"s2-{i}"))
    assert [s1.recv().infer_response.id for _ in range(5)] == [f"s1-{i}" for i in range(5)]
    assert [s2.recv().infer_response.id for _ in range(5)] == [f"s2-{i}" for i in range(5)]
    assert s1.close() == [] and s2.close() == []
