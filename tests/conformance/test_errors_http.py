"""HTTP error statuses and exact texts; the server keeps serving after each."""

import copy
import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support import assert_serving, simple_json_request

INFER = "/v2/models/simple/infer"
NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


@pytest.fixture(autouse=True)
def _still_serving(http_url):
    yield
    assert_serving(http_url)


def post_json(raw_http, doc, path=INFER):
    return raw_http("POST", path, json.dumps(doc))


def assert_error(resp, status, message):
    assert resp.status == status, resp
    assert resp.json() == {"error": message}, resp


def req_with(mutate, **extra):
    doc = simple_json_request(**extra)
    mutate(doc)
    return doc


# --------------------------------------------------------------------------- routing
@pytest.mark.parametrize("method,path", [
    ("GET", INFER),
    ("PUT", INFER),
    ("POST", "/v2/health/live"),
    ("POST", "/v2/health/ready"),
    ("DELETE", "/v2"),
    ("POST", "/v2/models/simple"),
    ("POST", "/v2/models/simple/config"),
    ("POST", "/v2/models/simple/ready"),
    ("POST", "/v2/models/simple/stats"),
    ("GET", "/v2/repository/index"),
    ("DELETE", "/v2/logging"),
])
def test_wrong_method(raw_http, method, path):
    resp = raw_http(method, path)
    assert_error(resp, 405, "Method Not Allowed")


@pytest.mark.parametrize("path", [
    "/",
    "/v1/models/simple",
    "/v3",
    "/v2/foo",
    "/v2/health",
    "/v2/health/alive",
    "/v2/models/simple/versions/abc",
    "/v2/models/simple/versions/1/bogus",
    "/v2/models/simple/infer/extra",
    "/v2/models",
])
def test_unknown_path(raw_http, path):
    resp = raw_http("GET", path)
    assert_error(resp, 404, "Not Found")


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("path", [
    "/v2/models//ready",
    "/v2/models/simple/versions/-1",
    "/v2/models/simple/versions/%31/ready",
    "/v2/models/simple/versions//config",
    "/v2/systemsharedmemory/region//status",
])
def test_path_no_route_pattern_matches(raw_http, method, path):
    # Names are one or more characters, versions decimal digits as sent: anything else is an
    # unknown path, whatever the method.
    assert_error(raw_http(method, path), 404, "Not Found")


@pytest.mark.parametrize("path,status", [
    ("/v2/health/live", 405), ("/v2/models/simple", 405), ("/v2/models/simple/versions/1/ready", 405),
    (INFER, 405), ("/v2/health/alive", 404), ("/v2/models/simple/versions/x", 404),
])
def test_head(raw_http, path, status):
    # No handler of Triton's allows HEAD: known paths answer 405, unknown ones 404.
    resp = raw_http("HEAD", path)
    assert (resp.status, resp.body) == (status, b""), resp
    # Where a 405 lists the methods the path takes (RFC 9110 asks it to), HEAD is not among them.
    allow = resp.headers.get("allow", "")
    assert "HEAD" not in allow.upper().replace(" ", "").split(","), resp


def test_query_string_ignored(raw_http):
    resp = raw_http("GET", "/v2/health/ready?verbose=1")
    assert resp.status == 200, resp
    resp = raw_http("POST", INFER + "?x=1", json.dumps(simple_json_request()))
    assert resp.status == 200, resp


def test_unknown_model_and_version(raw_http):
    assert_error(post_json(raw_http, simple_json_request(), "/v2/models/no_such_model/infer"),
                 404, "Request for unknown model: 'no_such_model' is not found")
    assert_error(post_json(raw_http, simple_json_request(), "/v2/models/simple/versions/9/infer"),
                 404, "Request for unknown model: 'simple' version 9 is not found")


def test_client_sees_unknown_model(http_client):
    inp = httpclient.InferInput("INPUT0", [1], "FP32")
    inp.set_data_from_numpy(np.zeros(1, np.float32))
    with pytest.raises(InferenceServerException) as info:
        http_client.infer("no_such_model", [inp])
    assert info.value.message() == "Request for unknown model: 'no_such_model' is not found"
    assert info.value.status() == "404"


