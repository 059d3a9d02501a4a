"""The generate extension through the sidecar in front of Triton, against Triton's own answer
(run by run-triton.sh after the conformance suite, against the same two servers).

The sidecar converts a generate body into an inference request itself and sends it to Triton
over V2 gRPC (a stream for a decoupled model), then writes Triton's answers back as generate
JSON. Each request here goes to both servers; the status, content type and body must be the
same, byte for byte. `countdown_int32` (make_triton_repo.py) answers IN = n with n responses,
the last carrying the FINAL flag with its data, as LLM backends answer.

Environment: INFERGATE_HTTP_URL (the sidecar), INFERGATE_TRITON_HTTP_URL (Triton itself) and
INFERGATE_UPSTREAM_PROTOCOL (how run-triton.sh configured the sidecar).
"""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from support import raw_request  # noqa: E402

SIDECAR = os.environ["INFERGATE_HTTP_URL"]
TRITON = os.environ.get("INFERGATE_TRITON_HTTP_URL", "")
OVER_REST = os.environ.get("INFERGATE_UPSTREAM_PROTOCOL", "grpc") == "http"

pytestmark = pytest.mark.skipif(not TRITON, reason="INFERGATE_TRITON_HTTP_URL is not set")
needs_grpc = pytest.mark.skipif(
    OVER_REST, reason="over REST only the sidecar cannot reach a decoupled model"
)

SIXTEEN = list(range(16))


def both(model, route, body):
    path = f"/v2/models/{model}/{route}"
    text = body if isinstance(body, str) else json.dumps(body)
    answers = [raw_request(url, "POST", path, text) for url in (TRITON, SIDECAR)]
    return [(a.status, a.headers.get("content-type"), a.body) for a in answers]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    "model, body",
    [
        ("simple", {"id": "42", "INPUT0": SIXTEEN, "INPUT1": [1] * 16, "temperature": 0.5}),
        ("simple", {"parameters": {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "max_tokens": 3}}),
        ("identity_bytes", {"INPUT0": ["a", "bc"]}),
        ("identity_fp32", {"INPUT0": 2.5}),
        ("simple", {"INPUT0": SIXTEEN}),
        ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "p": [1]}),
    ],
    ids=["id-and-parameters", "parameters-object", "bytes", "scalar", "missing-input",
         "bad-parameter"],
)
def test_answers_are_tritons_own(model, body, route):
    triton, sidecar = both(model, route, body)
    assert sidecar == triton


@needs_grpc
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize("n", [1, 3], ids=["one-response", "three-responses"])
def test_a_decoupled_models_responses_are_tritons_own(n, route):
    triton, sidecar = both("countdown_int32", route, {"IN": n})
    assert sidecar == triton
    if route == "generate_stream":
        assert sidecar[2].count(b"data: ") == n
