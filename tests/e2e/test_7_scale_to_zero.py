"""Scale to zero on the real node (`spec.scaleToZero`): `triton` (then `mlserver`, for its cold
start) goes to zero pods when idle and comes back on the first call, which the activator holds.

- While a ModelStreamInfer stream is open (idle between its calls) the service stays up; once it
  closes and idleSeconds pass, the Deployment goes to 0 and the client Service points at the
  activator (status: ScaledToZero, Ready with reason ScaledToZero).
- From zero, a client pod sends at once a REST call, a gRPC call, a whole sequence on a gRPC
  stream and a whole sequence of unary gRPC calls: every answer exact. The seconds to each first
  answer are the cold start (recorded, not asserted).
- From zero again, a burst of REST calls beyond maxHeldCalls: the excess get 503 with
  Retry-After, the rest are answered exactly.
- From zero with an image that cannot be pulled: the held calls get 503 / UNAVAILABLE naming
  ImagePullFailed, and status.lastFailureInfo says so. The image restored, the service serves.
- scaleToZero removed: the Service has its selector again, the activator is gone, the service
  serves.
"""

from __future__ import annotations

import json
import threading
import time

import scenario
from test_4_faults import infsvc, ready, record

NS = scenario.NS
IDLE = 15
MAX_HELD = 6
BURST = 14
ACTIVATOR_PODS = "app.kubernetes.io/name=infergate-activator,app.kubernetes.io/instance={}"
SERVICE_PODS = "app.kubernetes.io/name=infergate,app.kubernetes.io/instance={}"
BROKEN_IMAGE = "infergate.invalid/no-such-model-server:1"


def patch(kube, name: str, spec: dict):
    kube.kubectl("patch", "infsvc", name, "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": spec}))


def zero_state(kube, name: str) -> dict:
    return infsvc(kube, name).get("status", {}).get("scaleToZero") or {}


def at_zero(kube, name: str):
    def check():
        status = infsvc(kube, name).get("status", {})
        state = status.get("scaleToZero") or {}
        deployment = kube.get("deployment", "-n", NS, name)
        return (state.get("state") == "ScaledToZero"
                and deployment["spec"].get("replicas") == 0
                and not kube.pods(NS, SERVICE_PODS.format(name))
                and state.get("activatorReadyReplicas", 0) >= 1
                and kube.condition(infsvc(kube, name), "Ready").get("reason") == "ScaledToZero"
                and status)
    return check


def slice_addresses(kube, name: str) -> list[str]:
    slice_ = kube.get("endpointslice", "-n", NS, f"{name}-infergate")
    return sorted(a for e in slice_.get("endpoints") or [] for a in e["addresses"])


def pod_ips(kube, selector: str) -> list[str]:
    return sorted(p["status"]["podIP"] for p in kube.running_pods(NS, selector)
                  if p["status"].get("podIP"))


def active(kube, name: str):
    def check():
        state = zero_state(kube, name)
        pods = pod_ips(kube, SERVICE_PODS.format(name))
        return (ready(kube, name) and state.get("state") == "Active" and pods
                and slice_addresses(kube, name) == pods and state)
    return check


def poke(kube, name: str):
    """A change of metadata wakes the operator now rather than at its next requeue."""
    kube.kubectl("annotate", "--overwrite", "infsvc", name, "-n", NS,
                 f"e2e.infergate.dev/poke={time.time()}")


