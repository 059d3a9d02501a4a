"""One phase of the upstream restart check, against the sidecar (run by run-triton.sh).

serving: inference works over HTTP and gRPC.
outage:  the upstream is gone: within a few seconds readiness is false, and inference answers
         HTTP 503 / gRPC UNAVAILABLE with a message naming the upstream (never a hang, never a 500).
resumed: the upstream is back: within a few seconds the sidecar is ready and serving again.

Usage: restart_check.py PHASE HTTP_ADDR GRPC_ADDR  (exit 0 when the phase holds)
"""

import os
import re
import sys
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

DEADLINE_S = 20


def infer_http(addr):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0, 3.0]}]}
    return requests.post(f"http://{addr}/v2/models/identity_fp32/infer", json=body, timeout=10)


def infer_grpc(addr):
    client = grpcclient.InferenceServerClient(addr)
    inp = grpcclient.InferInput("INPUT0", [3], "FP32")
    inp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    return client.infer("identity_fp32", [inp], client_timeout=10)


def ready(addr):
    try:
        return requests.get(f"http://{addr}/v2/health/ready", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def serving(http, grpc):
    r = infer_http(http)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]
    out = infer_grpc(grpc).as_numpy("OUTPUT0")
    assert out.tolist() == [1.0, 2.0, 3.0], out


def outage(http, grpc):
    deadline = time.monotonic() + DEADLINE_S
    while ready(http):
        assert time.monotonic() < deadline, "readiness stayed true with the upstream down"
        time.sleep(0.2)
    r = infer_http(http)
    assert r.status_code == 503, (r.status_code, r.text)
    assert "upstream model server" in r.json()["error"] and "unavailable" in r.json()["error"], r.text
    try:
        infer_grpc(grpc)
    except InferenceServerException as e:
        assert e.status() == "StatusCode.UNAVAILABLE", (e.status(), e.message())
        assert "upstream model server" in e.message(), e.message()
    else:
        raise AssertionError("gRPC inference succeeded with the upstream down")


def resumed(http, grpc):
    deadline = time.monotonic() + DEADLINE_S
    while not ready(http):
        assert time.monotonic() < deadline, "the sidecar did not become ready again"
        time.sleep(0.2)
    serving(http, grpc)
    if os.environ.get("INFERGATE_ADMIN_URL") and os.environ.get("INFERGATE_TRITON_HTTP_URL"):
        staging_registered_again(http, deadline)


def staging_registered_again(http, deadline):
    """The restarted Triton knows nothing of the pool until the sidecar registers it again."""
    triton = os.environ["INFERGATE_TRITON_HTTP_URL"]
    # The sidecar never tells the pool's name; the restarted Triton lists it once registered.
    while True:
        regions = requests.get(f"http://{triton}/v2/systemsharedmemory/status", timeout=5).json()
        if any(r["name"].startswith("infergate_staging_") for r in regions):
            break
        assert time.monotonic() < deadline, f"the staging pool was not registered again: {regions}"
        time.sleep(0.2)
    metrics = requests.get(f"http://{os.environ['INFERGATE_METRICS_URL']}/metrics", timeout=5).text
    registrations = int(re.search(r"^infergate_staging_registrations_total (\d+)$", metrics, re.M).group(1))
    assert registrations >= 2, registrations
    data = np.arange(1 << 18, dtype=np.float32)
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [data.size], "data": data.tolist()}]}
    r = requests.post(f"http://{http}/v2/models/identity_fp32/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == data.tolist()


def main():
    phase, http, grpc = sys.argv[1:4]
    {"serving": serving, "outage": outage, "resumed": resumed}[phase](http, grpc)
    print(f"restart check: {phase} ok")


if __name__ == "__main__":
    main()
