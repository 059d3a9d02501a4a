"""The generate extension: POST /v2/models/{m}[/versions/{v}]/generate and /generate_stream.

A flat JSON object in: each key names a model input (the value is its tensor, shaped by the
model's metadata) or else a request parameter, and the `parameters` object's keys are read the
same way. One flat JSON object out per response: the outputs, the request id, `model_name`,
`model_version` and any response parameters, keys in byte order, a one-element tensor as its
element. /generate answers with exactly one; /generate_stream with one Server-Sent Event per
response. Texts, statuses and key order are Triton's (checked against Triton 2.51 with
INFERGATE_ORACLE=triton251).
"""

import json
import os
import time

import pytest

from support import assert_serving

SIXTEEN = list(range(16))
ONES = [1] * 16
SIMPLE_OUT = {
    "OUTPUT0": [i + 1 for i in SIXTEEN],
    "OUTPUT1": [i - 1 for i in SIXTEEN],
    "model_name": "simple",
    "model_version": "1",
}
EVENT_STREAM = "text/event-stream; charset=utf-8"
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


@pytest.fixture(autouse=True)
def _still_serving(http_url):
    yield
    assert_serving(http_url)


def generate(raw_http, model, body, stream=False, headers=None):
    route = "generate_stream" if stream else "generate"
    if not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    return raw_http("POST", f"/v2/models/{model}/{route}", body, headers=headers)


def events(resp):
    """The JSON objects of a Server-Sent Events body (each `data: <json>` and a blank line)."""
    assert resp.body.endswith(b"\n\n") or not resp.body, resp
    out = []
    for chunk in resp.body.split(b"\n\n")[:-1]:
        assert chunk.startswith(b"data: "), resp
        out.append(json.loads(chunk[len(b"data: "):]))
    return out


def assert_error(resp, status, message):
    assert resp.status == status, resp
    assert resp.headers["content-type"] == "application/json", resp
    assert resp.json() == {"error": message}, resp


# --------------------------------------------------------------------------- answers
def test_generate_returns_outputs_as_flat_members(raw_http):
    resp = generate(raw_http, "simple", {"INPUT0": SIXTEEN, "INPUT1": ONES})
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/json"
    doc = resp.json()
    assert doc == SIMPLE_OUT
    assert list(doc) == ["OUTPUT0", "OUTPUT1", "model_name", "model_version"]


def test_the_request_id_comes_back_and_other_keys_are_parameters(raw_http):
    body = {"id": "42", "INPUT0": SIXTEEN, "INPUT1": ONES, "temperature": 0.5, "stop": "x"}
    doc = generate(raw_http, "simple", body).json()
    assert doc == {**SIMPLE_OUT, "id": "42"}
    # Byte order: upper-case output names first, then the rest.
    assert list(doc) == ["OUTPUT0", "OUTPUT1", "id", "model_name", "model_version"]


def test_the_batch_dimension_is_filled_from_the_element_count(raw_http):
    doc = generate(raw_http, "simple", {"INPUT0": SIXTEEN * 2, "INPUT1": ONES * 2}).json()
    assert doc["OUTPUT0"] == [i + 1 for i in SIXTEEN] * 2


def test_inputs_may_be_given_inside_parameters(raw_http):
    body = {"parameters": {"INPUT0": SIXTEEN, "INPUT1": ONES, "p": True}}
    assert generate(raw_http, "simple", body).json() == SIMPLE_OUT


def test_a_versioned_route_answers_the_same(raw_http):
    body = json.dumps({"INPUT0": SIXTEEN, "INPUT1": ONES})
    resp = raw_http("POST", "/v2/models/simple/versions/1/generate", body)
    assert resp.status == 200, resp
    assert resp.json() == SIMPLE_OUT