# --------------------------------------------------------------------------- JSON syntax / types (500)
@pytest.mark.parametrize("body", [b"{bad", b"[1,2", b'{"inputs":[}', b"\xff\xfe", b'{"inputs": 5'])
def test_malformed_json(raw_http, body):
    resp = raw_http("POST", INFER, body)
    assert resp.status == 500, resp
    assert resp.headers.get("content-type") == "application/json"
    assert resp.error.startswith("failed to parse the request JSON buffer: "), resp


def test_malformed_json_message_shape(raw_http):
    resp = raw_http("POST", INFER, b"{bad")
    assert_error(resp, 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1")


@pytest.mark.parametrize("path", [INFER, "/v2/systemsharedmemory/region/r/register",
                                  "/v2/repository/index", "/v2/logging"])
@pytest.mark.parametrize("body,offset", [(b"not json", 1), (b"[tru]", 4), (b"[-]", 2), (b"[Nan]", 3)])
def test_syntax_error_where_rapidjson_stops(raw_http, path, body, offset):
    # A word or a number is reported where it stops matching, on every route that reads JSON.
    assert_error(raw_http("POST", path, body), 500,
                 f"failed to parse the request JSON buffer: Invalid value. at {offset}")


def test_nul_ends_the_json(raw_http):
    # rapidjson reads a NUL byte as the end of the input.
    doc = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}).encode()
    path = "/v2/models/identity_fp32/infer"
    assert_error(raw_http("POST", path, b"\0" + doc), 500,
                 "failed to parse the request JSON buffer: The document is empty. at 0")
    assert raw_http("POST", path, doc + b"\0 anything").status == 200
    at = doc.index(b"INPUT0") + 3
    assert_error(raw_http("POST", path, doc[:at] + b"\0" + doc[at:]), 500,
                 f"failed to parse the request JSON buffer: Missing a closing quotation mark in string. at {at}")
    assert_error(raw_http("POST", path, doc[:at] + b"\t" + doc[at:]), 500,
                 f"failed to parse the request JSON buffer: Invalid escape character in string. at {at}")


def test_inf_is_infinity(raw_http):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": ["__INF__"]}]}
    body = json.dumps(doc).replace('["__INF__"]', "[Inf,-Inf]")
    resp = raw_http("POST", "/v2/models/identity_fp32/infer", body)
    assert resp.status == 200, resp
    assert b'"data":[Infinity,-Infinity]' in resp.body, resp


def test_negative_dim(raw_http):
    doc = req_with(lambda d: d["inputs"][0].update(shape=[-1, 16]))
    assert_error(post_json(raw_http, doc), 500,
                 "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")


def test_data_longer_than_shape(raw_http):
    doc = req_with(lambda d: d["inputs"][0]["data"].append(1))
    assert_error(post_json(raw_http, doc), 500,
                 "Unable to parse 'data': Shape does not match true shape of 'data' field")


@pytest.mark.triton251_differs(
    "NOT in TRITON.md §12: 2.51 answers 500 \"Unable to parse 'data': Shape does not match true shape of "
    "'data' field\" for short data as well (current source: separate message)")
def test_data_shorter_than_shape(raw_http):
    doc = req_with(lambda d: d["inputs"][0]["data"].pop())
    assert_error(post_json(raw_http, doc), 500, "Failed to parse 'data' field: shape does not match true shape")


