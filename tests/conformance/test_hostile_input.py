"""Malformed and hostile input: every answer is a clear error (or a correct result), never a crash,
a hang or a read outside a region, and the server keeps serving afterwards.

The rows of docs/bad-input.md that no other file of the suite checks live here: truncated bodies,
lying length headers, huge shapes, nesting and compression bombs outside the cases already covered,
invalid UTF-8, unknown datatypes, shared-memory offsets and sizes at every boundary, region keys and
names with `/` and `..`, unregistering a region while a request waits to use it, CUDA handles of
the wrong length, and slow clients. After every test an autouse fixture sends a normal `simple`
inference over HTTP and over gRPC.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import socket
import threading
import time
import zlib

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from support import (
    SIMPLE_A,
    SIMPLE_B,
    assert_serving,
    binary_body,
    grpc_error,
    raw_request,
    serialize_bytes,
    simple_json_request,
)
from test_shared_memory import ShmPool, read, shm_params, write

SIMPLE = "/v2/models/simple/infer"
ID_INT32 = "/v2/models/identity_int32/infer"
ID_BYTES = "/v2/models/identity_bytes/infer"
GOOD = json.dumps(simple_json_request()).encode()
NESTING_ERROR = "JSON nesting depth exceeds maximum allowed limit (100)"
BODY_READ_ERROR = "failed to read the request body: error reading a body from connection"


# --------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _still_serving(http_url, grpc_stub):
    yield
    assert_serving(http_url)
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name, x in (("INPUT0", SIMPLE_A), ("INPUT1", SIMPLE_B)):
        req.inputs.add(name=name, datatype="INT32", shape=list(x.shape))
        req.raw_input_contents.append(x.tobytes())
    resp = grpc_stub.ModelInfer(req, timeout=30)
    got = np.frombuffer(resp.raw_output_contents[0], np.int32)
    assert got.tolist() == (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()


@pytest.fixture
def pool(request, http_url):
    p = ShmPool(http_url, "hostile_" + re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:16])
    yield p
    p.close()


def connect(hostport: str, timeout: float = 10) -> socket.socket:
    host, _, port = hostport.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


def exchange(hostport: str, data: bytes, half_close: bool = True, timeout: float = 10) -> bytes:
    """Send raw bytes, optionally end our side, and read until the server closes."""
    sock = connect(hostport, timeout)
    out = b""
    try:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    finally:
        sock.close()
    return out


def parse_responses(buf: bytes) -> list:
    """[(status, {lower-case header: value}, body)] of consecutive HTTP/1.1 responses."""
    out = []
    while buf:
        head, sep, rest = buf.partition(b"\r\n\r\n")
        assert sep, f"incomplete response head: {buf!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        buf = rest[n:]
    return out


def post_head(path: str, length, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


def error_of(resp) -> tuple:
    return resp.status, resp.error


def grpc_call(method, req):
    """(code name, message) of a failing call, or ("OK", response)."""
    try:
        return "OK", method(req, timeout=30)
    except grpc.RpcError as exc:
        return grpc_error(exc)


def raw_grpc_infer(grpc_url: str, payload: bytes):
    """ModelInfer with hand-made protobuf bytes (to send what the protobuf library refuses to build)."""
    channel = grpc.insecure_channel(grpc_url)
    try:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        return grpc_call(call, payload)
    finally:
        channel.close()


def pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""

    def varint(n: int) -> bytes:
        out = b""
        while True:
            low, n = n & 0x7F, n >> 7
            if n:
                out += bytes([low | 0x80])
            else:
                return out + bytes([low])

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def raw_infer_request(model: bytes = b"identity_int32", input_name: bytes = b"INPUT0") -> bytes:
    """ModelInferRequest{model_name, inputs[{name, datatype INT32, shape [1]}], raw_input_contents}."""
    tensor = pb_field(1, input_name) + pb_field(2, b"INT32") + b"\x18\x01"
    return pb_field(1, model) + pb_field(5, tensor) + pb_field(7, b"\x01\x00\x00\x00")


def one_input(shape, data=None, datatype="INT32", **params) -> dict:
    inp = {"name": "INPUT0", "datatype": datatype, "shape": shape}
    if data is not None:
        inp["data"] = data
    if params:
        inp["parameters"] = params
    return {"inputs": [inp]}


def grpc_one_input(shape, raw: bytes = b"\x01\x00\x00\x00", datatype="INT32", model="identity_int32"):
    req = service_pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name="INPUT0", datatype=datatype, shape=shape)
    req.raw_input_contents.append(raw)
    return req


def metric_value(metrics_url: str, name: str, model: str) -> float:
    text = raw_request(metrics_url, "GET", "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --------------------------------------------------------------------------- truncated bodies
@pytest.mark.parametrize("repeat", [False, True])
def test_a_hundred_thousand_inputs(raw_http, repeat):
    """A request naming 100,000 inputs is answered (repeated names are found with a set, not by
    comparing each with all before it), with Triton's count message or its repeated-name one."""
    names = [f"in{k}" for k in range(100_000)]
    if repeat:
        names[-1] = names[0]
    doc = {"inputs": [{"name": n, "datatype": "INT32", "shape": [0], "data": []} for n in names]}
    resp = raw_http("POST", ID_INT32, json.dumps(doc), timeout=120)
    if repeat:
        assert error_of(resp) == (400, "[request id: <id_unknown>] input 'in0' already exists in request"), resp
    else:
        assert resp.status == 400, resp
        assert resp.error.startswith("[request id: <id_unknown>] expected 1 inputs but got 100000 inputs for model "
                                     "'identity_int32'. Got input(s) ['"), resp


