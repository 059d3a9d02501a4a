"""Triton's restricted APIs and protocols: `--http-restricted-api=<apis>:<key>=<value>` and
`--grpc-restricted-protocol=<protocols>:<key>=<value>`. A request to a restricted category
without the header `<key>: <value>` is refused: REST 403 {"error":"This API is restricted,
expecting header '<key>'"}, before the method is looked at; gRPC UNAVAILABLE "This protocol is
restricted, expecting header 'triton-grpc-protocol-<key>'" (a stream ends with it at once). The
settings are the ones Triton's L0_http and L0_grpc `test.sh` start Triton with, in its default
model control mode (`none`), so an allowed unload gets Triton's polling answer. A bad setting stops
the server with Triton's words. Sidecar-specific setup: the test starts its own sidecar, so it is
skipped when the suite is pointed at a running server."""

import json
import os
import queue
import subprocess
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import conftest
from support import own_sidecars

pytestmark = own_sidecars

PREFIX = "triton-grpc-protocol-"
FLAGS = [
    "--http-restricted-api=model-repository:admin-key=admin-value",
    "--http-restricted-api=inference,metadata:infer-key=infer-value",
    "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
    "--grpc-restricted-protocol=inference,health:infer-key=infer-value",
]
POLLING = "explicit model load / unload is not allowed if polling is enabled"


def api_refusal(key):
    return {"error": f"This API is restricted, expecting header '{key}'"}


def protocol_refusal(key):
    return f"This protocol is restricted, expecting header '{PREFIX}{key}'"


@pytest.fixture(scope="module")
def restricted(tmp_path_factory):
    server = conftest._start_sidecar(tmp_path_factory.mktemp("restricted"), model_control=None,
                                     extra_args=FLAGS)
    yield server
    conftest._stop(server.process)


def simple_inputs(module):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.ones(shape=(1, 16), dtype=np.int32))
    return inputs


# ----------------------------------------------------------------------------------------- REST

def test_http_unrestricted_apis_are_served(restricted):
    client = httpclient.InferenceServerClient(restricted.http)
    client.get_inference_statistics("simple")
    client.get_inference_statistics("simple", headers={"infer-key": "infer-value"})
    assert client.is_server_live()
    assert client.get_model_config("simple")["name"] == "simple"


def test_http_metadata(restricted):
    base = f"http://{restricted.http}"
    for path in ["/v2", "/v2/models/simple", "/v2/models/simple/versions/1"]:
        r = requests.get(base + path, timeout=10)
        assert (r.status_code, r.json()) == (403, api_refusal("infer-key")), path
        r = requests.get(base + path, headers={"infer-key": "infer-value"}, timeout=10)
        assert r.status_code == 200, (path, r.text)
    r = requests.get(base + "/v2", headers={"Infer-Key": "infer-value"}, timeout=10)
    assert r.status_code == 200, "header names are matched without regard to case"
    r = requests.get(base + "/v2", headers={"infer-key": "INFER-VALUE"}, timeout=10)
    assert r.status_code == 403, "values are matched exactly"


def test_http_infer(restricted):
    client = httpclient.InferenceServerClient(restricted.http)
    with pytest.raises(InferenceServerException, match="This API is restricted") as e:
        client.infer("simple", simple_inputs(httpclient), headers={"test": "1"})
    assert e.value.status() == "403"
    result = client.infer("simple", simple_inputs(httpclient), headers={"infer-key": "infer-value"})
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_http_model_repository(restricted):
    client = httpclient.InferenceServerClient(restricted.http)
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("simple", headers={"infer-key": "infer-value"})
    assert e.value.message() == api_refusal("admin-key")["error"]
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("simple", headers={"admin-key": "admin-value"})
    assert e.value.message() == POLLING
    r = requests.post(f"http://{restricted.http}/v2/repository/index", timeout=10)
    assert (r.status_code, r.json()) == (403, api_refusal("admin-key"))


def test_http_restriction_comes_before_the_method(restricted):
    url = f"http://{restricted.http}/v2/models/simple/infer"
    r = requests.get(url, timeout=10)
    assert (r.status_code, r.json()) == (403, api_refusal("infer-key"))
    r = requests.get(url, headers={"infer-key": "infer-value"}, timeout=10)
    assert (r.status_code, r.json()) == (405, {"error": "Method Not Allowed"})
    r = requests.get(f"http://{restricted.http}/v2/models/simple/nothing", timeout=10)
    assert (r.status_code, r.json()) == (404, {"error": "Not Found"})


