"""Every datatype round-trips through identity_<dtype> (HTTP JSON, HTTP binary, gRPC)."""

import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from support import binary_body, identity_model

VALUES = {
    "BOOL": np.array([True, False, True, True], dtype=np.bool_),
    "UINT8": np.array([0, 1, 128, 255], dtype=np.uint8),
    "UINT16": np.array([0, 2, 40000, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 3, 2**31, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 4, 2**63, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, -2, 0, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), -3, 0, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), -4, 0, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.5, -1.25, 65504.0, 0.0], dtype=np.float16),
    "FP32": np.array([0.5, -1.25, 3.0e38, 1.0e-30], dtype=np.float32),
    "FP64": np.array([0.1, -2.5e300, 1.0, 5e-324], dtype=np.float64),
    # tritonclient >= 2.67 carries BF16 as ml_dtypes.bfloat16
    "BF16": np.array([1.0, -2.5, 0.15625, 3.0e38], dtype=ml_dtypes.bfloat16),
    "BYTES": np.array([b"a", b"", b"\x00z", "é".encode()], dtype=np.object_),
}
ALL = sorted(VALUES)
JSON_OK = [d for d in ALL if d not in ("FP16", "BF16")]


def _assert_same(dtype, got, want):
    assert got is not None
    assert got.shape == want.shape
    if dtype == "BYTES":
        assert list(got) == list(want)
    elif dtype == "BF16":
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", JSON_OK)
def test_http_json_roundtrip(http_client, dtype):
    data = VALUES[dtype]
    if dtype == "BYTES":  # JSON carries text only
        data = np.array(["a", "", "z\x00", "é"], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [len(data)], dtype)
    inp.set_data_from_numpy(data, binary_data=False)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    result = http_client.infer(identity_model(dtype), [inp], outputs=[out])
    resp = result.get_response()
    assert resp["outputs"][0]["datatype"] == dtype
    assert resp["outputs"][0]["shape"] == [len(data)]
    assert "data" in resp["outputs"][0]
    got = result.as_numpy("OUTPUT0")
    if dtype == "BYTES":
        assert [x.decode() if isinstance(x, bytes) else x for x in got] == list(data)
    else:
        _assert_same(dtype, got, data)


def test_http_json_exact_numbers(raw_http):
    """UINT64/INT64 extremes and BOOL literals are written as exact JSON values."""
    cases = [
        ("UINT64", [0, 18446744073709551615], b"[0,18446744073709551615]"),
        ("INT64", [-9223372036854775808, 9223372036854775807], b"[-9223372036854775808,9223372036854775807]"),
        ("BOOL", [True, False], b"[true,false]"),
        ("INT8", [-128, 127], b"[-128,127]"),
        ("FP64", [0.1, -1e300], b"[0.1,-1e300]"),
    ]
    for dtype, data, expected in cases:
        req = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [len(data)], "data": data}]}
        resp = raw_http("POST", f"/v2/models/{identity_model(dtype)}/infer", json.dumps(req))
        assert resp.status == 200, resp
        assert b'"data":' + expected in resp.body, (dtype, resp)


@pytest.mark.parametrize("dtype", ALL)
def test_http_binary_roundtrip(http_client, dtype):
    data = VALUES[dtype]
    inp = httpclient.InferInput("INPUT0", [len(data)], dtype)
    inp.set_data_from_numpy(data, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    result = http_client.infer(identity_model(dtype), [inp], outputs=[out])
    resp = result.get_response()
    assert resp["outputs"][0]["datatype"] == dtype
    assert "data" not in resp["outputs"][0]
    _assert_same(dtype, result.as_numpy("OUTPUT0"), VALUES[dtype])


@pytest.mark.parametrize("dtype", ALL)
def test_grpc_roundtrip(grpc_client, dtype):
    data = VALUES[dtype]
    inp = grpcclient.InferInput("INPUT0", [len(data)], dtype)
    inp.set_data_from_numpy(data)
    result = grpc_client.infer(identity_model(dtype), [inp])
    out = result.get_response().outputs[0]
    assert out.datatype == dtype and list(out.shape) == [len(data)]
    _assert_same(dtype, result.as_numpy("OUTPUT0"), VALUES[dtype])


@pytest.mark.parametrize("dtype,raw", [
    ("BF16", bytes([0x80, 0x3F, 0x20, 0xC0, 0x00, 0x00, 0x7F, 0x7F])),
    ("FP16", np.array([1.0, -2.0, 0.0, 65504.0], dtype=np.float16).tobytes()),
    ("BOOL", bytes([1, 0, 1, 0])),
])
def test_http_binary_bytes_preserved(raw_http, dtype, raw):
    n = 4
    header = {
        "inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [n], "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_body(header, raw)
    resp = raw_http("POST", f"/v2/models/{identity_model(dtype)}/infer", body, headers)
    assert resp.status == 200, resp
    doc, tail = resp.split_binary()
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == len(raw)
    assert tail == raw


# --------------------------------------------------------------------------- FP16/BF16 and JSON
@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
def test_json_input_rejected_for_half_types(raw_http, dtype):
    req = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [2], "data": [1, 2]}]}
    resp = raw_http("POST", f"/v2/models/{identity_model(dtype)}/infer", json.dumps(req))
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": f"receiving {dtype} data via JSON is not supported. "
        "Please use the binary data format for input INPUT0"
    }