@pytest.mark.parametrize("framing", ["content-length", "chunked", "chunked-bad-size"])
def test_body_cut_short_by_end_of_stream(http_url, framing):
    """The client announces more than it sends, then ends its side: 400, the connection is not stuck."""
    if framing == "content-length":
        data = post_head(SIMPLE, len(GOOD)) + GOOD[: len(GOOD) // 2]
    elif framing == "chunked":
        data = (f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                f"{len(GOOD):x}\r\n").encode() + GOOD[:30]
    else:
        data = (f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                "zz\r\nabc\r\n0\r\n\r\n").encode()
    answers = parse_responses(exchange(http_url, data))
    assert len(answers) == 1, answers
    status, headers, body = answers[0]
    assert (status, json.loads(body)) == (400, {"error": BODY_READ_ERROR}), answers
    assert headers.get("content-type") == "application/json"


def test_grpc_truncated_protobuf(grpc_url):
    """A field whose declared length runs past the end of the message."""
    code, msg = raw_grpc_infer(grpc_url, raw_infer_request()[:-3])
    assert code == "INTERNAL", (code, msg)
    assert msg.startswith("failed to decode Protobuf message: "), msg
    assert raw_grpc_infer(grpc_url, raw_infer_request())[0] == "OK"


@pytest.mark.parametrize("encoding,cut", [("gzip", 20), ("deflate", 12)])
def test_truncated_compressed_body(raw_http, encoding, cut):
    packed = gzip.compress(GOOD) if encoding == "gzip" else zlib.compress(GOOD)
    resp = raw_http("POST", SIMPLE, packed[:cut], {"Content-Encoding": encoding})
    assert error_of(resp) == (400, "failed to decompress the request body: incomplete deflate stream"), resp


# --------------------------------------------------------------------------- lying length headers
def test_content_length_shorter_than_body(http_url):
    """The body is cut at Content-Length; what follows is read as the next request, which is not one."""
    cut = len(GOOD) - 10
    answers = parse_responses(exchange(http_url, post_head(SIMPLE, cut) + GOOD))
    assert answers, "no answer"
    status, _, body = answers[0]
    assert status == 500, answers
    assert json.loads(body)["error"].startswith("failed to parse the request JSON buffer: "), answers
    # the 10 left-over bytes are not a request line: 400 and the connection is closed
    assert [a[0] for a in answers[1:]] == [400], answers
    assert answers[1][1].get("connection") == "close", answers


LIMIT_WORDS = "Use --http-max-input-size to increase the limit."


@pytest.mark.parametrize("extra, message", [
    ("", r"request JSON size of 1099511627776 bytes exceeds the maximum allowed input size of "
         r"(\d+) bytes\. " + re.escape(LIMIT_WORDS)),
    ("Inference-Header-Content-Length: 0\r\n",
     r"Raw input has a byte_size \(1099511627776 bytes\) that exceeds the maximum allowed value "
     r"of (\d+) bytes\. " + re.escape(LIMIT_WORDS)),
    ("Inference-Header-Content-Length: 1099511627000\r\n",
     r"request JSON size of 1099511627000 bytes exceeds the maximum allowed input size of "
     r"(\d+) bytes\. " + re.escape(LIMIT_WORDS)),
    # Only binary tensors past the limit: Triton sets no limit there; the sidecar's own words.
    ("Inference-Header-Content-Length: 100\r\n",
     r"request body size exceeds the maximum allowed input size of (\d+) bytes"),
], ids=["json", "raw", "json-part", "binary-part"])
@pytest.mark.triton251_differs("Triton 2.51 has no input size limit", run=False)
def test_content_length_above_body_limit_is_refused_before_reading(http_url, extra, message):
    """A declared length beyond the body limit is refused at once, without waiting for the bytes,
    in current Triton's words for what the body holds."""
    status, error = announce_terabyte(http_url, SIMPLE, extra)
    assert status == 400, error
    assert re.fullmatch(message, error), error


@pytest.mark.triton251_differs("Triton 2.51 has no input size limit", run=False)
def test_generate_content_length_above_body_limit_is_refused_before_reading(http_url):
    status, error = announce_terabyte(http_url, "/v2/models/simple/generate", "")
    assert status == 400, error
    assert error == ("request JSON size of 1099511627776 bytes exceeds the maximum allowed input "
                     "size of 67108864 bytes. " + LIMIT_WORDS)


def announce_terabyte(http_url, path, extra):
    """(status, error) of a POST that announces 1 TiB and sends a few bytes."""
    sock = connect(http_url, timeout=30)
    try:
        sock.sendall(post_head(path, 1 << 40, extra) + GOOD)
        buf = b""
        while b"\r\n\r\n" not in buf or len(parse_responses(buf)[0][2]) < int(
                parse_responses(buf)[0][1].get("content-length", "0")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    status, _, body = parse_responses(buf)[0]
    return status, json.loads(body)["error"]


@pytest.mark.parametrize("headers", [
    "Content-Length: 99999999999999999999999\r\n",   # does not fit 64 bits
    "Content-Length: abc\r\n",
    "Content-Length: 10\r\nContent-Length: 20\r\n",  # two different lengths
    "Content-Length: -5\r\n",
])
def test_unusable_content_length(http_url, headers):
    """The HTTP parser refuses the request: 400 and the connection is closed (nothing else is read)."""
    data = f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\n{headers}\r\n".encode() + GOOD
    answers = parse_responses(exchange(http_url, data))
    assert [a[0] for a in answers] == [400], answers
    assert answers[0][1].get("connection") == "close", answers


def test_content_length_with_chunked_uses_chunked(http_url):
    """Both framings (a request-smuggling shape): chunked wins (RFC 9112 §6.3) and the connection closes."""
    data = (f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"{len(GOOD):x}\r\n").encode() + GOOD + b"\r\n0\r\n\r\n"
    answers = parse_responses(exchange(http_url, data))
    assert len(answers) == 1, answers
    status, headers, body = answers[0]
    assert status == 200, answers
    assert json.loads(body)["outputs"][0]["data"] == (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()
    assert headers.get("connection") == "close", answers


def test_many_small_chunks_are_read_like_any_body(http_url):
    """65,537 one-byte chunks: read into one buffer within the body limit, so the request gets its
    own answer (current Triton caps a chunked body at 65,536 non-empty chunks; the sidecar does not:
    its buffer has no per-chunk cost, docs/bad-input.md 2.5a)."""
    data = (f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nInference-Header-Content-Length: 0\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode() + b"1\r\nA\r\n" * 65537 + b"0\r\n\r\n"
    answers = parse_responses(exchange(http_url, data, timeout=60))
    status, _, body = answers[0]
    assert status == 400, answers
    assert json.loads(body)["error"] == (
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but "
        "got 2 inputs in 'simple' model configuration"), answers


def _binary_simple(size0: int):
    header = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": size0}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
    ]}
    return binary_body(header, SIMPLE_A.tobytes(), SIMPLE_B.tobytes())


@pytest.mark.triton251_differs("an Inference-Header-Content-Length out of int32's range is not reported as such "
                               "(current source: std::stoi's out_of_range)")
@pytest.mark.parametrize("value", ["2147483648", "99999999999"])
def test_inference_header_length_out_of_range(raw_http, value):
    """Beyond int32: 400 "value is out of range" (never a wrap-around)."""
    body, headers = _binary_simple(64)
    headers["Inference-Header-Content-Length"] = value
    resp = raw_http("POST", SIMPLE, body, headers)
    assert resp.status == 400, resp
    assert resp.error == ("Unable to parse Inference-Header-Content-Length, value is out of range "
                          f"[ -2147483648, 2147483647 ], got: {value}"), resp


@pytest.mark.parametrize("value,status,error", [
    ("1e3", 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
    ("1\xff", 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
    ("0x10", 400, "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 "
                  "inputs in 'simple' model configuration"),
])
def test_inference_header_length_read_as_stoi(raw_http, value, status, error):
    """std::stoi reads the leading digits and ignores the rest, as Triton does: "1e3" is 1 (a JSON
    header of one byte) and "0x10" is 0 (a raw request)."""
    body, headers = _binary_simple(64)
    headers["Inference-Header-Content-Length"] = value
    resp = raw_http("POST", SIMPLE, body, headers)
    assert (resp.status, resp.error) == (status, error), resp


@pytest.mark.parametrize("size", [2**63 - 1, 2**64 - 1, 1 << 40])
def test_binary_data_size_far_beyond_body(raw_http, size):
    body, headers = _binary_simple(size)
    resp = raw_http("POST", SIMPLE, body, headers)
    assert error_of(resp) == (
        400, f"unexpected size for input 'INPUT0', expecting {size - 128} additional bytes for model 'simple'"), resp


@pytest.mark.parametrize("size", [2**64, -1])
def test_binary_data_size_not_a_uint64(raw_http, size):
    body, headers = _binary_simple(size)
    resp = raw_http("POST", SIMPLE, body, headers)
    assert error_of(resp) == (
        500, "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"), resp


def test_binary_data_size_zero_leaves_bytes_over(raw_http):
    body, headers = _binary_simple(0)
    resp = raw_http("POST", SIMPLE, body, headers)
    assert error_of(resp) == (400, "unexpected additional input data for model 'simple'"), resp


# --------------------------------------------------------------------------- huge shapes
def test_element_count_overflow_2_62_by_4(raw_http):
    resp = raw_http("POST", ID_INT32, json.dumps(one_input([2**62, 4], [1])))
    assert error_of(resp) == (
        400, "invalid shape for input 'INPUT0': shape [4611686018427387904,4] causes total element count to "
             "exceed maximum size of 9223372036854775807"), resp


# Binary and gRPC inputs are sized by Triton's core (GetByteSize), in its words, without a request id.
CORE_BYTE_OVERFLOW = "byte size for tensor 'INPUT0' exceeds maximum size of 9223372036854775807"


@pytest.mark.triton251_differs("the byte size of a shape that overflows wraps around (checked since 2026)")
@pytest.mark.parametrize("n", [2**62, 2**63 - 1])
def test_byte_size_overflow_binary_and_grpc(raw_http, grpc_stub, n):
    body, headers = binary_body(one_input([n], binary_data_size=4), b"\x01\x00\x00\x00")
    assert error_of(raw_http("POST", ID_INT32, body, headers)) == (400, CORE_BYTE_OVERFLOW)
    assert grpc_call(grpc_stub.ModelInfer, grpc_one_input([n])) == ("INVALID_ARGUMENT", CORE_BYTE_OVERFLOW)


@pytest.mark.triton251_differs("a shape that cannot be sized fails the size check with a negative size")
@pytest.mark.parametrize("datatype,model,raw,words", [
    ("INT32", "identity_int32", b"\x01\x00\x00\x00", "tensor 'INPUT0' contains an invalid dimension [-2]"),
    ("BYTES", "identity_bytes", b"\x01\x00\x00\x00a", "tensor 'INPUT0' contains an invalid dimension in shape [-2]"),
])
def test_dimension_below_minus_one_grpc(grpc_stub, datatype, model, raw, words):
    """gRPC shapes are signed: -1 is 'not specified'; lower ones pass a variable dimension and fail
    where the core sizes the tensor (a request's -1 has its own message, test_errors_grpc)."""
    req = service_pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name="INPUT0", datatype=datatype, shape=[-2])
    req.raw_input_contents.append(raw)
    assert grpc_call(grpc_stub.ModelInfer, req) == ("INVALID_ARGUMENT", words)


@pytest.mark.parametrize("batch", [-1, -2, 2**32 + 1])
def test_batch_dimension_is_held_in_32_bits(grpc_stub, batch):
    """Triton keeps the batch size in 32 bits and compares each input's first dimension with it
    widened again: a batch of -1, -2 or 2^32 + 1 never matches the next input's."""
    req = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="INT32", shape=[batch, 16])
        req.raw_input_contents.append(bytes(64))
    # The input named is the second Triton visits: its map's order puts INPUT0 there.
    assert grpc_call(grpc_stub.ModelInfer, req) == (
        "INVALID_ARGUMENT",
        "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs for 'simple'")


def test_huge_shape_with_four_bytes_is_never_allocated(raw_http, grpc_stub):
    """A 4 TiB tensor announced, 4 bytes sent (binary and gRPC): a size mismatch, no allocation."""
    n = 1 << 40
    msg = ("[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'identity_int32'. "
           f"Expected {4 * n}, got 4")
    body, headers = binary_body(one_input([n], binary_data_size=4), b"\x01\x00\x00\x00")
    assert error_of(raw_http("POST", ID_INT32, body, headers)) == (400, msg)
    assert grpc_call(grpc_stub.ModelInfer, grpc_one_input([n])) == ("INVALID_ARGUMENT", msg)
    req = service_pb2.ModelInferRequest(model_name="identity_int32")
    req.inputs.add(name="INPUT0", datatype="INT32", shape=[n]).contents.int_contents.append(1)
    assert grpc_call(grpc_stub.ModelInfer, req) == ("INVALID_ARGUMENT", msg)


@pytest.mark.triton251_differs("2.51 has no such check: it sizes a buffer for the declared shape", run=False)
def test_huge_shape_json_data_checked_against_input_limit(raw_http):
    resp = raw_http("POST", ID_INT32, json.dumps(one_input([1 << 40], [1])))
    assert resp.status == 400, resp
    # Current Triton's words; its flag is also the sidecar's (an alias of --max-http-body-bytes).
    assert re.fullmatch(r"JSON input 'INPUT0' has a byte_size \(4398046511104 bytes\) that exceeds the maximum "
                        r"allowed value of \d+ bytes\. Use --http-max-input-size to increase the limit\.",
                        resp.error), resp


@pytest.mark.triton251_differs("a dimension beyond int64 in JSON with data crashes Triton 2.51", run=False)
@pytest.mark.parametrize("dim,shown", [(2**64 - 2, -2), (2**63, -(2**63))])
def test_dimension_beyond_int64_is_read_as_a_negative_one(raw_http, dim, shown):
    """Triton reads a REST dimension as unsigned and keeps it signed: one beyond int64 is negative,
    refused by the HTTP front end before JSON data is read, and by the core for binary data."""
    resp = raw_http("POST", ID_INT32, json.dumps(one_input([dim], [1])))
    assert error_of(resp) == (
        400, f"invalid shape for input 'INPUT0': shape [{shown}] contains one or more invalid dimensions"), resp
    body, headers = binary_body(one_input([dim], binary_data_size=4), b"\x01\x00\x00\x00")
    assert error_of(raw_http("POST", ID_INT32, body, headers)) == (
        400, f"tensor 'INPUT0' contains an invalid dimension [{shown}]")


def test_dimension_of_all_ones_is_a_wildcard_in_binary_data(raw_http):
    body, headers = binary_body(one_input([2**64 - 1], binary_data_size=4), b"\x01\x00\x00\x00")
    assert error_of(raw_http("POST", ID_INT32, body, headers)) == (
        400, "[request id: <id_unknown>] All input dimensions should be specified for input 'INPUT0' for model "
             "'identity_int32', got [-1]")


def test_dimension_beyond_uint64(raw_http):
    resp = raw_http("POST", ID_INT32, json.dumps(one_input([2**64], [1])))
    assert error_of(resp) == (
        500, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"), resp


# --------------------------------------------------------------------------- JSON nesting bombs
DEEP = "[" * 200 + "]" * 200


@pytest.mark.parametrize("body", [
    DEEP,                                                                           # the document itself
    '{"parameters":{"x":' + DEEP + '},"inputs":[]}',                               # a parameter value
    '{"extra":' + DEEP + ',"inputs":[]}',                                          # an unknown member
    '{"extra":' + '{"a":' * 200 + "1" + "}" * 200 + ',"inputs":[]}',              # objects, not arrays
    "[" * 1_000_000,                                                                # a million, unclosed
], ids=["root", "parameter", "unknown-member", "objects", "million"])
def test_infer_nesting_outside_data(raw_http, body):
    assert error_of(raw_http("POST", ID_INT32, body)) == (400, NESTING_ERROR)


@pytest.mark.parametrize("path,status,prefix", [
    ("/v2/systemsharedmemory/region/hostile_deep/register", 500, "failed to parse the request JSON buffer: "),
    ("/v2/cudasharedmemory/region/hostile_deep/register", None, None),
    ("/v2/repository/models/simple/load", 500, "failed to parse the request JSON buffer: "),
    ("/v2/logging", 400, "JSON nesting depth exceeds maximum allowed limit"),
])
def test_nesting_bomb_on_other_endpoints(raw_http, path, status, prefix):
    """Every endpoint that parses JSON survives a million-deep document (no stack overflow)."""
    try:
        resp = raw_http("POST", path, '{"key":' + "[" * 1_000_000)
    except (BrokenPipeError, ConnectionResetError):
        # Without a GPU the CUDA route refuses before reading the body and the connection may
        # close while the client is still sending: no answer to check, and the autouse fixture
        # checks that the server still serves.
        assert status is None
        return
    assert 400 <= resp.status < 600 and isinstance(resp.error, str), resp
    if status is not None:
        assert resp.status == status and resp.error.startswith(prefix), resp


# --------------------------------------------------------------------------- compression bombs
def test_deflate_bomb(raw_http):
    bomb = zlib.compress(b" " * (80 << 20), 9)  # ~80 KB that inflates to 80 MiB > the 64 MiB limit
    resp = raw_http("POST", SIMPLE, bomb, {"Content-Encoding": "deflate"}, timeout=60)
    assert resp.status == 400, resp
    assert re.fullmatch(r"Decompressed data size exceeds the maximum allowed value of \d+ bytes\. "
                        r"Use --http-max-input-size to increase the limit\.", resp.error), resp


def test_bomb_inside_a_bomb_is_inflated_once(raw_http):
    inner = gzip.compress(b" " * (80 << 20), 9)
    resp = raw_http("POST", SIMPLE, gzip.compress(inner), {"Content-Encoding": "gzip"}, timeout=60)
    assert resp.status == 500, resp
    assert resp.error.startswith("failed to parse the request JSON buffer: "), resp


@pytest.mark.parametrize("encoding,body,detail", [
    ("gzip", b"\x1f\x8b garbage", "invalid gzip header"),
    ("deflate", b"not zlib at all", "corrupt deflate stream"),
    ("deflate", zlib.compress(GOOD)[2:-4], "corrupt deflate stream"),  # raw deflate, no zlib wrapper
])
def test_corrupt_compressed_body(raw_http, encoding, body, detail):
    resp = raw_http("POST", SIMPLE, body, {"Content-Encoding": encoding})
    assert error_of(resp) == (400, f"failed to decompress the request body: {detail}"), resp


# --------------------------------------------------------------------------- invalid UTF-8
BASE = '{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[7]}]}'


def test_invalid_utf8_in_input_name(raw_http):
    resp = raw_http("POST", ID_INT32, BASE.replace("INPUT0", "INPUT\xff0").encode("latin-1"))
    assert resp.status == 400, resp
    assert resp.error.startswith("unexpected inference input 'INPUT"), resp
    assert resp.error.endswith("0' for model 'identity_int32'"), resp


@pytest.mark.parametrize("prefix", ['{"id":"a\xffb",', '{"k\xff":1,', '{"parameters":{"k\xff":"\xfe"},'])
def test_invalid_utf8_in_id_keys_and_parameters_is_harmless(raw_http, prefix):
    resp = raw_http("POST", ID_INT32, (prefix + BASE[1:]).encode("latin-1"))
    assert resp.status == 200, resp
    assert b'"data":[7]' in resp.body, resp


@pytest.mark.parametrize("path", [ID_INT32, ID_BYTES])
def test_lone_surrogate_escape(raw_http, path):
    dt = "BYTES" if "bytes" in path else "INT32"
    body = '{"inputs":[{"name":"INPUT0","datatype":"%s","shape":[1],"data":["a\\ud800b"]}]}' % dt
    resp = raw_http("POST", path, body)
    assert resp.status == 500, resp
    assert resp.error.startswith("failed to parse the request JSON buffer: The surrogate pair in string is invalid."), resp


def test_invalid_utf8_bytes_element_in_json_goes_through_raw(raw_http):
    """BYTES are bytes: no UTF-8 validation, the element comes back as it was sent (TRITON.md §2.6)."""
    resp = raw_http("POST", ID_BYTES,
                    b'{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1],"data":["a\xffb"]}]}')
    assert resp.status == 200, resp
    assert b'"data":["a\xffb"]' in resp.body, resp


def test_invalid_utf8_bytes_element_over_grpc(grpc_stub):
    for put in ("raw", "contents"):
        req = service_pb2.ModelInferRequest(model_name="identity_bytes")
        t = req.inputs.add(name="INPUT0", datatype="BYTES", shape=[2])
        if put == "raw":
            req.raw_input_contents.append(serialize_bytes([b"\xff\xfe", b"\xc3\x28"]))
        else:
            t.contents.bytes_contents.extend([b"\xff\xfe", b"\xc3\x28"])
        code, resp = grpc_call(grpc_stub.ModelInfer, req)
        assert code == "OK", resp
        assert resp.raw_output_contents[0] == serialize_bytes([b"\xff\xfe", b"\xc3\x28"])


@pytest.mark.parametrize("payload,field", [
    (raw_infer_request(model=b"identity\xffint32"), "ModelInferRequest.model_name"),
    (raw_infer_request(input_name=b"INPUT\xff0"), "InferInputTensor.name"),
])
def test_grpc_invalid_utf8_in_string_fields(grpc_url, payload, field):
    code, msg = raw_grpc_infer(grpc_url, payload)
    assert code == "INTERNAL", (code, msg)
    assert msg.startswith(f"failed to decode Protobuf message: {field}: "), msg
    assert "UTF-8" in msg, msg


def test_invalid_utf8_in_register_key(raw_http):
    """Triton's JSON reader takes the bytes as they are (it does not validate UTF-8): the key is
    looked up and not found, 500 as for any key that does not exist."""
    resp = raw_http("POST", "/v2/systemsharedmemory/region/hostile_utf8/register",
                    b'{"key":"/a\xffb","offset":0,"byte_size":64}')
    assert resp.status == 500, resp
    # Triton echoes the byte as it came (not valid JSON then); the sidecar writes U+FFFD.
    assert resp.body.startswith(b'{"error":"Unable to open shared memory region: \'/a'), resp


@pytest.mark.parametrize("method,path", [
    ("GET", "/v2/models/%FF/ready"),
    ("GET", "/v2/models/%FF/config"),
    ("POST", "/v2/models/simple/versions/%FF/infer"),
    ("GET", "/v2/systemsharedmemory/region/%FF%FE/status"),
])
def test_invalid_utf8_in_url_gets_a_json_error(raw_http, method, path):
    resp = raw_http(method, path, BASE if method == "POST" else b"")
    assert resp.status in (400, 404), resp
    assert resp.headers.get("content-type") == "application/json", resp
    assert isinstance(resp.error, str) and resp.error, resp


# --------------------------------------------------------------------------- wrong datatypes
INVALID_DATATYPE = ("[request id: <id_unknown>] inference input 'INPUT0' data-type is '<invalid>', but model "
                    "'identity_int32' expects 'INT32'")

@pytest.mark.parametrize("datatype", ["int32", "", "TYPE_INT32", "INT32 ", "STRING", "INT\u00ff32"])
def test_unknown_datatype_http(raw_http, datatype):
    """With JSON data the datatype is read first; with binary data the model's check answers (TRITON.md §2.4)."""
    resp = raw_http("POST", ID_INT32, json.dumps(one_input([1], [7], datatype)))
    assert error_of(resp) == (400, "invalid datatype for input INPUT0"), resp
    body, headers = binary_body(one_input([1], datatype=datatype, binary_data_size=4), b"\x07\x00\x00\x00")
    resp = raw_http("POST", ID_INT32, body, headers)
    assert error_of(resp) == (400, INVALID_DATATYPE), resp


def test_datatype_not_a_string(raw_http):
    resp = raw_http("POST", ID_INT32, BASE.replace('"INT32"', "5"))
    assert error_of(resp) == (500, "Unable to parse 'datatype': attempt to access JSON non-string as string"), resp


@pytest.mark.parametrize("datatype", ["INT33", "int32", "", "TYPE_INT32"])
def test_unknown_datatype_grpc(grpc_stub, datatype):
    assert grpc_call(grpc_stub.ModelInfer, grpc_one_input([1], datatype=datatype)) == (
        "INVALID_ARGUMENT", INVALID_DATATYPE)


# --------------------------------------------------------------------------- shared memory boundaries
def _region(pool, http_url, size=128, offset=0, data=None):
    handle, key = pool.create(size + offset, "b")
    if data is not None:
        write(handle, data, offset)
    name = pool.name("b")
    resp = raw_request(http_url, "POST", f"/v2/systemsharedmemory/region/{name}/register",
                       json.dumps({"key": key, "offset": offset, "byte_size": size}))
    assert resp.status == 200, resp
    return handle, name


def _http_shm_infer(raw_http, name, offset, byte_size, where):
    p = {"shared_memory_region": name, "shared_memory_byte_size": byte_size, "shared_memory_offset": offset}
    in0 = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}
    doc = {"inputs": [in0, {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
                            "data": SIMPLE_B.reshape(-1).tolist()}]}
    if where == "input":
        in0["parameters"] = p
    else:
        in0["data"] = SIMPLE_A.reshape(-1).tolist()
        doc["outputs"] = [{"name": "OUTPUT0", "parameters": p}]
    return raw_http("POST", SIMPLE, json.dumps(doc))


def _grpc_shm_request(name, offset, byte_size, where):
    req = service_pb2.ModelInferRequest(model_name="simple")
    t0 = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    params = t0.parameters if where == "input" else req.outputs.add(name="OUTPUT0").parameters
    params["shared_memory_region"].string_param = name
    params["shared_memory_byte_size"].int64_param = byte_size
    params["shared_memory_offset"].int64_param = offset
    if where == "output":
        req.raw_input_contents.append(SIMPLE_A.tobytes())
    req.raw_input_contents.append(SIMPLE_B.tobytes())
    return req


def _bad_offset(name):
    return f"Invalid offset for shared memory region: '{name}'"


def _bad_end(name):
    return f"Invalid offset + byte size for shared memory region: '{name}'"


def _overflow(name, size, offset):
    return (f"Integer overflow detected: byte_size ({size}) + offset ({offset}) exceeds maximum value "
            f"({2**64 - 1}) for region '{name}'")


@pytest.mark.parametrize("where", ["input", "output"])
def test_http_shm_tensor_window_boundaries(raw_http, http_url, pool, where):
    """A 128-byte region: each boundary gets its own answer, and the last valid window works."""
    handle, name = _region(pool, http_url, data=SIMPLE_A.tobytes() * 2)
    small = (f"shared memory size specified with the request for output 'OUTPUT0' (0 bytes) should be at "
             "least 64 bytes to hold the results")
    zero = ("[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. "
            "Expected 64, got 0")
    cases = [
        ((128, 64), (400, _bad_offset(name))),                 # offset = size
        ((128, 0), (400, _bad_offset(name))),                  # offset = size, nothing to read
        ((65, 64), (400, _bad_end(name))),                     # offset + byte_size = size + 1
        ((0, 0), (400, zero) if where == "input" else (500, small)),  # byte_size 0
        ((2**64 - 1, 1), (400, _bad_offset(name))),            # offset = u64::MAX
        ((2**64 - 32, 64), (400, _bad_offset(name))),          # offset near u64::MAX
        ((1, 2**64 - 1), (400, _overflow(name, 2**64 - 1, 1))),
        ((64, 2**64 - 64), (400, _overflow(name, 2**64 - 64, 64))),
    ]
    for (offset, size), want in cases:
        assert error_of(_http_shm_infer(raw_http, name, offset, size, where)) == want, (offset, size)
    resp = _http_shm_infer(raw_http, name, 64, 64, where)  # offset + byte_size = size exactly
    assert resp.status == 200, resp
    if where == "output":
        np.testing.assert_array_equal(np.frombuffer(read(handle, 64, 64), np.int32), (SIMPLE_A + SIMPLE_B)[0])


@pytest.mark.parametrize("where", ["input", "output"])
def test_grpc_shm_tensor_window_boundaries(grpc_stub, http_url, pool, where):
    _, name = _region(pool, http_url, data=SIMPLE_A.tobytes() * 2)
    cases = [
        ((128, 64), _bad_offset(name)),
        ((65, 64), _bad_end(name)),
        ((2**63 - 1, 1), _bad_offset(name)),   # the largest int64 offset
        ((1, 2**63 - 1), _bad_end(name)),      # the largest int64 size
    ]
    for (offset, size), message in cases:
        got = grpc_call(grpc_stub.ModelInfer, _grpc_shm_request(name, offset, size, where))
        assert got == ("INVALID_ARGUMENT", message), (offset, size, got)
    assert grpc_call(grpc_stub.ModelInfer, _grpc_shm_request(name, 64, 64, where))[0] == "OK"


def test_grpc_negative_shm_offset(grpc_stub, http_url, pool):
    _, name = _region(pool, http_url, data=SIMPLE_A.tobytes() * 2)
    for where in ("input", "output"):
        got = grpc_call(grpc_stub.ModelInfer, _grpc_shm_request(name, -1, 64, where))
        assert got == ("INVALID_ARGUMENT", _bad_offset(name)), got


def test_grpc_negative_shm_byte_size(grpc_stub, http_url, pool):
    _, name = _region(pool, http_url, data=SIMPLE_A.tobytes() * 2)
    for where in ("input", "output"):
        got = grpc_call(grpc_stub.ModelInfer, _grpc_shm_request(name, 0, -1, where))
        assert got == ("INVALID_ARGUMENT", _bad_end(name)), got


@pytest.mark.parametrize("offset,byte_size,refusal", [
    (0, 0, "mmap"),              # empty region: Triton's mmap of 0 bytes fails
    (4096, 1, "bounds"),         # offset = object size
    (4096, 0, "mmap"),
    (2**64 - 1, 1, "bounds"),    # offset = u64::MAX
    (2**64 - 4096, 4096, "bounds"),
    (1, 2**64 - 1, "limit"),     # offset + byte_size wraps
    (0, 2**64 - 1, "limit"),
])
def test_register_boundaries(raw_http, grpc_stub, pool, offset, byte_size, refusal):
    _, key = pool.create(4096, "reg")
    name = pool.name("reg")
    want = {
        "limit": f"cannot register shared memory region '{name}': registered regions would exceed the limit of ",
        "bounds": f"failed to register shared memory region '{name}': invalid args",
        "mmap": f"failed to register shared memory region '{name}': unable to process address spaceInvalid argument",
    }[refusal]
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register",
                    json.dumps({"key": key, "offset": offset, "byte_size": byte_size}))
    assert resp.status == 400 and resp.error.startswith(want), resp
    if offset < 2**63 and byte_size < 2**63:
        code, msg = grpc_call(grpc_stub.SystemSharedMemoryRegister, service_pb2.SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=offset, byte_size=byte_size))
        assert code == "INVALID_ARGUMENT" and msg.startswith(want), (code, msg)
    assert raw_http("GET", f"/v2/systemsharedmemory/region/{name}/status").status == 404


