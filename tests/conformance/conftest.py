"""Fixtures for the conformance suite: the server under test.

Mode A (default): start the sidecar binary
    ${INFERGATE_SIDECAR_BIN:-<repo>/target/debug/infergate-sidecar}
with ephemeral ports (--http-port 0 --grpc-port 0 --metrics-port 0
--log-format json), read the chosen addresses from its JSON log lines
("http_addr", "grpc_addr", "metrics_addr", anywhere in the line's JSON, e.g.
nested under "fields"), wait for /v2/health/ready, and kill it at the end of
the session. Extra flags: INFERGATE_SIDECAR_ARGS (shell-split).

Mode B: INFERGATE_HTTP_URL and INFERGATE_GRPC_URL (and optionally
INFERGATE_METRICS_URL) point at an already running server, e.g. a real Triton
used as the oracle. Set INFERGATE_ORACLE=triton251 when that server is
Triton 2.51 so tests marked ``triton251_differs`` are expected to fail.
Set INFERGATE_BACKEND=upstream-triton when that server is the sidecar in
front of a real Triton 2.51 (tests/upstream/run-triton.sh): the few tests in
UPSTREAM_TRITON_SKIPS are skipped, each with its reason. Other upstreams
(INFERGATE_BACKEND=upstream-<server>) keep their list in tests/upstream/<server>/skips.py.
"""

from __future__ import annotations

import fnmatch
import http.client
import json
import os
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pytest

from support import RawResponse, raw_request

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SIDECAR_BIN = REPO_ROOT / "target" / "debug" / "infergate-sidecar"
ADDR_KEYS = ("http_addr", "grpc_addr", "metrics_addr")


# --------------------------------------------------------------------------- markers
def pytest_configure(config):
    # Also declared in pytest.ini; repeated so the suite works from any rootdir.
    config.addinivalue_line(
        "markers",
        "triton251_differs(reason, run=True): asserts current Triton behaviour "
        "that Triton 2.51 does not show; xfailed when INFERGATE_ORACLE=triton251",
    )
    config.addinivalue_line("markers", "perf_analyzer: runs perf_analyzer")


# INFERGATE_BACKEND=upstream-triton: the server under test is the sidecar in front of a real
# Triton 2.51 (tests/upstream/run-triton.sh). For upstream models the sidecar hands sequence
# requests, with their parameters, to the upstream's own sequence batcher (it does not run one
# itself), so sequence validation and CORRID handling are Triton 2.51's. These tests cannot
# hold through that upstream; each pattern (file::test name, fnmatch) has its reason.
_STRING_CORRID_251 = (
    "Triton 2.51 cannot serve a TYPE_STRING CORRID control: it pads the string id to 4+128 bytes "
    "and rejects its own tensor (400 / INVALID_ARGUMENT \"unexpected number of string elements 2 "
    "for inference input 'CORRID', expecting 1\", fixed upstream by triton-inference-server/core "
    "PR #339), so every string-id request to simple_string_dyna_sequence fails in the upstream"
)
_CUDA_THROUGH_TRITON = (
    "Triton 2.51 lists cuda_shared_memory, so the sidecar in front of it lists it too and hands "
    "CUDA registrations to Triton, which answers for a machine without a usable GPU (400 "
    "\"failed to register shared memory region: invalid args\"); checked against Triton itself by "
    "tests/upstream/test_staging.py::test_cuda_registrations_are_answered_by_triton"
)
UPSTREAM_TRITON_SKIPS = {
    "test_decoupled.py::test_a_client_that_goes_away_stops_the_request": (
        "the sidecar reads an upstream's decoupled call to its end rather than reset it (Triton "
        "2.51 can crash on a gRPC call cancelled as it completes), and Triton's python-backend "
        "repeat_int32 sleeps on, so the request stays pending there"
    ),
    "test_shared_memory.py::test_cuda_register_without_gpu*": _CUDA_THROUGH_TRITON,
    "test_shared_memory.py::test_extensions_omit_cuda_shared_memory_without_gpu": _CUDA_THROUGH_TRITON,
    "test_sequence.py::test_http_sequence_sync_flow[[]dyna-*": _STRING_CORRID_251,
    "test_sequence.py::test_grpc_sequence_sync_flow[[]dyna-*": _STRING_CORRID_251,
    "test_sequence.py::test_grpc_sequence_stream_flow[[]dyna-*": _STRING_CORRID_251,
    "test_sequence.py::test_idle_timeout_then_start_required": _STRING_CORRID_251,
    "test_sequence.py::test_second_start_restarts_sequence[[]*-simple_string_dyna_sequence]":
        _STRING_CORRID_251,
    "test_sequence.py::test_missing_correlation_id[[]simple_string_dyna_sequence]": (
        "Triton 2.51's sequence batcher checks for a missing id before the CORRID datatype: it "
        "answers \"must specify a non-zero or non-empty correlation ID\" where current Triton "
        "reports the UINT64-vs-BYTES CORRID type error"
    ),
    "test_sequence.py::test_numeric_id_for_string_corrid_model": (
        "Triton 2.51 does not check a numeric id against a TYPE_STRING CORRID control: it reads "
        "the number as a string length (400 \"incomplete string data for inference input "
        "'CORRID', expecting string of length <id> but only 128 bytes available\") instead of "
        "current Triton's CORRID type error"
    ),
    "test_sequence.py::test_string_id_for_uint64_corrid_model[[]*]": (
        "Triton 2.51 does not check a string id against a UINT64 CORRID control: it answers 200 "
        "where current Triton answers 400 with the CORRID type error"
    ),
}


