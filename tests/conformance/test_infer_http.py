"""HTTP inference the way Triton's Python client examples do it."""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient

from support import SIMPLE_A, SIMPLE_B, assert_simple_json_response, simple_json_request


def simple_inputs(a=SIMPLE_A, b=SIMPLE_B, binary0=True, binary1=True):
    inputs = [
        httpclient.InferInput("INPUT0", list(a.shape), "INT32"),
        httpclient.InferInput("INPUT1", list(b.shape), "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary0)
    inputs[1].set_data_from_numpy(b, binary_data=binary1)
    return inputs


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_simple_int8(http_client, binary):
    """simple_int8, the INT8 model of Triton's example repository: wrapping sum and difference."""
    a = np.array([[-128, -1, 0, 1, 127] + list(range(11))], dtype=np.int8)
    b = np.array([[1, 1, 1, 1, 1] + [-3] * 11], dtype=np.int8)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT8"),
        httpclient.InferInput("INPUT1", [1, 16], "INT8"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = http_client.infer("simple_int8", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    out = {o["name"]: o for o in result.get_response()["outputs"]}
    assert out["OUTPUT0"]["datatype"] == "INT8" and out["OUTPUT0"]["shape"] == [1, 16]
    if not binary:
        assert out["OUTPUT0"]["data"][4] == -128  # 127 + 1 wraps


def test_simple_like_example(http_client):
    """simple_http_infer_client.py: INPUT0 JSON, INPUT1 binary; OUTPUT0 binary, OUTPUT1 JSON."""
    inputs = simple_inputs(binary0=False, binary1=True)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = http_client.infer("simple", inputs, outputs=outputs, request_id="ex-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)
    resp = result.get_response()
    assert resp["id"] == "ex-1"
    assert resp["model_name"] == "simple"
    assert resp["model_version"] == "1"
    out = {o["name"]: o for o in resp["outputs"]}
    assert out["OUTPUT0"]["parameters"] == {"binary_data_size": 64}
    assert "data" not in out["OUTPUT0"]
    assert out["OUTPUT1"]["data"] == (SIMPLE_A - SIMPLE_B).reshape(-1).tolist()
    assert "parameters" not in out["OUTPUT1"]
    assert out["OUTPUT0"]["shape"] == [1, 16] and out["OUTPUT0"]["datatype"] == "INT32"


@pytest.mark.parametrize("binary", [False, True])
def test_simple_all_outputs_default(http_client, binary):
    """No outputs requested: all outputs come back (binary: client sends binary_data_output)."""
    result = http_client.infer("simple", simple_inputs(binary0=binary, binary1=binary))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)
    assert "id" not in result.get_response()


def test_simple_single_output(http_client):
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = http_client.infer("simple", simple_inputs(), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_simple_batches(http_client, batch):
    rng = np.random.default_rng(batch)
    a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    result = http_client.infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["outputs"][0]["shape"] == [batch, 16]


def test_simple_versioned(http_client, raw_http):
    result = http_client.infer("simple", simple_inputs(), model_version="1")
    assert result.get_response()["model_version"] == "1"
    resp = raw_http("POST", "/v2/models/simple/versions/1/infer", json.dumps(simple_json_request()))
    assert resp.status == 200, resp
    assert_simple_json_response(resp.json())


def test_simple_async(http_client):
    """simple_http_async_infer_client.py: several in flight at once."""
    pending = []
    for i in range(8):
        a = np.full((1, 16), i, dtype=np.int32)
        pending.append((a, http_client.async_infer("simple", simple_inputs(a, SIMPLE_B), request_id=str(i))))
    for i, (a, req) in enumerate(pending):
        result = req.get_result()
        assert result.get_response()["id"] == str(i)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + SIMPLE_B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - SIMPLE_B)


def test_simple_aio(http_url):
    """simple_http_aio_infer_client.py (asyncio client)."""
    import asyncio

    async def main():
        client = aiohttpclient.InferenceServerClient(url=http_url)
        try:
            assert await client.is_server_live()
            assert await client.is_model_ready("simple")
            inputs = [
                aiohttpclient.InferInput("INPUT0", [1, 16], "INT32"),
                aiohttpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(SIMPLE_A)
            inputs[1].set_data_from_numpy(SIMPLE_B, binary_data=False)
            results = await asyncio.gather(*[client.infer("simple", inputs) for _ in range(4)])
            for r in results:
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)
        finally:
            await client.close()

    asyncio.run(main())


# --------------------------------------------------------------------------- strings
def _string_inputs(binary):
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[str(7 - i).encode() for i in range(16)]], dtype=np.object_)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
        httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@pytest.mark.parametrize("binary", [False, True])
def test_simple_string(http_client, binary):
    """simple_http_string_infer_client.py on simple_string."""
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = http_client.infer("simple_string", _string_inputs(binary), outputs=outputs)
    out0 = [int(x) for x in result.as_numpy("OUTPUT0").reshape(-1)]
    out1 = [int(x) for x in result.as_numpy("OUTPUT1").reshape(-1)]
    assert out0 == [i + (7 - i) for i in range(16)]
    assert out1 == [i - (7 - i) for i in range(16)]
    resp = result.get_response()
    assert resp["outputs"][0]["datatype"] == "BYTES"
    if not binary:
        assert resp["outputs"][0]["data"] == [str(v) for v in out0]


def test_simple_string_np_bytes(http_client):
    """The string example also sends np.bytes_ arrays as JSON."""
    a = np.array([[str(i) for i in range(16)]], dtype=np.bytes_)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"), httpclient.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(a, binary_data=True)
    result = http_client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0").reshape(-1)] == [2 * i for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1").reshape(-1)] == [0] * 16