def test_register_last_page_of_object(raw_http, pool):
    handle, key = pool.create(2 * 4096, "last")
    name = pool.name("last")
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register",
                    json.dumps({"key": key, "offset": 4096, "byte_size": 4096}))
    assert resp.status == 200, resp


# --------------------------------------------------------------------------- keys and names
@pytest.mark.parametrize("key", ["/a/b", "a/b", "..", "/..", "/../x", "/x/..", "/./x", ".", "/.", "",
                                 "/proc/self/mem", "/../../etc/passwd"])
def test_register_key_with_slash_or_dots(raw_http, grpc_stub, pool, key):
    name = pool.name("key")
    want = f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register",
                    json.dumps({"key": key, "offset": 0, "byte_size": 64}))
    assert error_of(resp) == (400, want), resp
    assert grpc_call(grpc_stub.SystemSharedMemoryRegister, service_pb2.SystemSharedMemoryRegisterRequest(
        name=name, key=key, offset=0, byte_size=64)) == ("INVALID_ARGUMENT", want)


def test_register_key_with_nul_byte(raw_http, pool):
    _, key = pool.create(64, "nul")
    bad = key + "\x00x"  # must not be cut at the NUL (it would open `key`)
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{pool.name('nul')}/register",
                    json.dumps({"key": bad, "offset": 0, "byte_size": 64}))
    assert error_of(resp) == (500, f"Unable to open shared memory region: '{bad}'"), resp


