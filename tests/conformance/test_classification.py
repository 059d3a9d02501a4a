"""Classification extension (TRITON.md §4) over HTTP (JSON and binary) and gRPC.

Each result element is "<value>:<index>[:<label>]" with std::to_string
formatting ("%f" for floats, plain decimal for integers), sorted by value
descending (ties by ascending index; Triton's libstdc++ sort keeps that order
for rows of at most 16 elements, so tie tests stay within 16), min(k, n)
entries per row, datatype BYTES, shape [B, min(k, n)] for batching models and
[min(k, n)] otherwise. NaN ordering is undefined in Triton: NaN tests compare
only the set of strings.
"""

import json
import math

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import deserialize_bytes, grpc_error

LABELS = ["label0", "label1", "label2", "label3"]  # classifier's label file on OUTPUT0


def unsupported(dtype: str) -> str:
    return f"class result not available for output due to unsupported type '{dtype}'"


# --------------------------------------------------------------------------- expectations
def fmt_value(v, dtype: str) -> str:
    """std::to_string of the output value in its own datatype."""
    if dtype in ("FP32", "FP64"):
        f = float(v)
        if math.isnan(f):
            return "-nan" if math.copysign(1.0, f) < 0 else "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return "%f" % f
    return str(int(v))


def topk_row(row, k: int, dtype: str, labels=None) -> list:
    """Deterministic top-k of one row: descending value, ties by ascending index."""
    vals = list(row)
    order = sorted(range(len(vals)), key=lambda i: (-vals[i], i))  # Python ints/floats: exact
    out = []
    for i in order[: min(k, len(vals))]:
        s = f"{fmt_value(vals[i], dtype)}:{i}"
        if labels is not None and i < len(labels) and labels[i]:
            s += f":{labels[i]}"
        out.append(s)
    return out


def expected(data: np.ndarray, k: int, dtype: str, batching: bool, labels=None) -> list:
    """Nested list of strings with the response shape."""
    if batching:
        return [topk_row(r.tolist(), k, dtype, labels) for r in data.reshape(data.shape[0], -1)]
    return topk_row(data.reshape(-1).tolist(), k, dtype, labels)


def as_strings(arr) -> list:
    """numpy BYTES result (bytes from binary/gRPC, str from JSON) -> nested list of str."""
    return np.vectorize(lambda x: x.decode() if isinstance(x, (bytes, bytearray)) else str(x),
                        otypes=[object])(arr).tolist()


# --------------------------------------------------------------------------- client helpers
def http_classify(client, model, data, dtype, k, binary):
    inp = httpclient.InferInput("INPUT0", list(data.shape), dtype)
    inp.set_data_from_numpy(data, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=k)
    result = client.infer(model, [inp], outputs=[out])
    meta = result.get_output("OUTPUT0")
    assert meta["datatype"] == "BYTES", meta
    if binary:
        assert "binary_data_size" in meta.get("parameters", {}), meta
        assert "data" not in meta
    else:
        assert "data" in meta and "parameters" not in meta, meta
    return meta["shape"], as_strings(result.as_numpy("OUTPUT0"))


def grpc_classify(client, model, data, dtype, k):
    inp = grpcclient.InferInput("INPUT0", list(data.shape), dtype)
    inp.set_data_from_numpy(data)
    result = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=k)])
    out = result.get_output("OUTPUT0")
    assert out.datatype == "BYTES", out
    resp = result.get_response()
    assert len(resp.raw_output_contents) == 1 and not out.HasField("contents")
    return list(out.shape), as_strings(result.as_numpy("OUTPUT0"))


TRANSPORTS = ["http-json", "http-binary", "grpc"]


def classify(transport, http_client, grpc_client, model, data, dtype, k):
    if transport == "grpc":
        return grpc_classify(grpc_client, model, data, dtype, k)
    return http_classify(http_client, model, data, dtype, k, binary=(transport == "http-binary"))


# --------------------------------------------------------------------------- classifier (labels, batching)
SCORES = np.array([[1.0, 3.3, 2.0, 0.5]], np.float32)