@pytest.mark.parametrize(
    "model, body, expected",
    [
        ("identity_fp32", {"INPUT0": [1.5, 2, -3]}, [1.5, 2.0, -3.0]),
        ("identity_fp32", {"INPUT0": 2.5}, 2.5),
        ("identity_bool", {"INPUT0": [True, False]}, [True, False]),
        ("identity_bytes", {"INPUT0": "hello"}, "hello"),
        ("identity_bytes", {"INPUT0": ["a", "bc"]}, ["a", "bc"]),
        ("identity_int64", {"INPUT0": [2**63 - 1, -(2**63)]}, [2**63 - 1, -(2**63)]),
        ("simple_identity", {"INPUT0": ["x", "y", "z"]}, ["x", "y", "z"]),
    ],
    ids=["fp32", "fp32-scalar", "bool", "bytes-scalar", "bytes", "int64", "bytes-2d"],
)
def test_a_tensor_of_one_element_is_that_element(raw_http, model, body, expected):
    resp = generate(raw_http, model, body)
    assert resp.status == 200, resp
    assert resp.json() == {"OUTPUT0": expected, "model_name": model, "model_version": "1"}


def test_generate_stream_sends_one_event_for_a_model_that_answers_once(raw_http):
    body = {"INPUT0": SIXTEEN, "INPUT1": ONES}
    single = generate(raw_http, "simple", body)
    resp = generate(raw_http, "simple", body, stream=True)
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == EVENT_STREAM
    assert resp.body == b"data: " + single.body + b"\n\n"


def test_generate_stream_sends_each_response_of_a_decoupled_model(raw_http):
    body = {"IN": [4, 5, 6], "DELAY": [0, 0, 0], "WAIT": 0}
    resp = generate(raw_http, "repeat_int32", body, stream=True)
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == EVENT_STREAM
    assert events(resp) == [
        {"IDX": i, "OUT": v, "model_name": "repeat_int32", "model_version": "1"}
        for i, v in enumerate([4, 5, 6])
    ]


def test_generate_stream_sends_each_event_of_a_decoupled_model_as_produced(http_url):
    """The second response is produced 3 s after the first: the first arrives well before."""
    import http.client

    host, _, port = http_url.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"IN": [4, 5], "DELAY": [0, 3000], "WAIT": 0})
    started = time.monotonic()
    conn.request("POST", "/v2/models/repeat_int32/generate_stream", body)
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.readline()
    first_at = time.monotonic() - started
    rest = resp.read()
    done_at = time.monotonic() - started
    conn.close()
    assert first.startswith(b'data: {"IDX":0,"OUT":4'), first
    assert b'"IDX":1,"OUT":5' in rest
    assert done_at >= 3.0
    assert first_at < done_at - 1.5, (first_at, done_at)


def test_generate_takes_a_decoupled_model_that_answers_once(raw_http):
    resp = generate(raw_http, "repeat_int32", {"IN": [7], "DELAY": [0], "WAIT": 0})
    assert resp.status == 200, resp
    assert resp.json() == {"IDX": 0, "OUT": 7, "model_name": "repeat_int32", "model_version": "1"}


def test_generate_refuses_a_decoupled_model_answering_twice(raw_http):
    # The first response set 200 before the second came: the error arrives under it.
    resp = generate(raw_http, "repeat_int32", {"IN": [4, 5], "DELAY": [0, 0], "WAIT": 0})
    assert_error(resp, 200, ONE_RESPONSE)


def test_an_error_of_a_decoupled_model_while_it_runs_is_an_event(raw_http):
    # repeat_int32 fails a request whose DELAY does not match IN, once it runs.
    resp = generate(raw_http, "repeat_int32", {"IN": [4, 5], "DELAY": [0], "WAIT": 0}, stream=True)
    (event,) = events(resp)
    assert resp.headers["content-type"] == EVENT_STREAM
    assert event == {"error": "expected IN and DELAY shape to match, got [2] and [1]"}, resp
    # The status is the error's code. A model server's gRPC stream carries an error's message
    # without its code, so through an upstream the sidecar can only call it INTERNAL.
    upstream = os.environ.get("INFERGATE_BACKEND", "").startswith("upstream-")
    assert resp.status == (500 if upstream else 400), resp


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("stream", [False, True], ids=["generate", "generate_stream"])
def test_a_missing_input_is_refused_before_the_model_runs(raw_http, stream):
    resp = generate(raw_http, "simple", {"INPUT0": SIXTEEN, "other": "param"}, stream)
    assert_error(
        resp,
        400,
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got "
        "input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all "
        "required input(s).",
    )


