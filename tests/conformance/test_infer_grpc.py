"""gRPC ModelInfer: client examples, raw stubs, explicit typed contents."""

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from support import SIMPLE_A, SIMPLE_B, deserialize_bytes, grpc_error


def simple_inputs(a=SIMPLE_A, b=SIMPLE_B):
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), "INT32"),
        grpcclient.InferInput("INPUT1", list(b.shape), "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def raw_simple_request(a=SIMPLE_A, b=SIMPLE_B, **kw):
    req = service_pb2.ModelInferRequest(model_name="simple", **kw)
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        req.inputs.add(name=name, datatype="INT32", shape=list(x.shape))
        req.raw_input_contents.append(x.tobytes())
    return req


def test_simple_like_example(grpc_client):
    """simple_grpc_infer_client.py."""
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = grpc_client.infer("simple", simple_inputs(), outputs=outputs, request_id="g-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)
    resp = result.get_response()
    assert resp.id == "g-1"
    assert resp.model_name == "simple"
    assert resp.model_version == "1"


def test_response_uses_raw_output_contents(grpc_stub):
    resp = grpc_stub.ModelInfer(raw_simple_request(id="r1"))
    assert resp.id == "r1" and resp.model_name == "simple" and resp.model_version == "1"
    assert len(resp.outputs) == 2
    assert len(resp.raw_output_contents) == len(resp.outputs)
    by_name = {}
    for out, raw in zip(resp.outputs, resp.raw_output_contents):
        assert out.datatype == "INT32"
        assert list(out.shape) == [1, 16]
        assert not out.HasField("contents")
        assert len(out.parameters) == 0  # no binary_data_size over gRPC
        by_name[out.name] = np.frombuffer(raw, dtype=np.int32).reshape(1, 16)
    np.testing.assert_array_equal(by_name["OUTPUT0"], SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(by_name["OUTPUT1"], SIMPLE_A - SIMPLE_B)


def test_requested_single_output(grpc_stub):
    req = raw_simple_request()
    req.outputs.add(name="OUTPUT1")
    resp = grpc_stub.ModelInfer(req)
    assert [o.name for o in resp.outputs] == ["OUTPUT1"]
    assert len(resp.raw_output_contents) == 1
    np.testing.assert_array_equal(
        np.frombuffer(resp.raw_output_contents[0], np.int32).reshape(1, 16), SIMPLE_A - SIMPLE_B
    )


@pytest.mark.parametrize("batch", [2, 8])
def test_simple_batches(grpc_client, batch):
    a = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    b = -a
    result = grpc_client.infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_async(grpc_client):
    """simple_grpc_async_infer_client.py: callbacks."""
    done = queue.Queue()
    for i in range(6):
        a = np.full((1, 16), i, dtype=np.int32)
        grpc_client.async_infer(
            "simple", simple_inputs(a), callback=lambda result, error, a=a: done.put((a, result, error)), request_id=f"a{i}"
        )
    for _ in range(6):
        a, result, error = done.get(timeout=30)
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + SIMPLE_B)
        assert result.get_response().id == f"a{int(a[0, 0])}"


def test_simple_aio(grpc_url):
    """simple_grpc_aio_infer_client.py."""
    import asyncio

    async def main():
        client = aiogrpcclient.InferenceServerClient(url=grpc_url)
        try:
            assert await client.is_server_ready()
            inputs = [
                aiogrpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                aiogrpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(SIMPLE_A)
            inputs[1].set_data_from_numpy(SIMPLE_B)
            results = await asyncio.gather(*[client.infer("simple", inputs) for _ in range(4)])
            for r in results:
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)
        finally:
            await client.close()

    asyncio.run(main())


def test_simple_string(grpc_client):
    """simple_grpc_string_infer_client.py."""
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "BYTES"), grpcclient.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = grpc_client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0").reshape(-1)] == [i + 1 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1").reshape(-1)] == [i - 1 for i in range(16)]