# With INFERGATE_UPSTREAM_PROTOCOL=http the sidecar reaches Triton over REST only, which has no
# streams: a decoupled model's requests are answered with the sidecar's UNIMPLEMENTED text.
_DECOUPLED_OVER_REST = (
    "the sidecar reaches Triton over V2 REST only here, which has no streams: a decoupled model "
    "answers UNIMPLEMENTED \"decoupled models need the upstream's gRPC endpoint\" "
    "(tests/upstream/test_decoupled_upstream.py checks that answer)"
)
UPSTREAM_TRITON_REST_SKIPS = {
    f"test_decoupled.py::{name}": _DECOUPLED_OVER_REST
    for name in (
        "test_custom_repeat_example",
        "test_responses_then_empty_final_response",
        "test_no_elements_no_responses",
        "test_responses_written_as_produced",
        "test_mismatched_delay_is_an_error_on_the_stream",
        "test_statistics_count_each_request_once",
    )
}
UPSTREAM_TRITON_REST_SKIPS["test_generate.py::*decoupled*"] = _DECOUPLED_OVER_REST


def _upstream_skips(backend: str) -> tuple[str, dict]:
    """(label, {pattern: reason}) for INFERGATE_BACKEND=upstream-<server>.

    Triton's list is above; another server's lives beside its test setup, in
    tests/upstream/<server>/skips.py (LABEL and SKIPS)."""
    if backend == "upstream-triton":
        if os.environ.get("INFERGATE_UPSTREAM_PROTOCOL", "grpc") == "http":
            return "upstream Triton 2.51 over REST", {
                **UPSTREAM_TRITON_SKIPS,
                **UPSTREAM_TRITON_REST_SKIPS,
            }
        return "upstream Triton 2.51", UPSTREAM_TRITON_SKIPS
    if not backend.startswith("upstream-"):
        return "", {}
    server = backend[len("upstream-"):]
    path = REPO_ROOT / "tests" / "upstream" / server / "skips.py"
    if not path.is_file():
        return "", {}
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"infergate_skips_{server}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LABEL, module.SKIPS


def _skip_reason(item, skips: dict) -> Optional[str]:
    key = f"{item.path.name}::{item.name}"
    for pattern, reason in skips.items():
        if fnmatch.fnmatchcase(key, pattern):
            return reason
    return None


