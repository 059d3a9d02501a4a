"""Model control: load and unload over HTTP and gRPC (explicit model control).

Against Triton the server must run with --model-control-mode=explicit --load-model=*. In front
of an upstream the sidecar does not pass these requests on: they answer UNIMPLEMENTED there
(test_upstream_models_are_not_loaded_or_unloaded_here), and the other tests are skipped.
Each test leaves `simple` loaded with its own configuration.
"""

import base64
import json
import re
import socket
import time

import pytest
from tritonclient.grpc import service_pb2

from support import UPSTREAM, assert_serving, grpc_error, local_models, simple_json_request

POLL_FAILED = "failed to load '{}', failed to poll from model repository"



def load_http(raw_http, model, body=b""):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return raw_http("POST", f"/v2/repository/models/{model}/load", body)


def unload_http(raw_http, model, body=b""):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return raw_http("POST", f"/v2/repository/models/{model}/unload", body)


def index_entry(raw_http, model):
    """The model's index row, once any unloading has finished (Triton unloads in the background)."""
    deadline = time.monotonic() + 20
    while True:
        rows = [r for r in raw_http("POST", "/v2/repository/index").json() if r["name"] == model]
        if not rows or rows[0].get("state") != "UNLOADING" or time.monotonic() > deadline:
            return rows[0] if rows else None
        time.sleep(0.1)


def max_batch_size(raw_http, model="simple"):
    resp = raw_http("GET", f"/v2/models/{model}/config")
    assert resp.status == 200, resp
    return resp.json().get("max_batch_size", 0)


@pytest.fixture
def restore_simple(raw_http):
    """Leaves `simple` loaded from the repository (its own configuration) after the test."""
    yield
    assert unload_http(raw_http, "simple").status == 200
    index_entry(raw_http, "simple")
    resp = load_http(raw_http, "simple")
    assert resp.status == 200, resp
    assert max_batch_size(raw_http) == 8


@local_models
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unload_then_load(raw_http, http_url, grpc_stub, restore_simple, protocol):
    if protocol == "http":
        assert unload_http(raw_http, "simple").status == 200
    else:
        grpc_stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name="simple"))
    assert raw_http("GET", "/v2/models/simple/ready").status == 400
    assert index_entry(raw_http, "simple") == {
        "name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request()))
    assert resp.status == 404, resp
    assert resp.json() == {"error": "Request for unknown model: 'simple' has no available versions"}

    # Unloading what is not loaded, or what the repository does not have, changes nothing.
    assert unload_http(raw_http, "simple").status == 200
    assert unload_http(raw_http, "no_such_model").status == 200
    grpc_stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name="no_such_model"))

    if protocol == "http":
        assert load_http(raw_http, "simple").status == 200
    else:
        grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    assert raw_http("GET", "/v2/models/simple/ready").status == 200
    assert index_entry(raw_http, "simple") == {"name": "simple", "version": "1", "state": "READY"}
    assert_serving(http_url)


def send_head_and_part(http_url, body: bytes, part: int) -> socket.socket:
    """An infer request for `simple` whose body stops after `part` bytes, for now."""
    host, _, port = http_url.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
    sock.sendall((f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:part])
    return sock


def finish_and_read(sock: socket.socket, rest: bytes) -> tuple[int, dict]:
    sock.sendall(rest)
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
            re.search(rb"(?i)content-length:\s*(\d+)", data.partition(b"\r\n\r\n")[0]).group(1)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


@local_models
def test_a_request_whose_model_is_unloaded_while_its_body_arrives_is_answered_as_after_the_unload(
        raw_http, http_url, restore_simple):
    # Triton looks a request's model up once its body is in: unloaded meanwhile, the request
    # gets the answer of a request sent after the unload; loaded again meanwhile, it is served
    # by the new load.
    body = json.dumps(simple_json_request()).encode()
    sock = send_head_and_part(http_url, body, 10)
    time.sleep(0.3)  # the head is read, and the model looked up, by now
    assert unload_http(raw_http, "simple").status == 200
    index_entry(raw_http, "simple")  # unloaded
    status, answer = finish_and_read(sock, body[10:])
    after = raw_http("POST", "/v2/models/simple/infer", body)
    assert after.status != 200, after
    assert (status, answer) == (after.status, after.json())

    sock = send_head_and_part(http_url, body, 10)
    time.sleep(0.3)
    assert load_http(raw_http, "simple").status == 200
    status, answer = finish_and_read(sock, body[10:])
    assert status == 200, answer
    assert [o["name"] for o in answer["outputs"]] == ["OUTPUT0", "OUTPUT1"], answer