@pytest.mark.parametrize("model,dtype,data,message", [
    ("identity_int32", "INT32", [1.0, 2], "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ("identity_bool", "BOOL", [1, 0], "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
    ("identity_uint8", "UINT8", [-1, 0], "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("identity_bytes", "BYTES", [1, "a"], "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
])
def test_wrong_json_element_type(raw_http, model, dtype, data, message):
    doc = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": [2], "data": data}]}
    assert_error(post_json(raw_http, doc, f"/v2/models/{model}/infer"), 500, message)


def test_non_string_id(raw_http):
    assert_error(post_json(raw_http, simple_json_request(id=5)), 500,
                 "Unable to parse 'id': attempt to access JSON non-string as string")


# --------------------------------------------------------------------------- validation (400)
def test_missing_input(raw_http):
    doc = req_with(lambda d: d["inputs"].pop())
    assert_error(post_json(raw_http, doc), 400,
                 "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. "
                 "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. "
                 "Please provide all required input(s).")


def test_unexpected_input(raw_http):
    doc = req_with(lambda d: d["inputs"][1].update(name="INPUT2"))
    assert_error(post_json(raw_http, doc), 400, "unexpected inference input 'INPUT2' for model 'simple'")


def test_too_many_inputs(raw_http):
    def add(d):
        d["inputs"].append(dict(copy.deepcopy(d["inputs"][0]), name="INPUT2"))
    # Triton lists the inputs in the order of its map of them, and, with none missing, ends the
    # missing list with a lone "]".
    assert_error(post_json(raw_http, req_with(add)), 400,
                 "[request id: <id_unknown>] expected 2 inputs but got 3 inputs for model 'simple'. "
                 "Got input(s) ['INPUT2','INPUT1','INPUT0'], but missing required input(s) ]. "
                 "Please provide all required input(s).")


def test_unknown_input_counted_before_named(raw_http):
    # One input, and not a known one: the count is wrong first.
    doc = req_with(lambda d: (d["inputs"].pop(), d["inputs"][0].update(name="X")))
    assert_error(post_json(raw_http, doc), 400,
                 "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. "
                 "Got input(s) ['X'], but missing required input(s) ['INPUT0','INPUT1']. "
                 "Please provide all required input(s).")


def test_duplicate_input(raw_http):
    doc = req_with(lambda d: d["inputs"].append(copy.deepcopy(d["inputs"][0])))
    assert_error(post_json(raw_http, doc), 400, "[request id: <id_unknown>] input 'INPUT0' already exists in request")


def test_datatype_mismatch(raw_http):
    doc = req_with(lambda d: d["inputs"][0].update(datatype="FP32"))
    assert_error(post_json(raw_http, doc), 400,
                 "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")
    doc = req_with(lambda d: d["inputs"][0].update(datatype="FP32"), id="req-7")
    assert_error(post_json(raw_http, doc), 400,
                 "[request id: req-7] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")


def test_checks_visit_inputs_in_tritons_order(raw_http):
    # Triton checks the inputs in the order of its hash map of them: for two inputs, the one the
    # request gives last comes first.
    for order, named in (((0, 1), "INPUT1"), ((1, 0), "INPUT0")):
        def both_fp32(d):
            for i in d["inputs"]:
                i["datatype"] = "FP32"
            d["inputs"] = [d["inputs"][k] for k in order]
        assert_error(post_json(raw_http, req_with(both_fp32)), 400,
                     f"[request id: <id_unknown>] inference input '{named}' data-type is 'FP32', but model "
                     "'simple' expects 'INT32'")
    # The batch size comes from INPUT1, so INPUT0 is the one that does not match.
    a = np.zeros((2, 16), dtype=np.int32)
    b = np.zeros((1, 16), dtype=np.int32)
    for x, y in ((a, b), (b, a)):
        assert_error(post_json(raw_http, simple_json_request(x, y)), 400,
                     "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs for 'simple'")


def test_batch_mismatch_before_batch_too_big(raw_http):
    big = np.zeros((9, 16), dtype=np.int32)
    one = np.zeros((1, 16), dtype=np.int32)
    assert_error(post_json(raw_http, simple_json_request(one, big)), 400,
                 "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs for 'simple'")


def test_batch_of_zero(raw_http):
    # Triton sizes a batch of 0 as one without the batch dimension.
    empty = np.zeros((0, 16), dtype=np.int32)
    assert_error(post_json(raw_http, simple_json_request(empty, empty)), 400,
                 "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'simple'. "
                 "Expected 64, got 0")


def test_invalid_datatype(raw_http):
    doc = req_with(lambda d: d["inputs"][0].update(datatype="INT33"))
    assert_error(post_json(raw_http, doc), 400, "invalid datatype for input INPUT0")


def test_shape_mismatch(raw_http):
    def mutate(d):
        d["inputs"][0]["shape"] = [1, 15]
        d["inputs"][0]["data"] = d["inputs"][0]["data"][:15]
    assert_error(post_json(raw_http, req_with(mutate)), 400,
                 "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. "
                 "Expected [-1,16], got [1,15]. " + NOTE)


def test_shape_mismatch_non_batching(raw_http):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_fp32/infer"), 400,
                 "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'identity_fp32'. "
                 "Expected [-1], got [2,2]. ")


def test_batch_too_big(raw_http):
    a = np.zeros((9, 16), dtype=np.int32)
    assert_error(post_json(raw_http, simple_json_request(a, a)), 400,
                 "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'")


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["inputs"][0].pop("name"), "name"),
    (lambda d: d["inputs"][0].pop("datatype"), "datatype"),
    (lambda d: d["inputs"][0].pop("shape"), "shape"),
    (lambda d: d.pop("inputs"), "inputs"),
    (lambda d: d.update(outputs=[{"parameters": {"binary_data": True}}]), "name"),
])
def test_missing_member(raw_http, mutate, field):
    assert_error(post_json(raw_http, req_with(mutate)), 500,
                 f"Unable to parse '{field}': attempt to access non-existing object member '{field}'")