def test_leading_slashes_name_the_same_object(raw_http, pool):
    handle, key = pool.create(128, "lead")
    write(handle, SIMPLE_A.tobytes() + SIMPLE_B.tobytes())
    name = pool.name("lead")
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register",
                    json.dumps({"key": "//" + key.lstrip("/"), "offset": 0, "byte_size": 128}))
    assert resp.status == 200, resp
    resp = _http_shm_infer(raw_http, name, 0, 64, "input")
    assert resp.status == 200, resp


@pytest.mark.parametrize("label,encoded", [("slash", "%2F"), ("dots", "..")])
def test_region_names_are_names_not_paths(raw_http, pool, label, encoded):
    """A region name holding `/` (percent-encoded) or made of dots is just a name: it registers, is listed,
    is used and is unregistered by that name."""
    handle, key = pool.create(128, label)
    write(handle, SIMPLE_A.tobytes() + SIMPLE_B.tobytes())
    base = pool.name(label)
    name = f"{base}/x" if encoded == "%2F" else ".."
    url = f"{base}%2Fx" if encoded == "%2F" else ".."
    raw_http("POST", f"/v2/systemsharedmemory/region/{url}/unregister")  # a leftover ".." from elsewhere
    try:
        resp = raw_http("POST", f"/v2/systemsharedmemory/region/{url}/register",
                        json.dumps({"key": key, "offset": 0, "byte_size": 128}))
        assert resp.status == 200, resp
        listed = raw_http("GET", f"/v2/systemsharedmemory/region/{url}/status")
        assert listed.json() == [{"name": name, "key": key, "offset": 0, "byte_size": 128}], listed
        assert _http_shm_infer(raw_http, name, 0, 64, "input").status == 200
    finally:
        assert raw_http("POST", f"/v2/systemsharedmemory/region/{url}/unregister").status == 200
    assert raw_http("GET", f"/v2/systemsharedmemory/region/{url}/status").status == 404