def pytest_collection_modifyitems(config, items):
    backend = os.environ.get("INFERGATE_BACKEND", "").strip().lower()
    label, skips = _upstream_skips(backend)
    for item in items:
        reason = _skip_reason(item, skips)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"{label}: {reason}"))
    oracle = os.environ.get("INFERGATE_ORACLE", "").strip().lower()
    if oracle != "triton251":
        return
    for item in items:
        marker = item.get_closest_marker("triton251_differs")
        if marker is None:
            continue
        reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
        run = marker.kwargs.get("run", True)
        item.add_marker(
            pytest.mark.xfail(
                reason=f"Triton 2.51 differs: {reason}", run=run, strict=True
            )
        )


# --------------------------------------------------------------------------- log parsing
def _walk_for_addrs(obj, found: dict) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ADDR_KEYS and isinstance(value, str) and key not in found:
                found[key] = value
            else:
                _walk_for_addrs(value, found)
    elif isinstance(obj, list):
        for value in obj:
            _walk_for_addrs(value, found)


_ADDR_RE = re.compile(r'"?(http_addr|grpc_addr|metrics_addr)"?\s*[:=]\s*"?([^",\s}]+)')


def parse_addrs_from_line(line: str, found: dict) -> None:
    """Collect http_addr/grpc_addr/metrics_addr from one log line into found."""
    line = line.strip()
    if not line:
        return
    start = line.find("{")
    if start >= 0:
        try:
            _walk_for_addrs(json.loads(line[start:]), found)
            return
        except ValueError:
            pass
    # Not JSON (or truncated): fall back to key/value text.
    for key, value in _ADDR_RE.findall(line):
        found.setdefault(key, value)


def connectable(addr: str) -> str:
    """Turn a bound address (maybe 0.0.0.0 / [::]) into one a client can use."""
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def _strip_scheme(url: str) -> str:
    for prefix in ("http://", "https://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    return url.rstrip("/")


# --------------------------------------------------------------------------- server
@dataclass
class Server:
    http: str
    grpc: str
    metrics: Optional[str]
    process: Optional[subprocess.Popen] = None
    log_lines: list = field(default_factory=list)
    log_path: Optional[Path] = None

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_lines[-n:])


def _wait_ready(http_addr: str, deadline: float, proc: Optional[subprocess.Popen]) -> bool:
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            resp = raw_request(http_addr, "GET", "/v2/health/ready", timeout=2)
            if resp.status == 200:
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    return False


