"""Shared helpers for the conformance tests (no fixtures here; see conftest.py)."""

from __future__ import annotations

import http.client
import json
import os
import struct
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import pytest

# --------------------------------------------------------------------------- catalog
# The built-in models (names and contracts mirror Triton's example models).
# dtype -> numpy dtype for identity_<dtype>. BF16 is carried as float32 by
# tritonclient (serialized as the upper 16 bits).
# Where the suite runs: INFERGATE_BACKEND=upstream-<server> puts the sidecar in front of a model
# server; INFERGATE_HTTP_URL points the suite at a server that is already running.
UPSTREAM = os.environ.get("INFERGATE_BACKEND", "").strip().lower().startswith("upstream")
local_models = pytest.mark.skipif(
    UPSTREAM, reason="an upstream's models are loaded and unloaded in its model container")
own_sidecars = pytest.mark.skipif(
    bool(os.environ.get("INFERGATE_HTTP_URL")),
    reason="starts sidecars of its own; the suite is pointed at a running server",
)

IDENTITY_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.float32,
    "BYTES": np.object_,
}

CONFIG_TYPE = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BF16": "TYPE_BF16",
    "BYTES": "TYPE_STRING",
}


def identity_model(dtype: str) -> str:
    return f"identity_{dtype.lower()}"


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    dims: tuple


@dataclass(frozen=True)
class Model:
    name: str
    max_batch_size: int
    inputs: tuple
    outputs: tuple


def _catalog() -> dict:
    models = {
        "simple": Model(
            "simple", 8,
            (Tensor("INPUT0", "INT32", (16,)), Tensor("INPUT1", "INT32", (16,))),
            (Tensor("OUTPUT0", "INT32", (16,)), Tensor("OUTPUT1", "INT32", (16,))),
        ),
        "simple_int8": Model(
            "simple_int8", 8,
            (Tensor("INPUT0", "INT8", (16,)), Tensor("INPUT1", "INT8", (16,))),
            (Tensor("OUTPUT0", "INT8", (16,)), Tensor("OUTPUT1", "INT8", (16,))),
        ),
        "simple_string": Model(
            "simple_string", 8,
            (Tensor("INPUT0", "BYTES", (16,)), Tensor("INPUT1", "BYTES", (16,))),
            (Tensor("OUTPUT0", "BYTES", (16,)), Tensor("OUTPUT1", "BYTES", (16,))),
        ),
        "simple_identity": Model(
            "simple_identity", 8,
            (Tensor("INPUT0", "BYTES", (-1,)),),
            (Tensor("OUTPUT0", "BYTES", (-1,)),),
        ),
    }
    for dt in IDENTITY_DTYPES:
        name = identity_model(dt)
        models[name] = Model(
            name, 0, (Tensor("INPUT0", dt, (-1,)),), (Tensor("OUTPUT0", dt, (-1,)),)
        )
    return models


MODELS = _catalog()