def test_simple_identity_nul_binary(http_client):
    data = np.array([[b"he\x00llo", b"\x00", b"", b"\xff\xfe\x00raw", "héllo".encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = http_client.infer(
        "simple_identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    )
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (1, 5)
    assert list(got.reshape(-1)) == list(data.reshape(-1))


def test_simple_identity_nul_json(raw_http):
    """Embedded NUL survives JSON both ways (\\u0000 in, \\u0000 out)."""
    strings = ["he\x00llo", "\x00", "", "plain", "héllo"]
    req = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 5], "data": strings}]}
    resp = raw_http("POST", "/v2/models/simple_identity/infer", json.dumps(req))
    assert resp.status == 200, resp
    out = resp.json()["outputs"][0]
    assert out == {"name": "OUTPUT0", "datatype": "BYTES", "shape": [1, 5], "data": strings}


def test_simple_identity_json_via_client(http_client):
    data = np.array([["he\x00llo", "x y", ""]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_data_from_numpy(data, binary_data=False)
    result = http_client.infer(
        "simple_identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
    )
    got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0").reshape(-1)]
    assert got == ["he\x00llo", "x y", ""]


def test_simple_identity_batched_variable(http_client):
    data = np.array([[b"a", b"bb", b"ccc"], [b"", b"\x00", b"z"]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [2, 3], "BYTES")
    inp.set_data_from_numpy(data)
    result = http_client.infer("simple_identity", [inp])
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    assert got.tolist() == data.tolist()


# --------------------------------------------------------------------------- JSON details
def test_response_is_compact_json_and_id_echo(raw_http):
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request(id="my-id")))
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/json"
    assert "inference-header-content-length" not in resp.headers
    doc = resp.json()
    assert list(doc)[:3] == ["id", "model_name", "model_version"]
    assert doc["id"] == "my-id"
    assert b": " not in resp.body and b", " not in resp.body  # compact writer
    assert_simple_json_response(doc)


def test_empty_id_not_echoed(raw_http):
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request(id="")))
    assert resp.status == 200, resp
    assert "id" not in resp.json()


def test_custom_parameters_accepted(raw_http):
    req = simple_json_request(parameters={"my_str": "x", "my_int": 3, "my_bool": True})
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(req))
    assert resp.status == 200, resp
    assert_simple_json_response(resp.json())


def test_content_type_not_inspected(raw_http):
    body = json.dumps(simple_json_request())
    for ctype in ("application/json", "text/plain", "application/octet-stream"):
        resp = raw_http("POST", "/v2/models/simple/infer", body, {"Content-Type": ctype})
        assert resp.status == 200, (ctype, resp)
        assert_simple_json_response(resp.json())


def test_nested_and_flat_data(raw_http):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.int32)
    flat = simple_json_request(a, b)
    nested = simple_json_request(a, b)
    nested["inputs"][0]["data"] = a.tolist()  # [[...16]]
    # Nesting need not mirror the shape; only the element count matters.
    nested["inputs"][1]["data"] = b.reshape(4, 4).tolist()
    for req in (flat, nested):
        resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(req))
        assert resp.status == 200, resp
        doc = resp.json()
        assert_simple_json_response(doc, a, b)  # output data is always flat
        assert all(not isinstance(v, list) for v in doc["outputs"][0]["data"])


def test_fp32_json_output_widened(raw_http):
    req = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [0.1, 1.0, -2.5]}]}
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", json.dumps(req))
    assert resp.status == 200, resp
    assert b'"data":[0.10000000149011612,1.0,-2.5]' in resp.body


@pytest.mark.parametrize("dtype,values,text", [
    # Triton writes a double's digits with rapidjson 1.1's Grisu2, which, from the ninth fraction
    # digit on, keeps the digits it generated from the top of the rounding interval: the last
    # digit is often one above the closest (shortest) form, here for every value.
    ("FP32", [9.009273529052734375, -5.3113861083984375, 3.4028234663852886e38],
     b'"data":[9.009273529052735,-5.3113861083984379,3.4028234663852887e38]'),
    ("FP64", [-8.161681157298062, 1.2345e21, 3.3592650058203034e-223],
     b'"data":[-8.161681157298063,1.2344999999999999e21,3.3592650058203036e-223]'),
])
def test_float_json_digits_are_rapidjsons(raw_http, dtype, values, text):
    raw = np.array(values, {"FP32": np.float32, "FP64": np.float64}[dtype]).tobytes()
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [len(values)],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    resp = raw_http("POST", f"/v2/models/identity_{dtype.lower()}/infer", header + raw,
                    {"Inference-Header-Content-Length": str(len(header))})
    assert resp.status == 200, resp
    assert text in resp.body, resp


def test_nan_inf_json(raw_http):
    body = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[3],"data":[NaN,Infinity,-Infinity]}]}'
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", body)
    assert resp.status == 200, resp
    assert b'"data":[NaN,Infinity,-Infinity]' in resp.body