# --------------------------------------------------------------------------- unregister during use, floods
def _sequence_slots(http_url, model):
    from seq_support import model_config, slot_count

    return slot_count(model_config(http_url, model))


@pytest.mark.triton251_differs("2.51 refuses to unregister a region a request holds: 500 'Cannot unregister "
                              "shared memory region ..., it is currently in use.' (TRITON.md §5.2: current Triton "
                              "lets it go when the request ends)")
def test_unregister_and_reregister_while_a_request_waits(http_url, raw_http, pool, server):
    """Fill every sequence slot, so a new sequence's request waits in the backlog (queued, not refused)
    while other models keep serving; unregister its output region: the answer is 200 at once, but the
    region stays registered (its name taken) until the request has run and written into the object
    it named; then it goes, and the name can be registered on another object, which the request
    never touched."""
    from seq_support import http_output, http_seq, unique_id

    model = "sequence_accumulator"
    holders = [unique_id() for _ in range(_sequence_slots(http_url, model))]
    first_handle, first_key = pool.create(64, "first", fill=0xAB)
    second_handle, second_key = pool.create(64, "second", fill=0xAB)
    name = pool.name("out")
    reg = lambda key: raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register",  # noqa: E731
                               json.dumps({"key": key, "offset": 0, "byte_size": 64}))
    assert reg(first_key).status == 200
    waiting = {}
    try:
        for sid in holders:
            assert http_output(http_seq(http_url, model, 1, sid, start=True)) == 1
        body = {"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [42]}],
                "outputs": [{"name": "OUTPUT", "parameters": shm_params(name, 4)}],
                "parameters": {"sequence_id": unique_id(), "sequence_start": True, "sequence_end": True}}
        thread = threading.Thread(target=lambda: waiting.setdefault("resp", raw_request(
            http_url, "POST", f"/v2/models/{model}/infer", json.dumps(body), timeout=120)))
        thread.start()
        if server.metrics:  # wait until it is queued; without metrics, a moment
            deadline = time.monotonic() + 20
            while metric_value(server.metrics, "nv_inference_pending_request_count", model) < 1:
                assert time.monotonic() < deadline, "the request never showed as pending"
                time.sleep(0.05)
        else:
            time.sleep(0.5)
        assert thread.is_alive(), f"a sequence beyond the slots was not queued: {waiting}"
        assert_serving(http_url)  # a flood of sequences does not hold up other models
        assert raw_http("POST", f"/v2/systemsharedmemory/region/{name}/unregister").status == 200
        assert error_of(reg(second_key)) == (400, f"shared memory region '{name}' already in manager")
        assert thread.is_alive()
    finally:
        for sid in holders:  # END frees the slots; the waiting request runs
            http_seq(http_url, model, 0, sid, end=True)
    thread.join(60)
    assert not thread.is_alive()
    resp = waiting["resp"]
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == [{"name": "OUTPUT", "datatype": "INT32", "shape": [1, 1]}]
    assert np.frombuffer(read(first_handle, 4), np.int32)[0] == 42
    assert read(first_handle, 60, 4) == b"\xab" * 60
    status = f"/v2/systemsharedmemory/region/{name}/status"
    deadline = time.monotonic() + 5
    while raw_http("GET", status).status == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert raw_http("GET", status).status == 404
    assert reg(second_key).status == 200
    assert read(second_handle, 64) == b"\xab" * 64