def audit_lines(server, mark: str, want: int = 1) -> list[dict]:
    """The audit lines (JSON) the sidecar wrote for calls carrying `mark` in their name, once
    there are `want` of them (the log is read as it is written) or after 5 s."""
    deadline = time.monotonic() + 5
    while True:
        lines = []
        for line in list(server.log_lines):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("target") == "audit" and mark in doc.get("call", ""):
                lines.append(doc)
        if len(lines) >= want or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_control_calls_leave_an_audit_line_with_the_key_name_never_its_value(restricted):
    """A refused and an allowed call to a guarded control API over each protocol: the caller,
    the name of the key's header (the credential asked for), the verdict; the key's value never.
    Unguarded control APIs and other APIs leave none."""
    base = f"http://{restricted.http}"
    requests.post(f"{base}/v2/repository/models/audit_http/unload", timeout=10)
    requests.post(f"{base}/v2/repository/models/audit_http/unload",
                  headers={"admin-key": "admin-value"}, timeout=10)
    [refused, allowed] = audit_lines(restricted, "audit_http", want=2)
    for line, verdict in ((refused, False), (allowed, True)):
        assert line["protocol"] == "http" and line["api"] == "model-repository", line
        assert line["call"] == "POST /v2/repository/models/audit_http/unload", line
        assert line["credential"] == "key admin-key" and line["allowed"] is verdict, line
        assert line["caller"].startswith("127.0.0.1:"), line
        assert "admin-value" not in json.dumps(line)
    assert (refused["level"], refused["message"]) == ("WARN", "control call refused")
    assert (allowed["level"], allowed["message"]) == ("INFO", "control call")
    # The logging API is a control API no key guards here: no audit line, so the log stays
    # Triton's line for line (its L0_logging counts the lines naming /v2/logging).
    requests.get(f"{base}/v2/logging", timeout=10)
    assert not audit_lines(restricted, "/v2/logging")

    client = grpcclient.InferenceServerClient(restricted.grpc)
    with pytest.raises(InferenceServerException):
        client.unload_model("audit_grpc")
    [grpc_line] = audit_lines(restricted, "RepositoryModelUnload")
    assert grpc_line["call"] == "/inference.GRPCInferenceService/RepositoryModelUnload"
    assert grpc_line["credential"] == f"key {PREFIX}admin-key" and grpc_line["allowed"] is False
    # Inference is no control API.
    requests.post(f"{base}/v2/models/simple/infer", headers={"infer-key": "infer-value"},
                  json={"inputs": []}, timeout=10)
    assert not audit_lines(restricted, "/v2/models/simple/infer")


# ----------------------------------------------------------------------------------------- gRPC

def test_grpc_unrestricted_protocols_are_served(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc)
    client.get_inference_statistics("simple")
    client.get_inference_statistics("simple", headers={PREFIX + "infer-key": "infer-value"})
    assert client.get_server_metadata().name == "triton"


def test_grpc_health(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc)
    for call in [client.is_server_live, client.is_server_ready,
                 lambda **kw: client.is_model_ready("simple", **kw)]:
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert e.value.message() == protocol_refusal("infer-key")
        with pytest.raises(InferenceServerException):
            call(headers={"infer-key": "infer-value"})  # the key without its prefix
        assert call(headers={PREFIX + "infer-key": "infer-value"})


def test_grpc_infer(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc)
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", simple_inputs(grpcclient), headers={"test": "1"})
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert e.value.message() == protocol_refusal("infer-key")
    result = client.infer("simple", simple_inputs(grpcclient),
                          headers={PREFIX + "infer-key": "infer-value"})
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_grpc_model_repository(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc)
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("simple", headers={PREFIX + "infer-key": "infer-value"})
    assert e.value.message() == protocol_refusal("admin-key")
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("simple", headers={PREFIX + "admin-key": "admin-value"})
    assert e.value.message() == POLLING


def test_grpc_stream_is_ended_at_once(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc)
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        headers={"test": "1"})
    try:
        first = results.get(timeout=10)  # before any request is sent
        assert first[0] is None
        assert first[1].status() == "StatusCode.UNAVAILABLE"
        assert protocol_refusal("infer-key") in first[1].message()
        time.sleep(0.2)
        with pytest.raises(InferenceServerException, match="no longer in valid state"):
            client.async_stream_infer("simple", simple_inputs(grpcclient))
    finally:
        client.stop_stream()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        headers={PREFIX + "infer-key": "infer-value"})
    try:
        client.async_stream_infer("simple", simple_inputs(grpcclient))
        result, error = results.get(timeout=10)
        assert error is None
        assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]
    finally:
        client.stop_stream()


