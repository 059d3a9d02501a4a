"""Repository index and logging settings (HTTP + gRPC)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from tritonclient.grpc import service_pb2

from support import MODELS, own_sidecars

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from ports import free_ports  # noqa: E402


def test_repository_index(raw_http):
    for body in (b"", b"{}", b'{"ready":true}', b'{"ready":false}'):
        resp = raw_http("POST", "/v2/repository/index", body)
        assert resp.status == 200, (body, resp)
        assert resp.headers.get("content-type") == "application/json"
        index = resp.json()
        assert isinstance(index, list)
        by_name = {e["name"]: e for e in index}
        for name in MODELS:
            assert by_name[name] == {"name": name, "version": "1", "state": "READY"}, by_name.get(name)
        for e in index:
            assert set(e) <= {"name", "version", "state", "reason"}


def test_repository_index_client(http_client, grpc_client):
    names = {e["name"] for e in http_client.get_model_repository_index()}
    assert names >= set(MODELS)
    grpc_index = grpc_client.get_model_repository_index()
    entries = {m.name: m for m in grpc_index.models}
    for name in MODELS:
        assert entries[name].version == "1"
        assert entries[name].state == "READY"


@pytest.mark.triton251_differs(
    "NOT in TRITON.md §12: 2.51 answers 500 'attempt to access JSON non-boolean as boolean'")
def test_repository_index_ready_not_bool(raw_http):
    resp = raw_http("POST", "/v2/repository/index", b'{"ready":"yes"}')
    assert resp.status == 400, resp
    assert resp.json() == {"error": "Invalid value for 'ready': expected a boolean"}


def test_repository_index_grpc_repository_name(grpc_stub):
    with pytest.raises(Exception) as info:
        grpc_stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="x"))
    assert info.value.code().name == "UNIMPLEMENTED"
    assert info.value.details() == "'repository_name' specification is not supported"


# --------------------------------------------------------------------------- logging
LOG_KEYS = {"log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format"}


def test_logging_get(raw_http):
    resp = raw_http("GET", "/v2/logging")
    assert resp.status == 200, resp
    doc = resp.json()
    assert set(doc) == LOG_KEYS
    assert isinstance(doc["log_info"], bool) and isinstance(doc["log_warning"], bool)
    assert isinstance(doc["log_error"], bool)
    assert type(doc["log_verbose_level"]) is int and doc["log_verbose_level"] >= 0
    assert doc["log_format"] in ("default", "ISO8601")
    assert isinstance(doc["log_file"], str)


def test_logging_update(raw_http):
    original = raw_http("GET", "/v2/logging").json()
    try:
        resp = raw_http("POST", "/v2/logging", json.dumps({"log_verbose_level": 1, "log_info": False}))
        assert resp.status == 200, resp
        doc = resp.json()
        assert doc["log_verbose_level"] == 1 and doc["log_info"] is False
        again = raw_http("GET", "/v2/logging").json()
        assert again["log_verbose_level"] == 1 and again["log_info"] is False
        assert again["log_warning"] == original["log_warning"]
    finally:
        restore = {k: original[k] for k in ("log_verbose_level", "log_info")}
        resp = raw_http("POST", "/v2/logging", json.dumps(restore))
        assert resp.status == 200, resp
    assert raw_http("GET", "/v2/logging").json() == original


def test_logging_file_not_settable(raw_http):
    resp = raw_http("POST", "/v2/logging", json.dumps({"log_file": "x.log"}))
    assert resp.status == 501, resp
    assert resp.json() == {"error": "log file location can not be updated through network protocol"}


def test_logging_wrong_type(raw_http):
    before = raw_http("GET", "/v2/logging").json()
    resp = raw_http("POST", "/v2/logging", json.dumps({"log_info": "yes"}))
    assert resp.status == 500, resp
    assert resp.json() == {"error": "attempt to access JSON non-boolean as boolean"}
    resp = raw_http("POST", "/v2/logging", json.dumps({"log_verbose_level": -1}))
    assert resp.status == 500, resp
    assert resp.json() == {"error": "attempt to access JSON non-unsigned-integer as unsigned-integer"}
    assert raw_http("GET", "/v2/logging").json() == before


def test_logging_grpc(grpc_client):
    settings = grpc_client.get_log_settings(as_json=True)["settings"]
    assert set(settings) == LOG_KEYS
    original = settings["log_verbose_level"]["uint32_param"] if "uint32_param" in settings["log_verbose_level"] else 0
    try:
        updated = grpc_client.update_log_settings({"log_verbose_level": 2}, as_json=True)["settings"]
        assert updated["log_verbose_level"]["uint32_param"] == 2
        assert grpc_client.get_log_settings().settings["log_verbose_level"].uint32_param == 2
    finally:
        grpc_client.update_log_settings({"log_verbose_level": original})
    assert grpc_client.get_log_settings().settings["log_verbose_level"].uint32_param == original


@pytest.fixture
def restore_logging(raw_http):
    before = raw_http("GET", "/v2/logging").json()
    yield before
    restore = {k: v for k, v in before.items() if k != "log_file"}
    assert raw_http("POST", "/v2/logging", json.dumps(restore)).status == 200
    assert raw_http("GET", "/v2/logging").json() == before


@pytest.mark.parametrize("body", [b'{"no_such_setting":1}', b"[]", b"null", b'{"log_info":null}',
                                  b'{"log_file":null}'])
def test_logging_ignores_what_it_does_not_know(raw_http, restore_logging, body):
    # Triton looks up each setting it knows by name: anything else, and nulls, change nothing.
    resp = raw_http("POST", "/v2/logging", body)
    assert resp.status == 200, resp
    assert resp.json() == restore_logging


def test_logging_settings_before_an_invalid_one_stay(raw_http, restore_logging):
    # Triton applies log_warning before it reads log_format, whatever the order in the body.
    flipped = not restore_logging["log_warning"]
    resp = raw_http("POST", "/v2/logging", json.dumps({"log_format": "xml", "log_warning": flipped}))
    assert resp.status == 503, resp
    assert resp.json() == {"error": "invalid argument for --log_format, got: xml"}
    assert raw_http("GET", "/v2/logging").json()["log_warning"] is flipped


@pytest.mark.parametrize("key,value,message", [
    ("log_info", {"uint32_param": 1}, "expect boolean for 'log_info'"),
    ("log_verbose_level", {"bool_param": True}, "expect int32 for 'log_verbose_level'"),
    ("log_format", {"uint32_param": 3}, "expect string for 'log_format'"),
    ("log_format", {"string_param": "xml"}, "invalid argument for log_format, got: xml"),
    ("log_error", {}, "expect boolean for 'log_error'"),
])
def test_logging_grpc_invalid(grpc_stub, raw_http, restore_logging, key, value, message):
    req = service_pb2.LogSettingsRequest()
    req.settings[key].CopyFrom(service_pb2.LogSettingsRequest.SettingValue(**value))
    req.settings["no_such_setting"].bool_param = True
    with pytest.raises(Exception) as info:
        grpc_stub.LogSettings(req)
    assert (info.value.code().name, info.value.details()) == ("INVALID_ARGUMENT", message)


# --------------------------------------------------------------------------- Triton's log lines
# The two layouts as Triton's own QA reads them (qa/L0_logging/log_format_test.py).
DEFAULT_LINE = re.compile(r"(?P<level>[EWI])(?P<month>\d{2})(?P<day>\d{2}) "
                          r"(?P<time>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>\d+) (?P<file>[\w\.]+):"
                          r"(?P<line>\d+)] (?P<message>.*)")
# A table's lines: its borders, its rows, and the blank line after it.
TABLE_LINE = re.compile(r"\+[-+]+\+|\| .* \||")
ISO8601_LINE = re.compile(r"(?P<timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<level>[EWI]) "
                          r"(?P<pid>\d+) (?P<file>.+):(?P<line>\d+)] (?P<message>.*)")


@own_sidecars
def test_log_lines_follow_the_log_format_setting(tmp_path):
    """Started with Triton's `--log-format default`, lines are in Triton's default layout with
    the message as a JSON string; `log_format` set to ISO8601 switches the lines that follow."""
    import conftest

    server = conftest._start_sidecar(tmp_path, extra_args=["--log-format", "default"])
    http = f"http://{server.http}"
    try:
        assert requests.get(f"{http}/v2/logging", timeout=10).json()["log_format"] == "default"
        assert requests.post(f"{http}/v2/repository/models/simple/unload", timeout=10).status_code == 200
        changed = requests.post(f"{http}/v2/logging", json={"log_format": "ISO8601"}, timeout=10)
        assert changed.json()["log_format"] == "ISO8601"
        assert requests.post(f"{http}/v2/repository/models/simple/load", timeout=10).status_code == 200
    finally:
        conftest._stop(server.process)
    lines = server.log_path.read_text().splitlines()
    split = next(i for i, line in enumerate(lines) if "log settings changed" in line)
    before, after = lines[:split], lines[split:]
    # Triton's start tables follow a line's header, as its table printer draws them (the
    # record's message is empty, then the table, then a blank line).
    tables = [line for line in before if TABLE_LINE.fullmatch(line)]
    for line in before:
        if line in tables:
            continue
        m = DEFAULT_LINE.fullmatch(line)
        assert m, line
        assert int(m["pid"]) == server.process.pid
    assert any(re.fullmatch(r"\| Model +\| Version +\| Status +\|", line) for line in tables), tables
    assert any(re.fullmatch(r"\| simple +\| 1 +\| READY +\|", line) for line in tables), tables
    assert any(re.fullmatch(r"\| model_control_mode +\| MODE_EXPLICIT +\|", line) for line in tables), tables
    serving = next(line for line in before if "is serving" in line)
    # The message is one JSON string, the line's fields inside it (as Triton's parser reads it).
    message = json.loads(DEFAULT_LINE.fullmatch(serving)["message"])
    assert message.startswith("infergate-sidecar is serving http_addr="), message
    assert any(line.endswith('''] "successfully loaded 'simple'"''') for line in before), before
    assert any(line.endswith('''] "successfully unloaded 'simple' version 1"''') for line in before), before
    for line in after:
        assert ISO8601_LINE.fullmatch(line), line
    assert any(line.endswith('''] "successfully loaded 'simple'"''') for line in after), after


@own_sidecars
def test_tritons_log_flags_set_the_start_settings_and_write_the_log_file(tmp_path):
    """Triton's start flags `--log-file`, `--log-verbose`, `--log-info`, as its QA's L0_logging
    test.sh uses them: the settings report them, the lines go to the file (appended) and not to
    stderr, each HTTP request is a verbose line while verbose logging is on, info lines follow
    `log_info`, and a stop is logged with Triton's words."""
    import conftest

    log_file = tmp_path / "log_file.log"
    log_file.write_text("an earlier line\n")
    http_port, grpc_port, metrics_port = free_ports(3)
    binary = os.environ.get("INFERGATE_SIDECAR_BIN", str(conftest.DEFAULT_SIDECAR_BIN))
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--http-port", str(http_port),
             "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
             "--admin-port", "0", "--log-format", "default", f"--log-file={log_file}",
             "--log-verbose=1", "--log-info=false"],
            stdout=stderr, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    http = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                if requests.get(f"{http}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None and time.time() < deadline, stderr_path.read_text()
            time.sleep(0.1)
        settings = requests.get(f"{http}/v2/logging", timeout=10).json()
        assert settings == {"log_file": str(log_file), "log_info": False, "log_warning": True,
                            "log_error": True, "log_verbose_level": 1, "log_format": "default"}
        requests.get(f"{http}/v2/logging", timeout=10)
        lines = log_file.read_text().splitlines()
        assert lines[0] == "an earlier line"
        assert sum("/v2/logging" in line for line in lines) == 2, lines
        # Info lines are off: Triton's start lines are not there.
        assert not any("Started HTTPService at" in line for line in lines), lines
        # A failed inference is a verbose line naming the request and the error's code; the
        # client's id cannot start a line of its own.
        forged = 'I0205 18:34:18.707423 1 file.cc:123] "forged"'
        refused = requests.post(f"{http}/v2/models/simple/infer", timeout=10,
                                json={"id": f"x\n{forged}", "inputs": []})
        assert refused.status_code == 400, refused.text
        lines = log_file.read_text().splitlines()
        assert forged not in lines, lines
        failed = [json.loads(DEFAULT_LINE.fullmatch(line)["message"]) for line in lines
                  if "Infer failed" in line]
        assert failed == [f"[request id: x\\n{forged}] Infer failed: Invalid argument"], failed
        changed = requests.post(f"{http}/v2/logging",
                                json={"log_verbose_level": 0, "log_info": True}, timeout=10)
        assert changed.status_code == 200, changed.text
        requests.get(f"{http}/v2/logging", timeout=10)
        assert sum("/v2/logging" in line for line in log_file.read_text().splitlines()) == 3
    finally:
        conftest._stop(proc)
    lines = log_file.read_text().splitlines()
    for line in lines[1:]:
        assert DEFAULT_LINE.fullmatch(line), line
    assert sum("Waiting for in-flight requests to complete." in line for line in lines) == 1, lines
    assert stderr_path.read_text() == ""


@own_sidecars
def test_the_start_lines_name_tritons_services(tmp_path):
    """The lines scripts wait for in Triton's log, with the addresses bound."""
    import conftest

    server = conftest._start_sidecar(tmp_path, extra_args=["--log-format", "default"])
    conftest._stop(server.process)
    text = server.log_path.read_text()
    for service, addr in [("GRPCInferenceService", server.grpc), ("HTTPService", server.http)]:
        assert re.search(rf'"Started {service} at [^"]*:{addr.rsplit(":", 1)[1]}"', text), text
    assert '"Started Metrics Service at ' in text