# --------------------------------------------------------------------------- CUDA handles
def _cuda_active(raw_http) -> bool:
    return "cuda_shared_memory" in raw_http("GET", "/v2").json()["extensions"]


@pytest.mark.parametrize("handle", [b"", b"x" * 10, b"x" * 63, b"x" * 65, b"x" * 128, "not base64!"],
                         ids=["0", "10", "63", "65", "128", "bad-base64"])
def test_cuda_handle_of_wrong_length(raw_http, grpc_stub, handle):
    """A clear 400 / INVALID_ARGUMENT whether or not the server can use a GPU; nothing is registered."""
    name = f"hostile_cuda_{os.getpid()}"
    if _cuda_active(raw_http):
        # REST checks the length; Triton's gRPC handler does not, and its failed open answers.
        want = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
        want_grpc = "failed to register shared memory region: invalid args"
    else:
        want = want_grpc = f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
    b64 = handle if isinstance(handle, str) else base64.b64encode(handle).decode()
    resp = raw_http("POST", f"/v2/cudasharedmemory/region/{name}/register",
                    json.dumps({"raw_handle": {"b64": b64}, "device_id": 0, "byte_size": 64}))
    assert error_of(resp) == (400, want), resp
    if isinstance(handle, bytes):
        assert grpc_call(grpc_stub.CudaSharedMemoryRegister, service_pb2.CudaSharedMemoryRegisterRequest(
            name=name, raw_handle=handle, device_id=0, byte_size=64)) == ("INVALID_ARGUMENT", want_grpc)
    assert raw_http("GET", f"/v2/cudasharedmemory/region/{name}/status").status == 404