@pytest.mark.parametrize("body", [b"[]", b"null", b"{}"])
def test_body_without_inputs(raw_http, body):
    assert_error(raw_http("POST", INFER, body), 500,
                 "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")


def test_input_not_an_object(raw_http):
    # Where its data comes from is checked before anything else of an input.
    assert_error(post_json(raw_http, {"inputs": [1]}), 400,
                 "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
                 "'shared_memory_region' in 'parameters'. But no field is set")


def test_scalar_data(raw_http):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": 1.5}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_fp32/infer"), 500,
                 "Unable to parse 'data': attempt to access JSON non-array as array")


def test_request_parameters_not_an_object(raw_http):
    doc = req_with(lambda d: d.update(parameters=[1]))
    assert_error(post_json(raw_http, doc), 500,
                 "failed to get request params.: attempt to get members for non-object")


@pytest.mark.parametrize("value", [{"b": 1}, None, [1]])
def test_parameter_of_invalid_type(raw_http, value):
    doc = req_with(lambda d: d.update(parameters={"custom": value}))
    assert_error(post_json(raw_http, doc), 400,
                 "parameter 'custom' has invalid type. It should be either 'int', 'bool', or 'string'.")


def test_no_data_field(raw_http):
    doc = req_with(lambda d: d["inputs"][0].pop("data"))
    assert_error(post_json(raw_http, doc), 400,
                 "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
                 "'shared_memory_region' in 'parameters'. But no field is set")


def test_data_and_binary_size(raw_http):
    doc = req_with(lambda d: d["inputs"][0].update(parameters={"binary_data_size": 64}))
    resp = post_json(raw_http, doc)
    assert resp.status == 400, resp
    assert resp.error.startswith("Input must set only one of the following fields: "), resp
    assert resp.error.endswith("But set 'data' 'binary_data_size'"), resp


def test_unknown_output(raw_http):
    doc = simple_json_request(outputs=[{"name": "OUTPUT9"}])
    assert_error(post_json(raw_http, doc), 400, "unexpected inference output 'OUTPUT9' for model 'simple'")


@pytest.mark.triton251_differs("a requested output listed twice answers 200 with one entry (TRITON.md §12)")
def test_duplicate_output(raw_http):
    doc = simple_json_request(outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}])
    assert_error(post_json(raw_http, doc), 400, "[request id: <id_unknown>] output 'OUTPUT0' already exists in request")


def test_reserved_parameter(raw_http):
    doc = simple_json_request(parameters={"triton_foo": 1})
    assert_error(post_json(raw_http, doc), 400,
                 "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")


def test_parameter_of_invalid_type(raw_http):
    doc = simple_json_request(parameters={"custom": {"a": 1}})
    resp = post_json(raw_http, doc)
    assert resp.status == 400, resp
    assert resp.error.startswith("parameter 'custom' has invalid type."), resp


@pytest.mark.triton251_differs("no JSON nesting limit for 'data' (TRITON.md §12)")
def test_json_nesting_depth_limit(raw_http):
    data = 1
    for _ in range(150):
        data = [data]
    doc = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": data}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_int32/infer"), 400,
                 "JSON nesting depth exceeds maximum allowed limit (100)")


