"""Triton's `--model-control-mode`: in `none` (the default) and `poll`, clients may not load or
unload models: 503 / UNAVAILABLE "explicit model load / unload is not allowed if polling is
enabled", checked once the request is read (a file override gets the same answer); the index and
inference keep working. Sidecar-specific setup: the test starts its own sidecar in each mode, so it
is skipped when the suite is pointed at a running server."""


import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import conftest
from support import own_sidecars

MESSAGE = "explicit model load / unload is not allowed if polling is enabled"

pytestmark = own_sidecars


@pytest.fixture(scope="module", params=[None, "none", "poll"], ids=["default", "none", "poll"])
def refusing(request, tmp_path_factory):
    """A sidecar of its own: started with no --model-control-mode (the default), or with the mode."""
    server = conftest._start_sidecar(tmp_path_factory.mktemp("mode"), model_control=request.param)
    yield server
    conftest._stop(server.process)


@pytest.mark.parametrize("action", ["load", "unload"])
@pytest.mark.parametrize("body", [None, {"parameters": {"config": "{}"}},
                                  {"parameters": {"file:1/model.py": "eA=="}}],
                         ids=["plain", "config", "file"])
def test_http_refused(refusing, action, body):
    r = requests.post(f"http://{refusing.http}/v2/repository/models/simple/{action}", json=body, timeout=10)
    assert r.status_code == 503, r.text
    assert r.json() == {"error": MESSAGE}


@pytest.mark.parametrize("action", ["load", "unload"])
def test_grpc_refused(refusing, action):
    client = grpcclient.InferenceServerClient(refusing.grpc)
    with pytest.raises(InferenceServerException) as e:
        getattr(client, f"{action}_model")("simple")
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert e.value.message() == MESSAGE
    assert client.is_model_ready("simple")


def test_index_and_inference_still_work(refusing):
    r = requests.post(f"http://{refusing.http}/v2/repository/index", timeout=10)
    assert r.status_code == 200
    assert any(m["name"] == "simple" for m in r.json())
    assert requests.get(f"http://{refusing.http}/v2/models/simple/ready", timeout=10).status_code == 200
