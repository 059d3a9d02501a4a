"""Faults with requests in flight through the sidecar (run by run-triton.sh, after the restart
check). Each phase starts concurrent HTTP and gRPC requests to `slow_identity` (2 s inside the
upstream), waits until they are surely inside it, then injects the fault.

upstream-dies PID: the upstream (PID) is killed with SIGKILL mid-request. Every request in
    flight is answered promptly (no hang) with HTTP 503 / gRPC UNAVAILABLE and a message naming
    the upstream; none is answered with wrong data.
sigterm PID:       the sidecar (PID) gets SIGTERM mid-request. Every request in flight is answered
    with the right data (none is lost), a request sent after the signal is refused (connection
    refused, 503 or UNAVAILABLE, never a hang), and the process exits.

Usage: fault_check.py PHASE PID HTTP_ADDR GRPC_ADDR  (exit 0 when the phase holds)
"""

import os
import signal
import sys
import threading
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

MODEL = "slow_identity"
IN_FLIGHT = 3  # per protocol
SETTLE_S = 0.8  # the upstream holds each batch 2 s: well inside it
ANSWER_WITHIN_S = 15


def values(i):
    return [float(i), float(i) + 0.5, -float(i)]


def call_http(addr, i):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": values(i)}]}
    try:
        r = requests.post(f"http://{addr}/v2/models/{MODEL}/infer", json=body, timeout=30)
    except requests.RequestException as e:
        return ("refused", str(e))
    if r.status_code == 200:
        return ("ok", r.json()["outputs"][0]["data"])
    return (r.status_code, r.json().get("error", r.text))


def call_grpc(addr, i):
    client = grpcclient.InferenceServerClient(addr)
    tensor = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
    tensor.set_data_from_numpy(np.array([values(i)], dtype=np.float32))
    try:
        result = client.infer(MODEL, [tensor], client_timeout=30)
    except InferenceServerException as e:
        return (e.status(), e.message())
    finally:
        client.close()
    return ("ok", result.as_numpy("OUTPUT0").flatten().tolist())


def in_flight(http, grpc):
    """Starts the requests; returns (threads, results: index -> (protocol, outcome, seconds))."""
    results = {}

    def run(i, protocol, call, addr):
        started = time.monotonic()
        outcome = call(addr, i)
        results[i] = (protocol, outcome, time.monotonic() - started)

    threads = []
    for i in range(2 * IN_FLIGHT):
        protocol, call, addr = ("http", call_http, http) if i % 2 == 0 else ("grpc", call_grpc, grpc)
        thread = threading.Thread(target=run, args=(i, protocol, call, addr), daemon=True)
        thread.start()
        threads.append(thread)
    time.sleep(SETTLE_S)
    return threads, results


def join(threads, results, since):
    for thread in threads:
        thread.join(timeout=max(0.1, ANSWER_WITHIN_S - (time.monotonic() - since)))
    missing = [i for i in range(len(threads)) if i not in results]
    assert not missing, f"requests {missing} got no answer within {ANSWER_WITHIN_S}s of the fault"
    for i in sorted(results):
        print(f"  request {i}: {results[i][0]} {results[i][1][0]} after {results[i][2]:.2f}s: "
              f"{str(results[i][1][1])[:160]}")


def upstream_dies(pid, http, grpc):
    threads, results = in_flight(http, grpc)
    assert not results, f"answered before the fault (the upstream is not slow?): {results}"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    join(threads, results, killed)
    for i, (protocol, (status, detail), _) in results.items():
        if protocol == "http":
            assert status == 503, f"HTTP request {i}: {status} {detail}"
        else:
            assert status == "StatusCode.UNAVAILABLE", f"gRPC request {i}: {status} {detail}"
        assert "upstream model server" in detail, f"request {i}: {detail}"


def sigterm(pid, http, grpc):
    threads, results = in_flight(http, grpc)
    assert not results, f"answered before the fault (the upstream is not slow?): {results}"
    os.kill(pid, signal.SIGTERM)
    signalled = time.monotonic()
    time.sleep(0.2)
    late = call_http(http, 99)
    assert late[0] in ("refused", 503), f"a request after SIGTERM was served: {late}"
    join(threads, results, signalled)
    for i, (protocol, (status, detail), _) in results.items():
        assert status == "ok", f"{protocol} request {i} in flight at SIGTERM was lost: {status} {detail}"
        assert detail == values(i), f"{protocol} request {i}: {detail}"
    while os.path.exists(f"/proc/{pid}") and time.monotonic() - signalled < 30:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().split(") ", 1)[1].startswith("Z"):
                break  # exited; the parent reaps it
        time.sleep(0.1)
    else:
        if os.path.exists(f"/proc/{pid}"):
            raise AssertionError("the sidecar did not exit within 30s of SIGTERM")
    print(f"  late request: {late[0]}; sidecar exited {time.monotonic() - signalled:.2f}s after SIGTERM")


def main(argv):
    if len(argv) != 5 or argv[1] not in ("upstream-dies", "sigterm"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    phase, pid, http, grpc = argv[1], int(argv[2]), argv[3], argv[4]
    try:
        {"upstream-dies": upstream_dies, "sigterm": sigterm}[phase](pid, http, grpc)
    except AssertionError as e:
        print(f"fault check '{phase}' FAILED: {e}", file=sys.stderr)
        return 1
    print(f"fault check '{phase}': ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