# --------------------------------------------------------------------------- raw HTTP
@dataclass
class RawResponse:
    status: int
    headers: dict  # lower-case header name -> value (last one wins)
    body: bytes
    header_list: list  # [(name, value)] as received

    def json(self):
        return json.loads(self.body)

    @property
    def error(self) -> Optional[str]:
        """The "error" member of a JSON error body (None if absent)."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        if isinstance(doc, dict):
            return doc.get("error")
        return None

    def split_binary(self):
        """(json_header_dict, binary_tail) using Inference-Header-Content-Length."""
        hlen = self.headers.get("inference-header-content-length")
        if hlen is None:
            return json.loads(self.body), b""
        n = int(hlen)
        return json.loads(self.body[:n]), self.body[n:]

    def __repr__(self):  # shows up in assertion messages
        body = self.body if len(self.body) < 600 else self.body[:600] + b"..."
        return f"RawResponse(status={self.status}, headers={self.headers}, body={body!r})"


def raw_request(
    hostport: str,
    method: str,
    path: str,
    body=b"",
    headers: Optional[dict] = None,
    timeout: float = 30.0,
) -> RawResponse:
    host, _, port = hostport.rpartition(":")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        if isinstance(body, str):
            body = body.encode()
        # http.client adds Content-Length (0 for an empty POST).
        conn.request(method, path, body=body or None, headers=dict(headers or {}))
        resp = conn.getresponse()
        data = resp.read()
        hl = resp.getheaders()
        return RawResponse(resp.status, {k.lower(): v for k, v in hl}, data, hl)
    finally:
        conn.close()


def binary_body(header: dict, *chunks: bytes):
    """(body, headers) for a binary-tensor-extension request."""
    js = json.dumps(header).encode()
    return js + b"".join(chunks), {"Inference-Header-Content-Length": str(len(js))}


# --------------------------------------------------------------------------- simple
SIMPLE_A = np.arange(16, dtype=np.int32).reshape(1, 16)
SIMPLE_B = np.full((1, 16), 3, dtype=np.int32)


def simple_json_request(a=SIMPLE_A, b=SIMPLE_B, **extra) -> dict:
    req = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": list(a.shape), "data": a.reshape(-1).tolist()},
            {"name": "INPUT1", "datatype": "INT32", "shape": list(b.shape), "data": b.reshape(-1).tolist()},
        ]
    }
    req.update(extra)
    return req


def assert_simple_json_response(doc: dict, a=SIMPLE_A, b=SIMPLE_B) -> None:
    outs = {o["name"]: o for o in doc["outputs"]}
    assert set(outs) == {"OUTPUT0", "OUTPUT1"}, doc
    assert outs["OUTPUT0"]["data"] == (a + b).reshape(-1).tolist()
    assert outs["OUTPUT1"]["data"] == (a - b).reshape(-1).tolist()
    assert outs["OUTPUT0"]["shape"] == list(a.shape)
    assert outs["OUTPUT0"]["datatype"] == "INT32"


def assert_serving(hostport: str) -> None:
    """A good request still gets the right answer (the server kept serving)."""
    resp = raw_request(hostport, "POST", "/v2/models/simple/infer", json.dumps(simple_json_request()))
    assert resp.status == 200, resp
    assert_simple_json_response(resp.json())


# --------------------------------------------------------------------------- BYTES
def serialize_bytes(elements: Iterable[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def deserialize_bytes(buf: bytes) -> list:
    out, i = [], 0
    while i < len(buf):
        (n,) = struct.unpack_from("<I", buf, i)
        out.append(buf[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def grpc_error(exc) -> tuple:
    """(StatusCode name, message) from a grpc.RpcError or InferenceServerException."""
    code = None
    msg = None
    if hasattr(exc, "code") and callable(exc.code):
        code = exc.code().name
        msg = exc.details()
    else:  # tritonclient InferenceServerException
        status = exc.status()
        code = status.replace("StatusCode.", "") if status else None
        msg = exc.message()
    return code, msg


def find_perf_analyzer():
    """perf_analyzer: $INFERGATE_PERF_ANALYZER, the interpreter's bin directory (the venv that
    tests/tools/setup-python.sh makes), then PATH. None when absent."""
    import os
    import shutil
    import sys
    from pathlib import Path

    env = os.environ.get("INFERGATE_PERF_ANALYZER")
    if env:
        return env if Path(env).exists() else None
    beside = Path(sys.executable).parent / "perf_analyzer"
    if beside.exists():
        return str(beside)
    return shutil.which("perf_analyzer")


def perf_analyzer_or_skip() -> str:
    """perf_analyzer's path, or the calling test skipped with how to install it."""
    import pytest

    path = find_perf_analyzer()
    if not path:
        pytest.skip("perf_analyzer not found: run tests/tools/setup-python.sh (it installs "
                    "<venv>/bin/perf_analyzer) or set INFERGATE_PERF_ANALYZER")
    return path


def cuda_unusable_reason() -> str:
    """Empty when a CUDA device and tritonclient's CUDA utilities (cuda-python) are usable here,
    else why not: the reason the GPU-only tests give when they are skipped."""
    try:
        import tritonclient.utils.cuda_shared_memory  # noqa: F401
        from cuda.bindings import runtime as cudart
    except Exception as exc:  # ImportError, or the CUDA libraries failing to load
        return f"cuda-python is not usable: {exc}"
    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess or count < 1:
        return f"no CUDA device ({err})"
    return ""
