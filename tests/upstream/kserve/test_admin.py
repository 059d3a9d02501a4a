"""The sidecar's admin status in front of KServe's ModelServer (run by run-kserve.sh).

What the sidecar says it does for this upstream, read from `GET /status` on its admin port:
the protocol extensions the ModelServer lacks (binary tensor data, classification, sequence
batching, system shared memory) are implemented by the sidecar itself, and the backend it
reports is the ModelServer, with the ModelServer's own identity, extensions and models.

Environment: INFERGATE_ADMIN_URL (host:port of the sidecar's admin endpoint); optionally
INFERGATE_KSERVE_GRPC_URL (host:port of the ModelServer's gRPC) and INFERGATE_KSERVE_VERSION
(the installed kserve version), which run-kserve.sh sets.
"""

import os
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contracts  # noqa: E402  (tests/upstream/contracts.py)

ADMIN = os.environ.get("INFERGATE_ADMIN_URL", "")
SEQUENCE_MODELS = [name for name, c in contracts.configs().items() if "sequence_batching" in c]

pytestmark = pytest.mark.skipif(not ADMIN, reason="INFERGATE_ADMIN_URL is not set")


@pytest.fixture(scope="module")
def status():
    response = requests.get(f"http://{ADMIN}/status", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def extensions(status):
    by_name = {e["name"]: e for e in status["extensions"]}
    assert len(by_name) == len(status["extensions"]), "an extension is listed twice"
    for entry in status["extensions"]:
        assert set(entry) == {"name", "state", "implementation", "reason"}, entry
    return by_name


def test_ready_in_front_of_a_reachable_upstream(status):
    assert status["ready"] is True
    assert status["backend"]["kind"] == "upstream"
    assert status["backend"]["reachable"] is True
    grpc_url = os.environ.get("INFERGATE_KSERVE_GRPC_URL")
    if grpc_url:
        assert status["backend"]["url"] == f"grpc://{grpc_url}"


def test_backend_identity_is_the_model_servers(status):
    # The ModelServer's ServerMetadata: name "kserve", its package version, and the one
    # extension it declares.
    backend = status["backend"]
    assert backend["server"]["name"] == "kserve"
    version = os.environ.get("INFERGATE_KSERVE_VERSION")
    if version:
        assert backend["server"]["version"] == version
    else:
        assert backend["server"]["version"]
    assert backend["extensions"] == ["model_repository_extension"]
    # The sidecar keeps its own identity toward clients.
    assert status["server"]["name"] != "kserve"


def test_backend_models_are_the_configured_contracts(status):
    assert sorted(status["backend"]["models"]) == sorted(contracts.configs())


@pytest.mark.parametrize(
    "name", ["binary_tensor_data", "classification", "system_shared_memory"]
)
def test_extension_implemented_by_the_sidecar(extensions, name):
    # None of these is in the ModelServer's extension list: the sidecar does them all.
    assert extensions[name]["state"] == "Active", extensions[name]
    assert extensions[name]["implementation"] == "sidecar", extensions[name]


def test_sequences_are_scheduled_by_the_sidecar(extensions):
    # The ModelServer has no sequence batcher: the sidecar schedules the four sequence models
    # and adds the control tensors as inputs (`sequence: sidecar` in its configuration).
    sequence = extensions["sequence"]
    assert sequence["state"] == "Active", sequence
    assert sequence["implementation"] == "sidecar", sequence
    assert sequence["reason"] == (
        "scheduled by the sidecar, control tensors added as inputs: " + ", ".join(SEQUENCE_MODELS)
    )


def test_model_repository_is_an_index_only(extensions):
    # Models are loaded in the ModelServer, not through the sidecar.
    repository = extensions["model_repository"]
    assert repository["state"] == "Degraded", repository
    assert repository["implementation"] == "sidecar", repository
    assert "load and unload are done in the model container" in repository["reason"]


def test_no_extension_is_left_to_the_model_server(extensions):
    assert {e["implementation"] for e in extensions.values()} == {"sidecar"}


def test_no_staging_pool_with_the_model_server(status):
    # staging_shm_bytes: 0, since the ModelServer has no system shared memory extension.
    pool = status["shm"]["staging_pool"]
    assert pool["state"] == "Disabled", pool
    assert pool["byte_size"] == 0 and pool["in_use_bytes"] == 0, pool


def test_schedule_policy_is_unsupported_by_the_model_server(extensions):
    """The ModelServer lists no schedule_policy: `priority` and `timeout` reach it as plain parameters,
    and `/v2` leaves the extension out."""
    policy = extensions["schedule_policy"]
    assert policy["state"] == "Unsupported", policy
    assert policy["implementation"] == "sidecar", policy
    assert "does not offer schedule_policy" in policy["reason"], policy