@local_models
def test_load_with_a_configuration_and_then_without(raw_http, grpc_stub, restore_simple):
    resp = load_http(raw_http, "simple", {"parameters": {"config": json.dumps({"max_batch_size": 16})}})
    assert resp.status == 200, resp
    assert max_batch_size(raw_http) == 16
    config = grpc_stub.ModelConfig(service_pb2.ModelConfigRequest(name="simple")).config
    assert config.max_batch_size == 16

    # A load without a configuration leaves a loaded model as it is, as Triton does when the
    # model's files have not changed.
    assert load_http(raw_http, "simple").status == 200
    grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    assert max_batch_size(raw_http) == 16

    # Unloaded, then loaded without one: the repository's configuration again.
    assert unload_http(raw_http, "simple").status == 200
    index_entry(raw_http, "simple")
    assert load_http(raw_http, "simple").status == 200
    assert max_batch_size(raw_http) == 8


@local_models
@pytest.mark.parametrize("model", ["simple", "no_such_model"])
def test_load_failures_that_are_failed_polls(raw_http, grpc_stub, model):
    """Triton answers a model it cannot find, and a configuration that does not parse, alike."""
    bodies = [b""] if model == "no_such_model" else []
    bodies += [
        {"parameters": {"config": "{not json"}},
        {"parameters": {"config": '"parameters": {"config": {{"max_batch_size": "16"}}}'}},
    ]
    for body in bodies:
        resp = load_http(raw_http, model, body)
        assert resp.status == 500, (body, resp)
        assert resp.json() == {"error": POLL_FAILED.format(model)}, body
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(
            model_name=model,
            parameters={"config": service_pb2.ModelRepositoryParameter(string_param="{not json")}))
    assert grpc_error(info.value) == ("INTERNAL", POLL_FAILED.format(model))
    assert raw_http("GET", "/v2/models/simple/ready").status == 200


@local_models
@pytest.mark.parametrize("body, message", [
    ({"parameters": {"config": 16}}, "attempt to access JSON non-string as string"),
    ({"parameters": {"config": "{}", "bogus": "x"}}, "unexpected error on creating Triton parameter"),
    ({"parameters": "config"}, "attempt to get members for non-object"),
])
def test_http_load_parameters_must_be_strings_of_known_keys(raw_http, body, message):
    resp = load_http(raw_http, "simple", body)
    assert resp.status == 500, resp
    assert resp.json() == {"error": message}
    assert raw_http("GET", "/v2/models/simple/ready").status == 200


@local_models
@pytest.mark.parametrize("key, param, message", [
    ("bogus", {"string_param": "x"}, "unrecognized load parameter 'bogus'."),
    ("config", {"bool_param": True}, "invalid value type for load parameter 'config', expected string_param."),
    ("file:1/model.py", {"string_param": "x"},
     "invalid value type for load parameter 'file:1/model.py', expected bytes_param."),
])
def test_grpc_load_parameters_of_the_wrong_kind(grpc_stub, raw_http, key, param, message):
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(
            model_name="simple", parameters={key: service_pb2.ModelRepositoryParameter(**param)}))
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", message)
    assert raw_http("GET", "/v2/models/simple/ready").status == 200