@pytest.mark.parametrize(
    "model, body, message",
    [
        (
            "simple",
            {"INPUT0": SIXTEEN, "INPUT1": ["1"] * 16},
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            "identity_fp32",
            {"INPUT0": [True]},
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            "identity_bool",
            {"INPUT0": "true"},
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        (
            "identity_bytes",
            {"INPUT0": [1]},
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            "identity_fp32",
            {"INPUT0": [[1, 2], [3]]},
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        ("simple", [], "attempt to get members for non-object"),
        ("simple", b"", "failed to parse the request JSON buffer: The document is empty. at 0"),
        ("simple", b"{", "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
        ("simple", {"id": 5}, "Unable to parse 'id': attempt to access JSON non-string as string"),
        (
            "simple",
            {"INPUT0": SIXTEEN, "INPUT1": ONES, "parameters": 1},
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
        ),
    ],
    ids=[
        "string-for-int",
        "bool-for-float",
        "string-for-bool",
        "number-for-bytes",
        "nested-overrun",
        "not-object",
        "empty",
        "syntax",
        "id-number",
        "parameters-not-object",
    ],
)
def test_json_that_does_not_read_is_500_as_in_triton(raw_http, model, body, message):
    assert_error(generate(raw_http, model, body), 500, message)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"INPUT0": SIXTEEN, "INPUT1": ONES[:15]},
            "The schema can not convert input 'INPUT1' to tensor with proper shape",
        ),
        (
            {"INPUT0": SIXTEEN, "INPUT1": ONES, "p": [1]},
            "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"INPUT0": SIXTEEN, "INPUT1": ONES, "p": None},
            "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"INPUT0": SIXTEEN, "INPUT1": ONES, "parameters": {"nested": {"a": 1}}},
            "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should be "
            "either 'int', 'bool', or 'string'.",
        ),
        (
            '{"INPUT0": %s, "INPUT1": %s, "INPUT0": [0]}' % (SIXTEEN, ONES),
            "[request id: <id_unknown>] input 'INPUT0' already exists in request",
        ),
        (
            '{"id": "7", "INPUT0": %s, "parameters": {"INPUT0": %s}}' % (SIXTEEN, SIXTEEN),
            "Converting keyword: 'parameters': [request id: 7] input 'INPUT0' already exists in "
            "request",
        ),
    ],
    ids=["shape", "param-array", "param-null", "param-nested", "duplicate", "duplicate-nested"],
)
def test_what_cannot_be_converted_is_400(raw_http, body, message):
    assert_error(generate(raw_http, "simple", body), 400, message)


def test_half_floats_cannot_come_as_json(raw_http):
    resp = generate(raw_http, "identity_fp16", {"INPUT0": [1.0]})
    assert_error(
        resp,
        400,
        "receiving FP16 data via JSON is not supported. Please use the binary data format for "
        "input INPUT0",
    )


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "generate_stream"])
def test_an_unknown_model_is_404(raw_http, stream):
    resp = generate(raw_http, "nope", {"INPUT0": [1]}, stream)
    assert_error(resp, 404, "Request for unknown model: 'nope' is not found")


def test_a_compressed_body_is_refused(raw_http):
    resp = generate(
        raw_http,
        "simple",
        {"INPUT0": SIXTEEN, "INPUT1": ONES},
        headers={"Content-Encoding": "gzip"},
    )
    assert_error(resp, 400, "Unsupported content-encoding, only 'identity' is supported.")


@pytest.mark.triton251_differs(
    "Triton 2.51 sizes an empty array by the model's shape (INPUT1 becomes [0, 16]: 'input byte "
    "size mismatch ... Expected 64, got 0'); current Triton adds it without a shape"
)
def test_an_empty_array_is_an_input_without_a_shape(raw_http):
    resp = generate(raw_http, "simple", {"INPUT0": SIXTEEN, "INPUT1": []})
    assert_error(
        resp,
        400,
        "[request id: <id_unknown>] input 'INPUT1' has no shape but model requires batch "
        "dimension for 'simple'",
    )