@pytest.mark.parametrize("k", [1, 2, 4, 5, 1000], ids=["k1", "k2", "k-eq-n", "k-above-n", "k1000"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_classifier_batch1(http_client, grpc_client, transport, k):
    shape, got = classify(transport, http_client, grpc_client, "classifier", SCORES, "FP32", k)
    m = min(k, 4)
    assert shape == [1, m]
    assert got == expected(SCORES, k, "FP32", True, LABELS)
    assert got[0][:2] == ["3.300000:1:label1", "2.000000:2:label2"][:m]
    if k >= 4:
        assert got[0] == ["3.300000:1:label1", "2.000000:2:label2", "1.000000:0:label0", "0.500000:3:label3"]


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_classifier_batch_rows(http_client, grpc_client, transport, k):
    """Batching model: top-k per batch row; shape [B, min(k, n)]."""
    data = np.array(
        [[0.1, 0.2, 0.3, 0.4], [4.0, 3.0, 2.0, 1.0], [-1.5, 7.25, 0.0, 7.0], [1e-7, 1e10, -3.0, 2.5],
         [0.5, 0.25, 0.75, 0.125]],
        np.float32,
    )
    shape, got = classify(transport, http_client, grpc_client, "classifier", data, "FP32", k)
    assert shape == [5, min(k, 4)]
    assert got == expected(data, k, "FP32", True, LABELS)
    assert got[1][0] == "4.000000:0:label0"
    assert got[3][0] == "10000000000.000000:1:label1"
    if k >= 3:
        assert got[3][2] == "0.000000:0:label0"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_classifier_ties(http_client, grpc_client, transport):
    data = np.array([[1, 1, 1, 1], [0, 2, 2, 0], [3, 1, 3, 1]], np.float32)
    shape, got = classify(transport, http_client, grpc_client, "classifier", data, "FP32", 3)
    assert shape == [3, 3]
    assert got == [
        ["1.000000:0:label0", "1.000000:1:label1", "1.000000:2:label2"],
        ["2.000000:1:label1", "2.000000:2:label2", "0.000000:0:label0"],
        ["3.000000:0:label0", "3.000000:2:label2", "1.000000:1:label1"],
    ]


def test_classifier_raw_json_exact(raw_http):
    """The wire form of a JSON classification output (compact, BYTES, strings)."""
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 3.3, 2.0, 0.5]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
    }
    resp = raw_http("POST", "/v2/models/classifier/infer", json.dumps(body))
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("application/json")
    assert "inference-header-content-length" not in resp.headers
    assert resp.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "BYTES", "shape": [1, 2], "data": ["3.300000:1:label1", "2.000000:2:label2"]}
    ]


def test_classifier_raw_binary_exact(raw_http):
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 4], "data": [1, 3.3, 2, 0.5, 9, 9, 1, 1]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2, "binary_data": True}}],
    }
    resp = raw_http("POST", "/v2/models/classifier/infer", json.dumps(body))
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/octet-stream"
    header, tail = resp.split_binary()
    (out,) = header["outputs"]
    strings = [b"3.300000:1:label1", b"2.000000:2:label2", b"9.000000:0:label0", b"9.000000:1:label1"]
    assert out == {"name": "OUTPUT0", "datatype": "BYTES", "shape": [2, 2],
                   "parameters": {"binary_data_size": sum(4 + len(s) for s in strings)}}
    assert deserialize_bytes(tail) == strings


def test_classification_zero_is_off(raw_http):
    """"classification": 0 means no classification: the FP32 tensor comes back."""
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 3.0, 2.0, 0.5]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}],
    }
    resp = raw_http("POST", "/v2/models/classifier/infer", json.dumps(body))
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4],
                                       "data": [1.0, 3.0, 2.0, 0.5]}]


def test_grpc_raw_output_contents(grpc_stub):
    """gRPC: the classification result is a BYTES serialization in raw_output_contents."""
    req = service_pb2.ModelInferRequest(model_name="classifier")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.array([0.0, 1.0, 2.0, 3.0], np.float32).tobytes())
    req.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 2
    resp = grpc_stub.ModelInfer(req)
    (out,) = resp.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("OUTPUT0", "BYTES", [1, 2])
    assert deserialize_bytes(resp.raw_output_contents[0]) == [b"3.000000:3:label3", b"2.000000:2:label2"]