def test_scale_to_zero_and_back_without_a_lost_call(kube, client):
    host = scenario.service_ip(kube, "triton")
    patch(kube, "triton", {"replicas": 1, "scaleToZero": {
        "idleSeconds": IDLE, "holdTimeoutSeconds": 300, "maxHeldCalls": MAX_HELD}})
    kube.wait_until("the activator ready and the Service on the pods", active(kube, "triton"),
                    timeout=480, interval=2)
    assert kube.get("service", "-n", NS, "triton")["spec"].get("selector") is None

    # An open stream is traffic: no zero under it.
    holding = threading.Thread(target=scenario.call, args=(kube, "calls.py", "hold_stream", host,
                                                           "--seconds", str(IDLE * 3)),
                               kwargs={"timeout": IDLE * 3 + 120})
    holding.start()
    time.sleep(IDLE * 2)
    poke(kube, "triton")
    time.sleep(5)
    assert zero_state(kube, "triton").get("state") == "Active", "scaled down under an open stream"
    assert len(kube.running_pods(NS, SERVICE_PODS.format("triton"))) == 1
    holding.join()
    went_idle = time.monotonic()
    kube.wait_until("triton at zero", at_zero(kube, "triton"), timeout=180, interval=1)
    to_zero_s = time.monotonic() - went_idle
    activators = pod_ips(kube, ACTIVATOR_PODS.format("triton"))
    assert slice_addresses(kube, "triton") == activators
    assert kube.condition(infsvc(kube, "triton"), "ScaledToZero")["status"] == "True"

    # From zero: REST, gRPC, a stream's sequence and a unary sequence, all at once.
    cold = scenario.call(kube, "calls.py", "from_zero", host, "--sequence-id", "880000",
                         timeout=900)
    kube.wait_until("triton active again", active(kube, "triton"), timeout=120, interval=1)
    state = kube.wait_until("the cold start in the status",
                            lambda: zero_state(kube, "triton").get("lastColdStartSeconds"),
                            timeout=60)

    # From zero, past the cap: the excess refused with Retry-After, the rest answered.
    kube.wait_until("triton at zero again", at_zero(kube, "triton"), timeout=180, interval=1)
    burst = scenario.call(kube, "calls.py", "burst", host, "--calls", str(BURST), timeout=900)
    assert burst["ok"] == MAX_HELD and burst["refused"] == BURST - MAX_HELD, burst
    assert burst["retry_after"] == ["5"], burst
    assert all("holds as many calls as it may" in m for m in burst["messages"]), burst
    kube.wait_until("triton active again", active(kube, "triton"), timeout=120, interval=1)

    # From zero with an image that cannot be pulled: held calls get the reason.
    kube.wait_until("triton at zero again", at_zero(kube, "triton"), timeout=180, interval=1)
    model = infsvc(kube, "triton")["spec"]["model"]
    good = {"image": model["image"], "imagePullPolicy": model.get("imagePullPolicy")}
    patch(kube, "triton", {"model": {"image": BROKEN_IMAGE, "imagePullPolicy": "IfNotPresent"}})
    refused = scenario.call(kube, "calls.py", "refused", host, timeout=900)
    assert refused["rest"]["status"] == 503, refused
    assert "ImagePullFailed" in refused["rest"]["body"], refused
    assert refused["grpc"]["code"] == "StatusCode.UNAVAILABLE", refused
    assert "ImagePullFailed" in refused["grpc"]["details"], refused
    failure = infsvc(kube, "triton")["status"].get("lastFailureInfo") or {}
    assert failure.get("reason") == "ImagePullFailed", failure
    patch(kube, "triton", {"model": good})
    answers = scenario.call(kube, "calls.py", "from_zero", host, "--sequence-id", "881000",
                            timeout=900)
    kube.wait_until("triton active again", active(kube, "triton"), timeout=300, interval=1)

    # Scale to zero removed: the selector back, the activator gone.
    patch(kube, "triton", {"scaleToZero": None})

    def plain():
        service = kube.get("service", "-n", NS, "triton")
        return (ready(kube, "triton") and service["spec"].get("selector")
                and not kube.pods(NS, ACTIVATOR_PODS.format("triton"))
                and "scaleToZero" not in infsvc(kube, "triton")["status"])
    kube.wait_until("triton without scale to zero", plain, timeout=300, interval=2)
    scenario.call(kube, "calls.py", "binary", host)
    record(kube, "scale-to-zero", {"to_zero_after_idle_s": round(to_zero_s, 1), "cold": cold,
                                   "status_cold_start_s": state, "burst": burst,
                                   "after_broken_image": answers})


def test_mlserver_starts_from_zero(kube, client):
    """MLServer's cold start: idle to zero, then one REST call from zero."""
    host = scenario.service_ip(kube, "mlserver")
    patch(kube, "mlserver", {"scaleToZero": {"idleSeconds": IDLE}})
    kube.wait_until("mlserver at zero", at_zero(kube, "mlserver"), timeout=300, interval=1)
    started = time.monotonic()
    answered = scenario.call(kube, "calls.py", "burst", host, "--calls", "1", timeout=900)
    first_answer_s = time.monotonic() - started
    assert answered["ok"] == 1, answered
    kube.wait_until("mlserver active again", active(kube, "mlserver"), timeout=120, interval=1)
    state = kube.wait_until("the cold start in the status",
                            lambda: zero_state(kube, "mlserver").get("lastColdStartSeconds"),
                            timeout=60)
    patch(kube, "mlserver", {"scaleToZero": None})
    kube.wait_until("mlserver without scale to zero", lambda: ready(kube, "mlserver") and not
                    kube.pods(NS, ACTIVATOR_PODS.format("mlserver")), timeout=300, interval=2)
    record(kube, "scale-to-zero-mlserver", {"first_answer_s": round(first_answer_s, 1),
                                            "status_cold_start_s": state})