def _start_sidecar(tmp_dir: Path, model_control: Optional[str] = "explicit",
                   extra_args: Sequence[str] = (), grpc_port: int = 0,
                   http_port: int = 0) -> Server:
    binary = Path(os.environ.get("INFERGATE_SIDECAR_BIN", str(DEFAULT_SIDECAR_BIN)))
    if not binary.exists():
        pytest.exit(
            f"sidecar binary not found at {binary}: build it, set INFERGATE_SIDECAR_BIN, "
            "or point INFERGATE_HTTP_URL/INFERGATE_GRPC_URL at a running server",
            returncode=4,
        )
    args = [
        str(binary),
        "--http-port", str(http_port),
        "--grpc-port", str(grpc_port),
        "--metrics-port", "0", "--admin-port", "0",
        "--log-format", "json",
        "--allow-client-shm",  # client shared memory is opt-in (TRITON.md §0.7)
    ]
    # Clients may load and unload models, as with Triton in explicit mode (its QA's model control
    # tests run so); the default, none, refuses them (test_model_control_mode.py).
    if model_control is not None:
        args += ["--model-control-mode", model_control]
    args += list(extra_args)
    args += shlex.split(os.environ.get("INFERGATE_SIDECAR_ARGS", ""))
    timeout = float(os.environ.get("INFERGATE_STARTUP_TIMEOUT", "30"))
    log_path = tmp_dir / "sidecar.log"
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
    )
    found: dict = {}
    lines: list = []
    all_found = threading.Event()

    def drain():
        with open(log_path, "w", encoding="utf-8") as log:
            for line in proc.stdout:  # keeps reading so the pipe never fills up
                log.write(line)
                log.flush()
                lines.append(line.rstrip("\n"))
                if len(lines) > 5000:
                    del lines[:1000]
                if not all_found.is_set():
                    parse_addrs_from_line(line, found)
                    if all(k in found for k in ADDR_KEYS):
                        all_found.set()

    threading.Thread(target=drain, name="sidecar-log", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not all_found.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            break
    server = Server(
        http=connectable(found["http_addr"]) if "http_addr" in found else "",
        grpc=connectable(found["grpc_addr"]) if "grpc_addr" in found else "",
        metrics=connectable(found["metrics_addr"]) if "metrics_addr" in found else None,
        process=proc,
        log_lines=lines,
        log_path=log_path,
    )
    if not all_found.is_set() and not (server.http and server.grpc):
        exited = proc.poll()
        _stop(proc)
        time.sleep(0.2)  # let the log reader catch the last lines
        why = f"exited with status {exited}" if exited is not None else f"did not log them within {timeout}s"
        pytest.exit(
            f"sidecar {binary} {why}; addresses found: {found}; log {log_path}:\n{server.log_tail()}",
            returncode=4,
        )
    if not _wait_ready(server.http, deadline + timeout, proc):
        _stop(proc)
        pytest.exit(
            f"sidecar at {server.http} never answered 200 on /v2/health/ready; "
            f"log {log_path}:\n{server.log_tail()}",
            returncode=4,
        )
    return server


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    http_env = os.environ.get("INFERGATE_HTTP_URL")
    grpc_env = os.environ.get("INFERGATE_GRPC_URL")
    if http_env and grpc_env:
        metrics_env = os.environ.get("INFERGATE_METRICS_URL")
        srv = Server(
            http=_strip_scheme(http_env),
            grpc=_strip_scheme(grpc_env),
            metrics=_strip_scheme(metrics_env) if metrics_env else None,
        )
        if not _wait_ready(srv.http, time.monotonic() + 30, None):
            pytest.exit(f"server at {srv.http} is not ready (GET /v2/health/ready)", returncode=4)
        yield srv
        return
    if http_env or grpc_env:
        pytest.exit("set both INFERGATE_HTTP_URL and INFERGATE_GRPC_URL (or neither)", returncode=4)
    srv = _start_sidecar(tmp_path_factory.mktemp("sidecar"))
    try:
        yield srv
    finally:
        _stop(srv.process)


@pytest.fixture(scope="session")
def oracle() -> str:
    """Name of the reference server when testing one (e.g. 'triton251'), else ''."""
    return os.environ.get("INFERGATE_ORACLE", "").strip().lower()


@pytest.fixture(scope="session")
def http_url(server) -> str:
    """host:port of the HTTP/REST endpoint (no scheme, as tritonclient wants it)."""
    return server.http


@pytest.fixture(scope="session")
def grpc_url(server) -> str:
    """host:port of the gRPC endpoint."""
    return server.grpc


@pytest.fixture(scope="session")
def metrics_url(server) -> str:
    """host:port of the Prometheus metrics endpoint (skips when unknown)."""
    if not server.metrics:
        pytest.skip("metrics endpoint unknown (set INFERGATE_METRICS_URL)")
    return server.metrics


@pytest.fixture(scope="session")
def http_client(http_url):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(
        url=http_url, connection_timeout=60.0, network_timeout=60.0, concurrency=4
    )
    yield client
    client.close()


@pytest.fixture(scope="session")
def grpc_client(grpc_url):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=grpc_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def grpc_stub(grpc_url):
    """Raw GRPCInferenceService stub (tritonclient's generated protobuf code)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(
        grpc_url,
        options=[
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ],
    )
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture(scope="session")
def raw_http(http_url):
    """raw_http(method, path, body=b"", headers=None, timeout=30) -> RawResponse.

    Exact bytes on the wire via http.client (no implicit compression); the
    response has .status, .headers (lower-case keys), .body, .json(), .error.
    """

    def do(method: str, path: str, body=b"", headers=None, timeout: float = 30.0) -> RawResponse:
        return raw_request(http_url, method, path, body=body, headers=headers, timeout=timeout)

    return do