# ------------------------------------------------------------------------------------- settings

def sidecar_exit(*flags):
    binary = os.environ.get("INFERGATE_SIDECAR_BIN", str(conftest.DEFAULT_SIDECAR_BIN))
    done = subprocess.run([binary, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                           "--admin-port", "0", *flags],
                          capture_output=True, text=True, timeout=30)
    return done.returncode, done.stderr


@pytest.mark.parametrize("flags, message", [
    (["--http-restricted-api=model-repository,health:k1=v1",
      "--http-restricted-api=metadata,health:k2=v2"],
     "restricted api 'health' can not be specified in multiple config groups"),
    (["--http-restricted-api=model-reposit,health:k1=v1",
      "--http-restricted-api=metadata,health:k2=v2"],
     "unknown restricted api 'model-reposit'"),
    (["--grpc-restricted-protocol=inference:key"],
     "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. "
     "Got inference:key"),
    (["--grpc-restricted-protocol=health,infer:k=v"], "unknown restricted protocol 'infer'"),
], ids=["twice", "unknown-api", "format", "unknown-protocol"])
def test_a_bad_setting_stops_the_server(flags, message):
    code, stderr = sidecar_exit(*flags)
    assert code == 2, stderr
    assert message in stderr


# ------------------------------------------------------------------------------------ key files

def test_keys_read_from_files_change_without_a_restart(tmp_path):
    """`--http-restricted-api-file` and `--grpc-restricted-protocol-file`: the key is a file's
    content (a mounted Secret), read again every `server.key_reload_seconds`. After the file
    changes the new key is served and the old one refused, by the same process; a file that
    stops reading leaves the last key in force."""
    http_key, grpc_key = tmp_path / "http-key", tmp_path / "grpc-key"
    http_key.write_text("first-http\n")
    grpc_key.write_text("first-grpc\n")
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  key_reload_seconds: 1\n")
    server = conftest._start_sidecar(tmp_path, model_control=None, extra_args=[
        "--config", str(config),
        f"--http-restricted-api-file=logging,model-repository:admin-key={http_key}",
        f"--grpc-restricted-protocol-file=model-repository:admin-key={grpc_key}"])
    try:
        base = f"http://{server.http}"

        def logging(key):
            headers = {"admin-key": key} if key is not None else {}
            return requests.get(f"{base}/v2/logging", headers=headers, timeout=10).status_code

        def grpc_index(key):
            client = grpcclient.InferenceServerClient(server.grpc)
            try:
                client.get_model_repository_index(headers={f"{PREFIX}admin-key": key})
                return "served"
            except InferenceServerException as e:
                return e.status()

        assert (logging(None), logging("first-http"), logging("first-httpx")) == (403, 200, 403)
        assert grpc_index("first-grpc") == "served"
        assert grpc_index("first-http") == "StatusCode.UNAVAILABLE"

        # As the kubelet updates a mounted Secret: the file replaced under the same name.
        for path, key in ((http_key, "second-http"), (grpc_key, "second-grpc")):
            path.with_suffix(".new").write_text(key)
            path.with_suffix(".new").rename(path)
        deadline = time.monotonic() + 10
        while logging("second-http") != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (logging("second-http"), logging("first-http")) == (200, 403)
        deadline = time.monotonic() + 10
        while grpc_index("second-grpc") != "served" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert grpc_index("first-grpc") == "StatusCode.UNAVAILABLE"

        # A file that no longer reads: the last key stays, nobody gets in without it.
        http_key.unlink()
        time.sleep(2.5)
        assert (logging("second-http"), logging(None)) == (200, 403)
        assert server.process.poll() is None
        log = "\n".join(server.log_lines)
        for secret in ("first-http", "second-http", "first-grpc", "second-grpc"):
            assert secret not in log, secret
    finally:
        conftest._stop(server.process)


@pytest.mark.parametrize("content, message", [
    (None, "key file"),
    ("\n", "is empty"),
], ids=["missing", "empty"])
def test_a_key_file_that_holds_no_key_stops_the_server(tmp_path, content, message):
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    code, stderr = sidecar_exit(f"--http-restricted-api-file=logging:admin-key={path}")
    assert code != 0, stderr
    assert message in stderr, stderr