def test_json_nesting_within_limit(raw_http):
    data = 1
    for _ in range(50):
        data = [data]
    doc = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": data}]}
    resp = post_json(raw_http, doc, "/v2/models/identity_int32/infer")
    assert resp.status == 200, resp
    assert resp.json()["outputs"][0]["data"] == [1]


@pytest.mark.triton251_differs("data nested 100,000 deep crashes Triton 2.51 (TRITON.md §12)", run=False)
def test_json_extreme_nesting(raw_http):
    depth = 100_000
    body = ('{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":' + "[" * depth + "1" + "]" * depth + "}]}")
    resp = raw_http("POST", "/v2/models/identity_int32/infer", body)
    assert resp.status == 400, resp
    assert resp.error == "JSON nesting depth exceeds maximum allowed limit (100)", resp


@pytest.mark.triton251_differs("an element count that overflows, with short data, crashes Triton 2.51 (TRITON.md §12)", run=False)
def test_element_count_overflow(raw_http):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [9223372036854775807, 4], "data": [1]}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_int32/infer"), 400,
                 "invalid shape for input 'INPUT0': shape [9223372036854775807,4] causes total element count "
                 "to exceed maximum size of 9223372036854775807")


@pytest.mark.triton251_differs("byte-size overflow wraps around instead of being reported (TRITON.md §12)", run=False)
def test_byte_size_overflow(raw_http):
    n = 2**61  # 2**61 INT64 elements = 2**64 bytes
    doc = {"inputs": [{"name": "INPUT0", "datatype": "INT64", "shape": [n], "data": [1]}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_int64/infer"), 400,
                 f"byte size overflow for input 'INPUT0': element count ({n}) * data type size (8) "
                 "exceeds maximum allowed size (9223372036854775807)")


@pytest.mark.parametrize("data", [[], [1], {}], ids=["empty", "one", "object"])
def test_a_shape_without_dimensions_reads_no_data(raw_http, data):
    """Triton's front end counts no elements for a shape of no dimensions and reads nothing else of
    the input ('data' included); validation then judges the empty tensor."""
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [], "data": data}]}
    assert_error(post_json(raw_http, doc, "/v2/models/identity_fp32/infer"), 400,
                 "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model "
                 "'identity_fp32'. Expected [-1], got []. ")


def test_a_zero_dimension_reads_no_data(raw_http):
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [0], "data": {}}]}
    resp = post_json(raw_http, doc, "/v2/models/identity_fp32/infer")
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [0], "data": []}
    ]
    # Nor its datatype: validation reports the unknown one.
    doc["inputs"][0].update(datatype="FLOAT", data=[])
    assert_error(post_json(raw_http, doc, "/v2/models/identity_fp32/infer"), 400,
                 "[request id: <id_unknown>] inference input 'INPUT0' data-type is '<invalid>', "
                 "but model 'identity_fp32' expects 'FP32'")


def test_error_body_shape(raw_http):
    """Every error is a JSON object with exactly one string member "error"."""
    for resp in (
        raw_http("POST", INFER, b"{bad"),
        raw_http("GET", "/v2/models/no_such_model"),
        raw_http("GET", "/nope"),
        raw_http("GET", INFER),
        post_json(raw_http, req_with(lambda d: d["inputs"][0].update(datatype="FP32"))),
    ):
        doc = resp.json()
        assert isinstance(doc, dict) and list(doc) == ["error"] and isinstance(doc["error"], str), resp


def test_burst_of_bad_requests_then_good(raw_http, http_url):
    bad = [
        (b"{", None),
        (json.dumps(req_with(lambda d: d["inputs"].pop())).encode(), None),
        (json.dumps(req_with(lambda d: d["inputs"][0].update(datatype="BOOL"))).encode(), None),
        (b"\x00" * 1000, {"Inference-Header-Content-Length": "0"}),
        (b"x" * 100, {"Inference-Header-Content-Length": "99999"}),
    ]
    for _ in range(10):
        for body, headers in bad:
            resp = raw_http("POST", INFER, body, headers)
            assert 400 <= resp.status < 600, resp
    assert_serving(http_url)