# --------------------------------------------------------------------------- identity models (no labels)
@pytest.mark.parametrize("k", [1, 3, 6, 10])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_labels_non_batching(http_client, grpc_client, transport, k):
    """identity_fp32 has no labels and max_batch_size 0: the whole tensor is one row, shape [min(k, n)]."""
    data = np.array([0.25, -1.0, 9.5, 3.3, 9.5, 0.0], np.float32)
    shape, got = classify(transport, http_client, grpc_client, "identity_fp32", data, "FP32", k)
    assert shape == [min(k, 6)]
    assert got == expected(data, k, "FP32", False)
    assert got[0] == "9.500000:2"
    if k >= 3:
        assert got[:3] == ["9.500000:2", "9.500000:4", "3.300000:3"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fp64_formatting(http_client, grpc_client, transport):
    data = np.array([1e10, 1e-7, 3.3, -2.5, 123456.7890123], np.float64)
    shape, got = classify(transport, http_client, grpc_client, "identity_fp64", data, "FP64", 5)
    assert shape == [5]
    assert got == ["10000000000.000000:0", "123456.789012:4", "3.300000:2", "0.000000:1", "-2.500000:3"]
    assert got == expected(data, 5, "FP64", False)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_infinities(http_client, grpc_client, transport):
    data = np.array([1.0, np.inf, -np.inf, 0.0], np.float32)
    shape, got = classify(transport, http_client, grpc_client, "identity_fp32", data, "FP32", 4)
    assert shape == [4]
    assert got == ["inf:1", "1.000000:0", "0.000000:3", "-inf:2"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_nan_values(http_client, grpc_client, transport):
    """NaN prints as "nan" / "-nan"; where it sorts is undefined, so only the set is checked."""
    data = np.array([1.0, np.nan, 3.0, -np.nan, 2.0], np.float32)
    assert math.copysign(1.0, float(data[3])) < 0
    shape, got = classify(transport, http_client, grpc_client, "identity_fp32", data, "FP32", 5)
    assert shape == [5]
    assert sorted(got) == sorted(["1.000000:0", "nan:1", "3.000000:2", "-nan:3", "2.000000:4"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ties_beyond_sixteen_classes(http_client, grpc_client, transport):
    """Triton orders classes with std::sort, which is not stable: past 16 elements equal values
    come out in the order its introsort leaves them, not by index (this is Triton's answer)."""
    data = np.array([i % 3 for i in range(20)], np.int32)
    shape, got = classify(transport, http_client, grpc_client, "identity_int32", data, "INT32", 20)
    assert shape == [20]
    assert got == ["2:2", "2:17", "2:5", "2:14", "2:8", "2:11", "1:10", "1:19", "1:16", "1:13", "1:7",
                   "1:4", "1:1", "0:0", "0:9", "0:12", "0:6", "0:15", "0:3", "0:18"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_nan_where_the_sort_leaves_it(http_client, grpc_client, transport):
    """NaN compares false with everything; std::sort's insertion sort leaves a leading NaN first."""
    data = np.array([np.nan, 1e10, -np.inf, 0.0], np.float64)
    shape, got = classify(transport, http_client, grpc_client, "identity_fp64", data, "FP64", 4)
    assert got == ["nan:0", "10000000000.000000:1", "0.000000:3", "-inf:2"]


INT_CASES = {
    "INT8": [-5, 3, 127, -128, 3],
    "INT16": [-300, 32767, -32768, 0],
    "INT32": [-5, 200, 7, 7, 0],
    "INT64": [-(2**63), 2**63 - 1, 42],
    "UINT8": [200, 3, 255, 0],
    "UINT16": [65535, 1, 300],
    "UINT32": [4294967295, 5, 2**31],
    "UINT64": [2**64 - 1, 5, 2**63],
}


@pytest.mark.parametrize("dtype", list(INT_CASES))
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_integer_outputs(http_client, grpc_client, transport, dtype):
    """Integer values print as plain decimal and compare in their own type."""
    np_dtype = np.dtype(dtype.lower())
    data = np.array(INT_CASES[dtype], dtype=np_dtype)
    model = f"identity_{dtype.lower()}"
    k = len(data)
    shape, got = classify(transport, http_client, grpc_client, model, data, dtype, k)
    assert shape == [k]
    assert got == expected(data, k, dtype, False)
    if dtype == "INT32":
        assert got == ["200:1", "7:2", "7:3", "0:4", "-5:0"]
    if dtype == "UINT8":
        assert got == ["255:2", "200:0", "3:1", "0:3"]
    if dtype == "UINT64":
        assert got[0] == "18446744073709551615:0"


# --------------------------------------------------------------------------- rejected datatypes
REJECTED = {
    "BOOL": np.array([True, False, True]),
    "FP16": np.array([1.0, 2.0, 0.5], np.float16),
    "BF16": np.array([1.0, 2.0, 0.5], ml_dtypes.bfloat16),
}


def _rejected_case(http_client, grpc_client, dtype, data):
    model = f"identity_{dtype.lower()}"
    for binary in (True, False):
        inp = httpclient.InferInput("INPUT0", list(data.shape), dtype)
        inp.set_data_from_numpy(data, binary_data=True)
        with pytest.raises(InferenceServerException) as info:
            http_client.infer(model, [inp], outputs=[
                httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=1)])
        assert (info.value.status(), info.value.message()) == ("400", unsupported(dtype))
    ginp = grpcclient.InferInput("INPUT0", list(data.shape), dtype)
    ginp.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer(model, [ginp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert (info.value.status(), info.value.message()) == ("StatusCode.INVALID_ARGUMENT", unsupported(dtype))
    # the model still serves plain requests
    result = grpc_client.infer(model, [ginp])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("dtype", list(REJECTED))
def test_unsupported_datatype(http_client, grpc_client, dtype):
    _rejected_case(http_client, grpc_client, dtype, REJECTED[dtype])


@pytest.mark.triton251_differs("2.51 crashes (the process dies) on classification of a BYTES output", run=False)
def test_unsupported_datatype_bytes(http_client, grpc_client):
    _rejected_case(http_client, grpc_client, "BYTES", np.array([b"a", b"bb", b"ccc"], dtype=np.object_))


# --------------------------------------------------------------------------- parameter errors
CLASS_PARSE_ERROR = (
    "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"
)


@pytest.mark.parametrize("value", ["x", "2", -1, 1.5, True, None, [2]],
                         ids=["string", "numeric-string", "negative", "float", "bool", "null", "array"])
def test_http_classification_wrong_type(raw_http, value):
    """A JSON type error in the output parameter is a 500 (§0.3)."""
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 3.0, 2.0, 0.5]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": value}}],
    }
    resp = raw_http("POST", "/v2/models/classifier/infer", json.dumps(body))
    assert (resp.status, resp.error) == (500, CLASS_PARSE_ERROR), resp
    assert resp.headers["content-type"].startswith("application/json")


def _grpc_class_request(setter):
    req = service_pb2.ModelInferRequest(model_name="classifier")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    setter(req.outputs.add(name="OUTPUT0").parameters["classification"])
    return req


TYPE_ERROR = "invalid value type for 'classification' parameter, expected int64_param"
VALUE_ERROR = "invalid value for 'classification' parameter, expected >= 0"


@pytest.mark.parametrize(
    "kind,value,message",
    [
        ("bool_param", True, TYPE_ERROR),
        ("uint64_param", 2, TYPE_ERROR),
        ("string_param", "2", TYPE_ERROR),
        ("double_param", 2.0, TYPE_ERROR),
        ("int64_param", 0, VALUE_ERROR),
        ("int64_param", -3, VALUE_ERROR),
    ],
    ids=["bool", "uint64", "string", "double", "zero", "negative"],
)
def test_grpc_classification_bad_parameter(grpc_stub, kind, value, message):
    req = _grpc_class_request(lambda p: setattr(p, kind, value))
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req, timeout=30)
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", message)


# --------------------------------------------------------------------------- metadata
def test_server_metadata_lists_classification(raw_http, grpc_client):
    resp = raw_http("GET", "/v2")
    assert resp.status == 200, resp
    assert "classification" in resp.json()["extensions"]
    assert "classification" in grpc_client.get_server_metadata().extensions

