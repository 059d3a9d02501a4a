"""gRPC error codes and exact texts; the server keeps serving after each."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import SIMPLE_A, SIMPLE_B, grpc_error, serialize_bytes

NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


def simple_request(a=SIMPLE_A, b=SIMPLE_B, **kw):
    req = service_pb2.ModelInferRequest(model_name="simple", **kw)
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        req.inputs.add(name=name, datatype="INT32", shape=list(x.shape))
        req.raw_input_contents.append(x.tobytes())
    return req


@pytest.fixture(autouse=True)
def _still_serving(grpc_stub):
    yield
    resp = grpc_stub.ModelInfer(simple_request())
    got = {o.name: np.frombuffer(r, np.int32) for o, r in zip(resp.outputs, resp.raw_output_contents)}
    assert got["OUTPUT0"].tolist() == (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()


def expect(grpc_stub, req, code, message):
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req, timeout=30)
    assert grpc_error(info.value) == (code, message)


def test_unknown_model(grpc_stub):
    req = simple_request()
    req.model_name = "no_such_model"
    expect(grpc_stub, req, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")


def test_unknown_version(grpc_stub):
    req = simple_request()
    req.model_version = "9"
    expect(grpc_stub, req, "NOT_FOUND", "Request for unknown model: 'simple' version 9 is not found")


def test_bad_version_string(grpc_stub):
    req = simple_request()
    req.model_version = "abc"
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    code, msg = grpc_error(info.value)
    assert code == "INVALID_ARGUMENT"
    assert msg.startswith("failed to get model version from specified version string 'abc'"), msg


def test_client_exception_fields(grpc_client):
    inp = grpcclient.InferInput("INPUT0", [1], "FP32")
    inp.set_data_from_numpy(np.zeros(1, np.float32))
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("no_such_model", [inp])
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert info.value.message() == "Request for unknown model: 'no_such_model' is not found"


def test_datatype_mismatch(grpc_stub):
    req = simple_request(id="g-7")
    req.inputs[0].datatype = "FP32"
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: g-7] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")


def test_checks_visit_inputs_in_tritons_order(grpc_stub):
    # Triton checks inputs in the order of its hash map of them: INPUT1 before INPUT0.
    req = simple_request()
    for i in req.inputs:
        i.datatype = "FP32"
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: <id_unknown>] inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'")
    two = np.zeros((2, 16), dtype=np.int32)
    expect(grpc_stub, simple_request(SIMPLE_A, two), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs for 'simple'")


def test_wildcard_dimension_in_request(grpc_stub):
    req = simple_request()
    req.inputs[0].shape[:] = [1, -1]
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: <id_unknown>] All input dimensions should be specified for input 'INPUT0' for model "
           "'simple', got [1,-1]")


def test_batch_of_zero(grpc_stub):
    empty = np.zeros((0, 16), dtype=np.int32)
    expect(grpc_stub, simple_request(empty, empty), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'simple'. "
           "Expected 64, got 0")


def test_shape_mismatch(grpc_stub):
    req = simple_request()
    req.inputs[0].shape[:] = [1, 15]
    req.raw_input_contents[0] = req.raw_input_contents[0][:60]
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. "
           "Expected [-1,16], got [1,15]. " + NOTE)


def test_byte_size_mismatch(grpc_stub):
    req = simple_request()
    req.raw_input_contents[0] = req.raw_input_contents[0][:60]
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. "
           "Expected 64, got 60")


def test_batch_too_big(grpc_stub):
    a = np.zeros((9, 16), dtype=np.int32)
    expect(grpc_stub, simple_request(a, a), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'")


def test_missing_input(grpc_stub):
    req = simple_request()
    del req.inputs[1]
    del req.raw_input_contents[1]
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. "
           "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).")


def test_unexpected_input(grpc_stub):
    req = simple_request()
    req.inputs[1].name = "INPUT2"
    expect(grpc_stub, req, "INVALID_ARGUMENT", "unexpected inference input 'INPUT2' for model 'simple'")


def test_duplicate_input(grpc_stub):
    req = simple_request()
    req.inputs.add().CopyFrom(req.inputs[0])
    req.raw_input_contents.append(req.raw_input_contents[0])
    expect(grpc_stub, req, "INVALID_ARGUMENT", "[request id: <id_unknown>] input 'INPUT0' already exists in request")


def test_unknown_output(grpc_stub):
    req = simple_request()
    req.outputs.add(name="OUTPUT9")
    expect(grpc_stub, req, "INVALID_ARGUMENT", "unexpected inference output 'OUTPUT9' for model 'simple'")


@pytest.mark.triton251_differs("a requested output listed twice answers with one entry (TRITON.md §12)")
def test_duplicate_output(grpc_stub):
    req = simple_request()
    req.outputs.add(name="OUTPUT0")
    req.outputs.add(name="OUTPUT0")
    expect(grpc_stub, req, "INVALID_ARGUMENT", "[request id: <id_unknown>] output 'OUTPUT0' already exists in request")


def test_reserved_parameter(grpc_stub):
    req = simple_request()
    req.parameters["triton_foo"].int64_param = 1
    expect(grpc_stub, req, "INVALID_ARGUMENT",
           "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
           "starting with 'triton_' are allowed: triton_enable_empty_final_response")


def test_uint64_custom_parameter(grpc_stub):
    req = simple_request()
    req.parameters["custom"].uint64_param = 1
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    code, msg = grpc_error(info.value)
    assert code == "INVALID_ARGUMENT"
    assert msg.startswith("invalid value type for 'custom' parameter, expected int64_param, bool_param"), msg


def test_bytes_element_errors(grpc_stub):
    def bytes_req(raw, n):
        req = service_pb2.ModelInferRequest(model_name="identity_bytes")
        req.inputs.add(name="INPUT0", datatype="BYTES", shape=[n])
        req.raw_input_contents.append(raw)
        return req

    expect(grpc_stub, bytes_req(serialize_bytes([b"ab"]), 2), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] expected 2 string elements for inference input 'INPUT0' "
           "for model 'identity_bytes', got 1")
    expect(grpc_stub, bytes_req(serialize_bytes([b"ab", b"c"]), 1), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] unexpected number of string elements 2 for inference input 'INPUT0' "
           "for model 'identity_bytes', expecting 1")
    # One too many ends the count: the message gives that count, not the buffer's total.
    expect(grpc_stub, bytes_req(serialize_bytes([b"a", b"b", b"c", b"d"]), 2), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] unexpected number of string elements 3 for inference input 'INPUT0' "
           "for model 'identity_bytes', expecting 2")
    # The core counts an element that runs past the end (it takes the rest of the buffer) ...
    expect(grpc_stub, bytes_req(serialize_bytes([b"x"]) + b"\x05\x00\x00\x00ab", 3), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] expected 3 string elements for inference input 'INPUT0' "
           "for model 'identity_bytes', got 2")
    # ... and, the count right, the model's backend refuses it, in its own words (no request id).
    expect(grpc_stub, bytes_req(serialize_bytes([b"x"]) + b"\x05\x00\x00\x00ab", 2), "INVALID_ARGUMENT",
           "incomplete string data for inference input 'INPUT0', expecting string of length 5 but only "
           "2 bytes available")
    expect(grpc_stub, bytes_req(b"\x05\x00", 1), "INVALID_ARGUMENT",
           "[request id: <id_unknown>] incomplete string length indicator for inference input 'INPUT0' "
           "for model 'identity_bytes', expecting 4 bytes but only 2 bytes available. "
           "Please make sure the string length indicator is in one buffer.")


def test_metadata_rpcs_errors(grpc_stub):
    with pytest.raises(Exception) as info:
        grpc_stub.ModelConfig(service_pb2.ModelConfigRequest(name="simple", version="9"))
    assert grpc_error(info.value) == ("NOT_FOUND", "Request for unknown model: 'simple' version 9 is not found")
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="other"))
    assert grpc_error(info.value) == ("UNIMPLEMENTED", "'repository_name' specification is not supported")


def test_many_errors_then_good(grpc_stub):
    bad = simple_request()
    bad.inputs[0].datatype = "BOOL"
    unknown = simple_request()
    unknown.model_name = "nope"
    for _ in range(20):
        for req in (bad, unknown):
            with pytest.raises(Exception):
                grpc_stub.ModelInfer(req)


@pytest.mark.parametrize("version,message", [
    ("abc", "failed to get model version from specified version string 'abc' (details: stol), version should "
            "be an integral value > 0"),
    ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
])
def test_version_string_texts(grpc_stub, version, message):
    req = simple_request()
    req.model_version = version
    expect(grpc_stub, req, "INVALID_ARGUMENT", message)


@pytest.mark.parametrize("name", ["simple", "nope", ""])
def test_statistics_read_the_version_first(grpc_stub, name):
    """ModelStatistics reads the version before it looks the model up, as every other RPC does."""
    with pytest.raises(Exception) as info:
        grpc_stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=name, version="x"))
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT", "failed to get model version from specified version string 'x' (details: stol), "
                            "version should be an integral value > 0")


def test_version_string_read_as_stol(grpc_stub):
    # Triton reads the version with std::stol: leading blanks and a sign pass, trailing text is ignored.
    for version in (" 1", "+1", "1abc"):
        req = simple_request()
        req.model_version = version
        assert grpc_stub.ModelInfer(req, timeout=30).model_name == "simple", version


@pytest.mark.parametrize("key,value,message", [
    ("custom", {"uint64_param": 5},
     "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param."),
    ("priority", {"int64_param": -1}, "invalid value for 'priority', expected value >= 0."),
    ("priority", {"bool_param": True},
     "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
])
def test_request_parameter_texts(grpc_stub, key, value, message):
    req = simple_request()
    req.parameters[key].CopyFrom(service_pb2.InferParameter(**value))
    expect(grpc_stub, req, "INVALID_ARGUMENT", message)


@pytest.mark.parametrize("path", [
    "/inference.GRPCInferenceService/NoSuchMethod",
    "/grpc.health.v1.Health/NoSuchMethod",
    "/no.such.Service/ModelInfer",
])
def test_unknown_methods_and_services_are_unimplemented(grpc_url, path):
    import grpc

    with grpc.insecure_channel(grpc_url) as channel:
        call = channel.unary_unary(path, request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=10)
        assert (info.value.code().name, info.value.details()) == ("UNIMPLEMENTED", "")
        health = channel.unary_unary("/grpc.health.v1.Health/Check",
                                     request_serializer=bytes, response_deserializer=bytes)
        assert health(b"", timeout=10) == b"\x08\x01"  # SERVING