@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
@pytest.mark.parametrize("outputs", ["listed_json", "default_kind"])
def test_json_output_rejected_for_half_types(raw_http, dtype, outputs):
    header = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [2], "parameters": {"binary_data_size": 4}}]}
    if outputs == "listed_json":
        header["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]
    body, headers = binary_body(header, b"\x00\x3c\x00\x40")
    resp = raw_http("POST", f"/v2/models/{identity_model(dtype)}/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": f"sending {dtype} data via JSON is not supported. Please use the binary data format for output"
    }


# --------------------------------------------------------------------------- zero elements
def test_zero_elements_http_json(raw_http):
    for dtype in ("FP32", "INT64", "BYTES"):
        req = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [0], "data": []}]}
        resp = raw_http("POST", f"/v2/models/{identity_model(dtype)}/infer", json.dumps(req))
        assert resp.status == 200, resp
        assert resp.json()["outputs"] == [{"name": "OUTPUT0", "datatype": dtype, "shape": [0], "data": []}]


def test_zero_elements_http_binary(raw_http):
    header = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [0], "parameters": {"binary_data_size": 0}}],
        "parameters": {"binary_data_output": True},
    }
    body, headers = binary_body(header)
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", body, headers)
    assert resp.status == 200, resp
    # No non-empty binary chunk: plain JSON response, no Inference-Header-Content-Length.
    assert resp.headers.get("content-type") == "application/json"
    assert "inference-header-content-length" not in resp.headers
    assert resp.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [0], "parameters": {"binary_data_size": 0}}
    ]


def test_zero_elements_http_client(http_client):
    inp = httpclient.InferInput("INPUT0", [0], "FP32")
    inp.set_data_from_numpy(np.zeros((0,), dtype=np.float32))
    result = http_client.infer("identity_fp32", [inp])
    assert result.as_numpy("OUTPUT0").shape == (0,)


def test_zero_elements_grpc(grpc_client):
    for dtype, npdt in (("FP32", np.float32), ("BYTES", np.object_)):
        inp = grpcclient.InferInput("INPUT0", [0], dtype)
        inp.set_data_from_numpy(np.zeros((0,), dtype=npdt))
        result = grpc_client.infer(identity_model(dtype), [inp])
        out = result.get_response().outputs[0]
        assert list(out.shape) == [0]
        assert result.get_response().raw_output_contents[0] == b""


def test_large_tensor_roundtrip(http_client, grpc_client):
    """4 MiB FP32 (the perf_analyzer size) over HTTP binary and gRPC."""
    x = np.random.default_rng(7).random(1 << 20, dtype=np.float32)
    hin = httpclient.InferInput("INPUT0", [x.size], "FP32")
    hin.set_data_from_numpy(x)
    np.testing.assert_array_equal(http_client.infer("identity_fp32", [hin]).as_numpy("OUTPUT0"), x)
    gin = grpcclient.InferInput("INPUT0", [x.size], "FP32")
    gin.set_data_from_numpy(x)
    np.testing.assert_array_equal(grpc_client.infer("identity_fp32", [gin]).as_numpy("OUTPUT0"), x)
