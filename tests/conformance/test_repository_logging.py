"""Repository index and logging settings (HTTP + gRPC)."""

import json

import pytest
from tritonclient.grpc import service_pb2

from support import MODELS


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
