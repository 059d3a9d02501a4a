"""The sidecar's admin status in front of MLServer (run by tests/upstream/run-mlserver.sh).

MLServer lists no protocol extensions and has no shared memory, so everything beyond plain
inference is the sidecar's own work; the status must say so, and name MLServer as the backend.

Environment:
  INFERGATE_ADMIN_URL          host:port of the sidecar's admin endpoint (GET /status)
  INFERGATE_MLSERVER_HTTP_URL  host:port of MLServer's own HTTP endpoint (its server metadata
                               is the reference for the backend identity)
"""

import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_repo import catalog  # noqa: E402  (the 23 model names the sidecar is configured with)

SEQUENCE_MODELS = sorted(n for n, (_, c) in catalog().items() if "sequence_batching" in c)


def _get(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        assert response.status == 200
        return json.load(response)


def _env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.skip(f"{name} is not set")
    return value.removeprefix("http://").rstrip("/")


@pytest.fixture(scope="module")
def status() -> dict:
    return _get(_env("INFERGATE_ADMIN_URL"), "/status")


@pytest.fixture(scope="module")
def extensions(status) -> dict:
    return {e["name"]: e for e in status["extensions"]}


def test_backend_is_mlserver(status):
    backend = status["backend"]
    assert backend["kind"] == "upstream"
    assert backend["url"].startswith("grpc://127.0.0.1:")
    assert backend["reachable"] is True
    assert backend["server"]["name"] == "mlserver"
    assert backend["server"]["version"]
    # MLServer announces no protocol extensions.
    assert backend["extensions"] == []
    assert sorted(backend["models"]) == sorted(catalog())


def test_backend_identity_is_mlservers_own():
    """The name and version the sidecar reports are those MLServer gives in its metadata."""
    own = _get(_env("INFERGATE_MLSERVER_HTTP_URL"), "/v2")
    backend = _get(_env("INFERGATE_ADMIN_URL"), "/status")["backend"]
    assert backend["server"] == {"name": own["name"], "version": own["version"]}
    assert backend["extensions"] == own["extensions"]


@pytest.mark.parametrize(
    "name", ["binary_tensor_data", "classification", "sequence", "system_shared_memory"]
)
def test_extension_done_by_the_sidecar(extensions, name):
    assert extensions[name]["state"] == "Active", extensions[name]
    assert extensions[name]["implementation"] == "sidecar", extensions[name]


def test_sequences_are_scheduled_by_the_sidecar(extensions):
    """`sequence: sidecar`: the sidecar batches sequences and adds the control tensors."""
    reason = extensions["sequence"]["reason"]
    assert "scheduled by the sidecar" in reason, reason
    for model in SEQUENCE_MODELS:
        assert model in reason, reason


def test_configuration_is_the_sidecars(extensions):
    """MLServer has no configuration endpoint: the sidecar serves the configurations."""
    assert extensions["model_configuration"]["state"] == "Active"
    assert extensions["model_configuration"]["implementation"] == "sidecar"


def test_repository_is_index_only(extensions):
    """Models are loaded and unloaded in MLServer itself, not through the sidecar."""
    assert extensions["model_repository"]["state"] == "Degraded"
    assert extensions["model_repository"]["implementation"] == "sidecar"


def test_no_staging_pool(status):
    """staging_shm_bytes: 0 in the sidecar configuration (MLServer has no shared memory)."""
    pool = status["shm"]["staging_pool"]
    assert pool["state"] == "Disabled", pool
    assert "staging_shm_bytes is 0" in pool["reason"], pool
    assert pool["byte_size"] == 0 and pool["in_use_bytes"] == 0, pool
    assert status["shm"]["shared_with_upstream"] is None, status["shm"]


def test_schedule_policy_is_unsupported_by_the_model_server(extensions):
    """MLServer lists no schedule_policy: `priority` and `timeout` reach it as plain parameters,
    and `/v2` leaves the extension out."""
    policy = extensions["schedule_policy"]
    assert policy["state"] == "Unsupported", policy
    assert policy["implementation"] == "sidecar", policy
    assert "does not offer schedule_policy" in policy["reason"], policy