@local_models
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_file_overrides_fail_the_load(raw_http, grpc_stub, protocol):
    """Model files sent with a load (no configuration beside them) fail as a failed poll in
    Triton; the sidecar, which cannot load model files, answers the same way for any."""
    content = b"not a model"
    if protocol == "http":
        body = {"parameters": {"file:1/model.py": base64.b64encode(content).decode()}}
        resp = load_http(raw_http, "simple", body)
        assert resp.status == 500, resp
        code, message = "INTERNAL", resp.json()["error"]
    else:
        with pytest.raises(Exception) as info:
            grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(
                model_name="simple",
                parameters={"file:1/model.py": service_pb2.ModelRepositoryParameter(bytes_param=content)}))
        code, message = grpc_error(info.value)
    assert code == "INTERNAL" and message.startswith(POLL_FAILED.format("simple")), (code, message)
    assert raw_http("GET", "/v2/models/simple/ready").status == 200


@local_models
@pytest.mark.triton251_differs("2.51 aborts on a file name longer than NAME_MAX", run=False)
def test_a_file_name_longer_than_name_max_fails_the_load(raw_http, grpc_stub):
    """Triton's own model-control client example sends one; the server must go on serving."""
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(
            model_name="simple",
            parameters={"config": service_pb2.ModelRepositoryParameter(string_param="{}"),
                        "file:" + "A" * 256: service_pb2.ModelRepositoryParameter(bytes_param=b"a")}))
    code, message = grpc_error(info.value)
    assert code == "INTERNAL" and "failed to poll from model repository" in message, (code, message)
    assert raw_http("GET", "/v2/health/live").status == 200
    assert raw_http("GET", "/v2/models/simple/ready").status == 200


@local_models
@pytest.mark.triton251_differs("2.51 looks the name up in the repository first (a failed poll)")
@pytest.mark.parametrize("name, message", [
    ("", "Model name cannot be empty. Please enter a valid name to deploy."),
    ("  ", "Model name cannot be empty. Please enter a valid name to deploy."),
    ("..", "invalid model name '..', model name must not contain path traversal characters"),
    ("a/b", "invalid model name 'a/b', model name must not contain path traversal characters"),
])
def test_load_refuses_names_that_are_not_model_names(grpc_stub, name, message):
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name=name))
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", message)


@local_models
def test_unload_dependents(raw_http, grpc_stub, restore_simple):
    # Over HTTP a value that is not a boolean does not fail the call (Triton reads it and then
    # overwrites its error); the model is unloaded.
    resp = unload_http(raw_http, "simple", {"parameters": {"unload_dependents": "yes"}})
    assert resp.status == 200, resp
    assert raw_http("GET", "/v2/models/simple/ready").status == 400
    assert load_http(raw_http, "simple").status == 200
    assert unload_http(raw_http, "simple", {"parameters": {"unload_dependents": True}}).status == 200
    assert raw_http("GET", "/v2/models/simple/ready").status == 400
    assert load_http(raw_http, "simple").status == 200
    # gRPC checks the kind of the parameter, and unloads nothing when it is wrong.
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(
            model_name="simple",
            parameters={"unload_dependents": service_pb2.ModelRepositoryParameter(string_param="yes")}))
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT", "invalid value type for 'unload_dependents' parameter, expected bool_param.")
    assert raw_http("GET", "/v2/models/simple/ready").status == 200
    grpc_stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(
        model_name="simple",
        parameters={"unload_dependents": service_pb2.ModelRepositoryParameter(bool_param=True)}))
    assert raw_http("GET", "/v2/models/simple/ready").status == 400


@pytest.mark.skipif(not UPSTREAM, reason="the sidecar in front of an upstream only")
def test_upstream_models_are_not_loaded_or_unloaded_here(raw_http, grpc_stub):
    message = "'simple' is served by the upstream model server; load and unload it there"
    for action in (load_http, unload_http):
        resp = action(raw_http, "simple")
        assert resp.status == 501, resp
        assert resp.json() == {"error": message}
    for call, request in ((grpc_stub.RepositoryModelLoad, service_pb2.RepositoryModelLoadRequest),
                          (grpc_stub.RepositoryModelUnload, service_pb2.RepositoryModelUnloadRequest)):
        with pytest.raises(Exception) as info:
            call(request(model_name="simple"))
        assert grpc_error(info.value) == ("UNIMPLEMENTED", message)
    assert raw_http("GET", "/v2/models/simple/ready").status == 200