# --------------------------------------------------------------------------- slow clients
def _stalled_connections(http_url, grpc_url):
    """Connections that stop half-way: body, headers, a trickle, nothing at all, and an idle gRPC one."""
    socks = []
    s = connect(http_url)
    s.sendall(post_head(SIMPLE, len(GOOD)) + GOOD[:10])
    socks.append(("body", s))
    s = connect(http_url)
    s.sendall(f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nContent-Le".encode())
    socks.append(("headers", s))
    s = connect(http_url)
    socks.append(("silent", s))
    s = connect(grpc_url)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    socks.append(("grpc-preface", s))
    return socks


def test_slow_clients_do_not_hold_up_others(http_url, grpc_url, grpc_stub):
    """Stalled and trickling clients (64 stalled connections at once) while others are served; a client
    that trickles its body a few bytes at a time and then finishes gets its answer."""
    socks = []
    try:
        for _ in range(16):
            socks += _stalled_connections(http_url, grpc_url)
        assert_serving(http_url)
        assert grpc_stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
        trickle = connect(http_url, timeout=30)
        socks.append(("trickle", trickle))
        data = post_head(SIMPLE, len(GOOD)) + GOOD
        for i in range(0, len(data), 64):
            trickle.sendall(data[i:i + 64])
            time.sleep(0.01)
            if i == 64 * 3:
                assert_serving(http_url)  # served while the trickle is half-way
        buf = b""
        while b"\r\n\r\n" not in buf or len(buf.partition(b"\r\n\r\n")[2]) < int(
                parse_responses(buf)[0][1]["content-length"]):
            chunk = trickle.recv(65536)
            assert chunk, buf
            buf += chunk
        status, _, body = parse_responses(buf)[0]
        assert status == 200, buf
        assert json.loads(body)["outputs"][0]["data"] == (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()
    finally:
        for _, s in socks:
            s.close()


SLOW_CLIENT_WAIT_S = float(os.environ.get("INFERGATE_SLOW_CLIENT_WAIT_S", "35"))


def test_stalled_request_is_eventually_closed(http_url):
    """A request stalled mid-headers or mid-body is answered (408/400) or closed by the server within
    INFERGATE_SLOW_CLIENT_WAIT_S (default 35 s; hyper's usual header-read timeout is 30 s)."""
    deadline = time.monotonic() + SLOW_CLIENT_WAIT_S
    body = connect(http_url)
    headers = connect(http_url)
    try:
        body.sendall(post_head(SIMPLE, len(GOOD)) + GOOD[:10])
        headers.sendall(f"POST {SIMPLE} HTTP/1.1\r\nHost: test\r\nContent-Le".encode())
        for label, sock in (("body", body), ("headers", headers)):
            try:
                while True:
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    if not sock.recv(65536):
                        break  # closed (after an answer or not)
            except socket.timeout:
                pytest.fail(f"the connection stalled in its {label} is still open after {SLOW_CLIENT_WAIT_S} s")
            except OSError:
                pass  # reset: closed
    finally:
        body.close()
        headers.close()


def test_grpc_message_above_the_limit(grpc_stub):
    """Row 2.15: a ModelInferRequest just over the 256 MiB message limit is refused by the gRPC
    layer before it is buffered; the server keeps serving (autouse check)."""
    n = (256 << 20) // 4 + 256
    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[n])
    req.raw_input_contents.append(bytes(4 * n))
    with pytest.raises(grpc.RpcError) as refused:
        grpc_stub.ModelInfer(req, timeout=120)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    assert refused.value.details().startswith("Received message larger than max ("), refused.value.details()
