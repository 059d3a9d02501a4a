"""Binary tensor data extension, requests built by hand."""

import json

import numpy as np
import pytest

from support import SIMPLE_A, SIMPLE_B, assert_serving, binary_body, serialize_bytes

A = SIMPLE_A.tobytes()
B = SIMPLE_B.tobytes()
SUM = (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()
DIFF = (SIMPLE_A - SIMPLE_B).reshape(-1).tolist()


def bin_input(name, size=64, dtype="INT32", shape=(1, 16)):
    return {"name": name, "datatype": dtype, "shape": list(shape), "parameters": {"binary_data_size": size}}


def json_input(name, values, dtype="INT32", shape=(1, 16)):
    return {"name": name, "datatype": dtype, "shape": list(shape), "data": list(values)}


def outputs_by_name(doc, tail):
    """{name: (output json, bytes or None)} walking binary chunks in order."""
    result, offset = {}, 0
    for out in doc["outputs"]:
        size = out.get("parameters", {}).get("binary_data_size")
        chunk = None
        if size is not None:
            chunk = tail[offset:offset + size]
            offset += size
        result[out["name"]] = (out, chunk)
    assert offset == len(tail), "binary tail length must equal the sum of binary_data_size"
    return result


@pytest.fixture(autouse=True)
def _still_serving(http_url):
    yield
    assert_serving(http_url)


def test_binary_inputs_json_outputs(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/json"
    assert "inference-header-content-length" not in resp.headers
    outs = {o["name"]: o for o in resp.json()["outputs"]}
    assert outs["OUTPUT0"]["data"] == SUM and outs["OUTPUT1"]["data"] == DIFF


def test_chunks_follow_input_order(raw_http):
    """Chunks are consumed in the order inputs are listed, not by name."""
    body, headers = binary_body({"inputs": [bin_input("INPUT1"), bin_input("INPUT0")]}, B, A)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    outs = {o["name"]: o for o in resp.json()["outputs"]}
    assert outs["OUTPUT0"]["data"] == SUM and outs["OUTPUT1"]["data"] == DIFF


def test_mixed_json_and_binary_inputs(raw_http):
    header = {"inputs": [bin_input("INPUT1"), json_input("INPUT0", SIMPLE_A.reshape(-1).tolist())]}
    body, headers = binary_body(header, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    outs = {o["name"]: o for o in resp.json()["outputs"]}
    assert outs["OUTPUT0"]["data"] == SUM and outs["OUTPUT1"]["data"] == DIFF


def test_header_with_all_json_inputs(raw_http):
    header = {"inputs": [json_input("INPUT0", SIMPLE_A.reshape(-1).tolist()), json_input("INPUT1", SIMPLE_B.reshape(-1).tolist())]}
    body, headers = binary_body(header)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp


def test_binary_data_output_all_binary(raw_http):
    header = {"inputs": [bin_input("INPUT0"), bin_input("INPUT1")], "parameters": {"binary_data_output": True}}
    body, headers = binary_body(header, A, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/octet-stream"
    hlen = int(resp.headers["inference-header-content-length"])
    doc = json.loads(resp.body[:hlen])
    assert len(resp.body) == hlen + 128
    outs = outputs_by_name(doc, resp.body[hlen:])
    for name, want in (("OUTPUT0", SUM), ("OUTPUT1", DIFF)):
        out, chunk = outs[name]
        assert out["parameters"] == {"binary_data_size": 64}
        assert "data" not in out
        assert np.frombuffer(chunk, np.int32).tolist() == want


def test_listed_outputs_ignore_binary_data_output(raw_http):
    """binary_data_output does not apply to listed outputs (QA L0_http case)."""
    header = {
        "inputs": [bin_input("INPUT0"), bin_input("INPUT1")],
        "parameters": {"binary_data_output": True},
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT1"}],
    }
    body, headers = binary_body(header, A, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/json"
    assert "inference-header-content-length" not in resp.headers
    outs = {o["name"]: o for o in resp.json()["outputs"]}
    assert outs["OUTPUT0"]["data"] == SUM and outs["OUTPUT1"]["data"] == DIFF


def test_listed_output_binary_flag(raw_http):
    header = {
        "inputs": [bin_input("INPUT0"), bin_input("INPUT1")],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_body(header, A, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/octet-stream"
    doc, tail = resp.split_binary()
    assert [o["name"] for o in doc["outputs"]] == ["OUTPUT1"]
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 64}
    assert np.frombuffer(tail, np.int32).tolist() == DIFF


def test_mixed_outputs_order_and_sizes(raw_http):
    header = {
        "inputs": [bin_input("INPUT0"), bin_input("INPUT1")],
        "outputs": [
            {"name": "OUTPUT1", "parameters": {"binary_data": True}},
            {"name": "OUTPUT0", "parameters": {"binary_data": False}},
        ],
        "id": "mix",
    }
    body, headers = binary_body(header, A, B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    doc, tail = resp.split_binary()
    assert doc["id"] == "mix"
    outs = outputs_by_name(doc, tail)
    assert np.frombuffer(outs["OUTPUT1"][1], np.int32).tolist() == DIFF
    assert outs["OUTPUT0"][0]["data"] == SUM
    assert outs["OUTPUT0"][1] is None


def test_bytes_binary_roundtrip(raw_http):
    elems = [b"he\x00llo", b"", b"\xff\xfe"]
    raw = serialize_bytes(elems)
    header = {
        "inputs": [bin_input("INPUT0", len(raw), "BYTES", (1, 3))],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_body(header, raw)
    resp = raw_http("POST", "/v2/models/simple_identity/infer", body, headers)
    assert resp.status == 200, resp
    doc, tail = resp.split_binary()
    assert doc["outputs"][0]["shape"] == [1, 3]
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == len(raw)
    assert tail == raw


# --------------------------------------------------------------------------- framing errors
def test_short_binary_data(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B[:36])
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": "unexpected size for input 'INPUT1', expecting 28 additional bytes for model 'simple'"
    }


def test_extra_binary_data(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B, b"\x01\x02\x03\x04")
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": "unexpected additional input data for model 'simple'"}


def test_trailing_bytes_after_all_json_inputs(raw_http):
    header = {"inputs": [json_input("INPUT0", SIMPLE_A.reshape(-1).tolist()), json_input("INPUT1", SIMPLE_B.reshape(-1).tolist())]}
    body, headers = binary_body(header, b"xx")
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": "unexpected additional input data for model 'simple'"}


def test_binary_size_not_matching_shape(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0", 60), bin_input("INPUT1")]}, A[:60], B)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. "
        "Expected 64, got 60"
    }


@pytest.mark.parametrize("delta", [10, 1])
def test_header_length_beyond_body(raw_http, delta):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    bad = len(body) + delta
    headers["Inference-Header-Content-Length"] = str(bad)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": f"inference header size should be in range (0, {len(body)}), got: {bad}"}


def test_header_length_negative(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    headers["Inference-Header-Content-Length"] = "-1"
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": f"inference header size should be in range (0, {len(body)}), got: -1"}


@pytest.mark.triton251_differs("a non-numeric Inference-Header-Content-Length is treated as 0 (raw request) (TRITON.md §12)")
def test_header_length_not_a_number(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    headers["Inference-Header-Content-Length"] = "abc"
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": "Unable to parse Inference-Header-Content-Length, got: abc"}


@pytest.mark.triton251_differs("an Inference-Header-Content-Length out of int32's range is not reported as such "
                               "(current source: std::stoi's out_of_range)")
def test_header_length_out_of_range(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    headers["Inference-Header-Content-Length"] = "2147483648"
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 400, resp
    assert resp.json() == {"error": "Unable to parse Inference-Header-Content-Length, value is out of range "
                                    "[ -2147483648, 2147483647 ], got: 2147483648"}


def test_header_length_read_as_stoi(raw_http):
    # std::stoi: leading blanks and a sign pass, what follows the digits is ignored.
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    length = headers["Inference-Header-Content-Length"]
    for text in (f" {length}", f"+{length}", f"{length}abc"):
        headers["Inference-Header-Content-Length"] = text
        resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
        assert resp.status == 200, (text, resp)


def test_header_length_cut_inside_json(raw_http):
    body, headers = binary_body({"inputs": [bin_input("INPUT0"), bin_input("INPUT1")]}, A, B)
    headers["Inference-Header-Content-Length"] = "20"
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 500, resp
    assert resp.error.startswith("failed to parse the request JSON buffer: "), resp


# --------------------------------------------------------------------------- raw requests
def test_raw_request_single_input_model(raw_http):
    x = np.arange(16, dtype=np.float32)
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", x.tobytes(), {"Inference-Header-Content-Length": "0"})
    assert resp.status == 200, resp
    assert resp.headers.get("content-type") == "application/octet-stream"
    doc, tail = resp.split_binary()
    assert doc["model_name"] == "identity_fp32"
    assert doc["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [16], "parameters": {"binary_data_size": 64}}
    ]
    np.testing.assert_array_equal(np.frombuffer(tail, np.float32), x)


def test_raw_request_of_the_wrong_size(raw_http):
    # Triton calls the input of a raw body 'raw_input' in its size errors.
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", b"abcde", {"Inference-Header-Content-Length": "0"})
    assert resp.status == 400, resp
    assert resp.json() == {"error": "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for "
                                    "model 'identity_fp32'. Expected 4, got 5"}


def test_raw_request_two_input_model(raw_http):
    resp = raw_http("POST", "/v2/models/simple/infer", A + B, {"Inference-Header-Content-Length": "0"})
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced "
        "but got 2 inputs in 'simple' model configuration"
    }


def test_raw_request_bytes_model_needs_shape_1(raw_http):
    resp = raw_http(
        "POST", "/v2/models/identity_bytes/infer", serialize_bytes([b"ab"]), {"Inference-Header-Content-Length": "0"}
    )
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"
    }


def test_empty_body_is_raw_request(raw_http):
    """No header and an empty body: the header length defaults to 0 (raw)."""
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", b"")
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [0], "parameters": {"binary_data_size": 0}}
    ]
    resp = raw_http("POST", "/v2/models/simple/infer", b"")
    assert resp.status == 400, resp
    assert resp.error.startswith("[request id: <id_unknown>] Raw request must only have 1 input"), resp