def test_simple_identity_nul(grpc_client):
    data = np.array([[b"he\x00llo", b"\x00\x01", b"", b"\xff"]], dtype=np.object_)
    inp = grpcclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data)
    result = grpc_client.infer("simple_identity", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


# --------------------------------------------------------------------------- explicit contents
def test_explicit_int_contents(grpc_stub):
    """grpc_explicit_int_content_client.py: typed contents in, raw_output_contents out."""
    req = service_pb2.ModelInferRequest(model_name="simple", id="explicit")
    for name, x in (("INPUT0", SIMPLE_A), ("INPUT1", SIMPLE_B)):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(x.reshape(-1).tolist())
    resp = grpc_stub.ModelInfer(req)
    got = {o.name: np.frombuffer(r, np.int32).reshape(1, 16) for o, r in zip(resp.outputs, resp.raw_output_contents)}
    np.testing.assert_array_equal(got["OUTPUT0"], SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(got["OUTPUT1"], SIMPLE_A - SIMPLE_B)
    assert all(not o.HasField("contents") for o in resp.outputs)


def test_explicit_int8_contents_wrap(grpc_stub):
    """grpc_explicit_int8_content_client.py on simple_int8: INT8 travels in int_contents; the
    sum and difference wrap as INT8 arithmetic does."""
    a = np.array([list(range(14)) + [127, -128]], dtype=np.int8)
    b = np.array([[1] * 16], dtype=np.int8)
    req = service_pb2.ModelInferRequest(model_name="simple_int8")
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        t = req.inputs.add(name=name, datatype="INT8", shape=[1, 16])
        t.contents.int_contents.extend(x.reshape(-1).tolist())
    req.outputs.add(name="OUTPUT0")
    req.outputs.add(name="OUTPUT1")
    resp = grpc_stub.ModelInfer(req)
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [
        ("OUTPUT0", "INT8", [1, 16]),
        ("OUTPUT1", "INT8", [1, 16]),
    ]
    got = {o.name: np.frombuffer(r, np.int8).reshape(1, 16) for o, r in zip(resp.outputs, resp.raw_output_contents)}
    np.testing.assert_array_equal(got["OUTPUT0"], a + b)  # 127 + 1 = -128
    np.testing.assert_array_equal(got["OUTPUT1"], a - b)  # -128 - 1 = 127
    assert got["OUTPUT0"][0, 14] == -128 and got["OUTPUT1"][0, 15] == 127


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_custom_identity_int32_like_memory_growth_test(grpc_client, http_client, protocol):
    """memory_growth_test.py: custom_identity_int32 (INPUT0 INT32 [1,16]) returned as it came,
    many times over one client each."""
    module, client = (grpcclient, grpc_client) if protocol == "grpc" else (httpclient, http_client)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for i in range(20):
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(data + i)
        result = client.infer(
            "custom_identity_int32", inputs, outputs=[module.InferRequestedOutput("OUTPUT0")]
        )
        out = result.as_numpy("OUTPUT0")
        assert out.dtype == np.int32 and out.shape == (1, 16)
        np.testing.assert_array_equal(out, data + i)


def test_explicit_mixed_contents_and_raw_forbidden(grpc_stub):
    """The example checks this exact error text."""
    req = service_pb2.ModelInferRequest(model_name="simple")
    t0 = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t0.contents.int_contents.extend(SIMPLE_A.reshape(-1).tolist())
    req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    req.raw_input_contents.append(SIMPLE_B.tobytes())
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT",
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    )


def test_explicit_bytes_contents(grpc_stub):
    """grpc_explicit_byte_content_client.py on simple_string."""
    req = service_pb2.ModelInferRequest(model_name="simple_string")
    for name, vals in (("INPUT0", [str(i).encode() for i in range(16)]), ("INPUT1", [b"2"] * 16)):
        t = req.inputs.add(name=name, datatype="BYTES", shape=[1, 16])
        t.contents.bytes_contents.extend(vals)
    resp = grpc_stub.ModelInfer(req)
    got = {o.name: deserialize_bytes(r) for o, r in zip(resp.outputs, resp.raw_output_contents)}
    assert [int(x) for x in got["OUTPUT0"]] == [i + 2 for i in range(16)]
    assert [int(x) for x in got["OUTPUT1"]] == [i - 2 for i in range(16)]


CONTENTS_CASES = {
    "BOOL": ("bool_contents", [True, False, True], np.bool_),
    "INT8": ("int_contents", [-128, 0, 127], np.int8),
    "INT16": ("int_contents", [-32768, 1, 32767], np.int16),
    "INT32": ("int_contents", [-(2**31), 2, 2**31 - 1], np.int32),
    "INT64": ("int64_contents", [-(2**63), 3, 2**63 - 1], np.int64),
    "UINT8": ("uint_contents", [0, 1, 255], np.uint8),
    "UINT16": ("uint_contents", [0, 2, 65535], np.uint16),
    "UINT32": ("uint_contents", [0, 3, 2**32 - 1], np.uint32),
    "UINT64": ("uint64_contents", [0, 4, 2**64 - 1], np.uint64),
    "FP32": ("fp32_contents", [0.5, -1.25, 3.0e38], np.float32),
    "FP64": ("fp64_contents", [0.1, -2.5e300, 1.0], np.float64),
    "BYTES": ("bytes_contents", [b"a\x00b", b"", b"xyz"], None),
}


@pytest.mark.parametrize("dtype", sorted(CONTENTS_CASES))
def test_typed_contents_per_datatype(grpc_stub, dtype):
    field, values, npdt = CONTENTS_CASES[dtype]
    req = service_pb2.ModelInferRequest(model_name=f"identity_{dtype.lower()}")
    t = req.inputs.add(name="INPUT0", datatype=dtype, shape=[len(values)])
    getattr(t.contents, field).extend(values)
    resp = grpc_stub.ModelInfer(req)
    assert resp.outputs[0].datatype == dtype
    assert list(resp.outputs[0].shape) == [len(values)]
    raw = resp.raw_output_contents[0]
    if npdt is None:
        assert deserialize_bytes(raw) == values
    else:
        np.testing.assert_array_equal(np.frombuffer(raw, dtype=npdt), np.array(values, dtype=npdt))


def test_typed_contents_wrong_field(grpc_stub):
    req = service_pb2.ModelInferRequest(model_name="identity_int32")
    t = req.inputs.add(name="INPUT0", datatype="INT32", shape=[2])
    t.contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT",
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'identity_int32' "
        "of type 'FP32', expected datatype 'INT32'",
    )


def test_no_data_for_input(grpc_stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT",
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    )


def test_custom_parameters_accepted(grpc_stub):
    req = raw_simple_request()
    req.parameters["my_int"].int64_param = 5
    req.parameters["my_str"].string_param = "x"
    req.parameters["my_bool"].bool_param = True
    resp = grpc_stub.ModelInfer(req)
    assert len(resp.outputs) == 2


def test_versioned_infer(grpc_stub):
    req = raw_simple_request()
    req.model_version = "1"
    assert grpc_stub.ModelInfer(req).model_version == "1"
