"""perf_analyzer (installed by tests/tools/setup-python.sh) drives the server.

Binary lookup: $INFERGATE_PERF_ANALYZER, then perf_analyzer next to the
running Python interpreter (the venv's bin), then PATH. Skipped when absent.
"""

import subprocess

import pytest

from support import perf_analyzer_or_skip

pytestmark = pytest.mark.perf_analyzer


@pytest.fixture(scope="module")
def perf_analyzer():
    return perf_analyzer_or_skip()


def run_pa(perf_analyzer, *args, timeout=90):
    cmd = [
        perf_analyzer,
        *args,
        "--concurrency-range", "1",
        "--measurement-mode", "time_windows",
        "--measurement-interval", "1000",
        "--max-trials", "4",
        "--stability-percentage", "999",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)}\nexit {proc.returncode}\n{out[-4000:]}"
    lowered = out.lower()
    assert "error" not in lowered and "failed" not in lowered, out[-4000:]
    assert "Throughput:" in out, out[-4000:]
    # Server-side section: perf_analyzer found "statistics" in the server
    # metadata and saw queue.count grow.
    assert "Server:" in out and "Inference count:" in out, out[-4000:]
    return out


def run_pa_over_shared_memory(raw_http, url, protocol, kind):
    """identity_fp32 with 1,048,576 elements, inputs and outputs in `kind` ("system" or "cuda")
    shared memory; perf_analyzer unregisters its regions when it exits, and none is left."""
    pa = perf_analyzer_or_skip()
    try:
        run_pa(pa, "-m", "identity_fp32", "-u", url, "-i", protocol, "--shape", "INPUT0:1048576",
               "--shared-memory", kind, "--output-shared-memory-size", str(4 * 1048576))
        resp = raw_http("GET", f"/v2/{kind}sharedmemory/status")
        assert resp.status == 200 and resp.json() == [], resp
    finally:
        # A perf_analyzer that failed or was killed leaves its regions registered: later tests
        # must not inherit them.
        raw_http("POST", f"/v2/{kind}sharedmemory/unregister")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_simple(perf_analyzer, http_url, grpc_url, protocol):
    url = http_url if protocol == "http" else grpc_url
    run_pa(perf_analyzer, "-m", "simple", "-u", url, "-i", protocol)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_identity_fp32_4mib(perf_analyzer, http_url, grpc_url, protocol):
    url = http_url if protocol == "http" else grpc_url
    run_pa(perf_analyzer, "-m", "identity_fp32", "-u", url, "-i", protocol, "--shape", "INPUT0:1048576")


def test_perf_analyzer_json_tensors(perf_analyzer, http_url):
    run_pa(
        perf_analyzer, "-m", "simple", "-u", http_url, "-i", "http",
        "--input-tensor-format", "json", "--output-tensor-format", "json",
    )


def test_perf_analyzer_batch(perf_analyzer, grpc_url):
    run_pa(perf_analyzer, "-m", "simple", "-u", grpc_url, "-i", "grpc", "-b", "8")
