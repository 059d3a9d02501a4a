"""HTTP infer request/response compression (gzip, deflate = zlib-wrapped)."""

import gzip
import json
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient

from support import SIMPLE_A, SIMPLE_B, assert_serving, assert_simple_json_response, binary_body, simple_json_request

BODY = json.dumps(simple_json_request()).encode()


@pytest.fixture(autouse=True)
def _still_serving(http_url):
    yield
    assert_serving(http_url)


def _inputs():
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(SIMPLE_A)
    inputs[1].set_data_from_numpy(SIMPLE_B, binary_data=False)
    return inputs


@pytest.mark.parametrize("request_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_alg", [None, "gzip", "deflate"])
def test_client_compression(http_client, request_alg, response_alg):
    """What qa/L0_data_compression does with the Python client."""
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = http_client.infer(
        "simple",
        _inputs(),
        outputs=outputs,
        request_compression_algorithm=request_alg,
        response_compression_algorithm=response_alg,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)


@pytest.mark.parametrize("encoding,compress", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_request_content_encoding(raw_http, encoding, compress):
    resp = raw_http("POST", "/v2/models/simple/infer", compress(BODY), {"Content-Encoding": encoding})
    assert resp.status == 200, resp
    assert "content-encoding" not in resp.headers
    assert_simple_json_response(resp.json())


def test_request_identity_encoding(raw_http):
    resp = raw_http("POST", "/v2/models/simple/infer", BODY, {"Content-Encoding": "identity"})
    assert resp.status == 200, resp
    assert_simple_json_response(resp.json())


def test_compressed_binary_request_uses_decompressed_length(raw_http):
    header = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
        ]
    }
    body, headers = binary_body(header, SIMPLE_A.tobytes(), SIMPLE_B.tobytes())
    headers["Content-Encoding"] = "gzip"
    resp = raw_http("POST", "/v2/models/simple/infer", gzip.compress(body), headers)
    assert resp.status == 200, resp
    assert_simple_json_response(resp.json())


@pytest.mark.parametrize("encoding", ["br", "compress", "x-gzip-bogus"])
def test_unsupported_request_encoding(raw_http, encoding):
    resp = raw_http("POST", "/v2/models/simple/infer", BODY, {"Content-Encoding": encoding})
    assert resp.status == 501, resp
    assert resp.json() == {"error": "Unsupported compression type"}
    assert resp.headers.get("accept-encoding") == "gzip, deflate"


@pytest.mark.parametrize(
    "accept,expected",
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.5, deflate;q=0.9", "deflate"),
        ("deflate;q=0.4, gzip", "gzip"),
        ("br, gzip", "gzip"),
        ("gzip;q=0", None),
        ("identity", None),
        ("br", None),
    ],
)
def test_response_accept_encoding(raw_http, accept, expected):
    resp = raw_http("POST", "/v2/models/simple/infer", BODY, {"Accept-Encoding": accept})
    assert resp.status == 200, resp
    assert resp.headers.get("content-encoding") == expected, resp
    body = resp.body
    if expected == "gzip":
        assert body[:2] == b"\x1f\x8b"
        body = gzip.decompress(body)
    elif expected == "deflate":  # zlib wrapper (deflateInit), not raw deflate
        body = zlib.decompress(body)
    assert_simple_json_response(json.loads(body))


def test_compressed_binary_response_header_is_uncompressed_length(raw_http):
    header = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": SIMPLE_A.reshape(-1).tolist()},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": SIMPLE_B.reshape(-1).tolist()},
        ],
        "parameters": {"binary_data_output": True},
    }
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(header), {"Accept-Encoding": "gzip"})
    assert resp.status == 200, resp
    assert resp.headers.get("content-encoding") == "gzip"
    assert resp.headers.get("content-type") == "application/octet-stream"
    plain = gzip.decompress(resp.body)
    hlen = int(resp.headers["inference-header-content-length"])
    doc = json.loads(plain[:hlen])
    assert len(plain) == hlen + 128
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [64, 64]


@pytest.mark.triton251_differs("a gzip bomb is inflated in full and then fails JSON parsing (TRITON.md §12)")
def test_decompressed_size_limit(raw_http):
    bomb = gzip.compress(b" " * (80 << 20), compresslevel=9)  # 80 MiB > 64 MiB default limit
    resp = raw_http("POST", "/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"}, timeout=60)
    assert resp.status == 400, resp
    assert resp.json() == {
        "error": "Decompressed data size exceeds the maximum allowed value of 67108864 bytes. "
        "Use --http-max-input-size to increase the limit."
    }
