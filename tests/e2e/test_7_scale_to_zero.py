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
  ImagePullFailed, and status.lastFailureInfo says so. With no call for idleSeconds, the failing
  pod goes too: back at zero, the failure kept. The image restored, the next call starts a pod
  and the service serves.
- scaleToZero removed: the Service has its selector again, the activator is gone, the service
  serves.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import scenario
from test_4_faults import infsvc, ready, record
from test_7_canary import models

NS = scenario.NS
IDLE = 15
MAX_HELD = 6
BURST = 14
ACTIVATOR_PODS = "app.kubernetes.io/name=infergate-activator,app.kubernetes.io/instance={}"
SERVICE_PODS = "app.kubernetes.io/name=infergate,app.kubernetes.io/instance={}"
BROKEN_IMAGE = "infergate.invalid/no-such-model-server:1"
# `triton`'s FP32 identity model (the calls' REST and gRPC model; sequences use
# sequence_accumulator).
MODEL = "classifier"


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


def other_slices(kube, name: str) -> dict[str, list]:
    """The endpoints of every other EndpointSlice kube-proxy reads for the Service than the
    operator's, by name."""
    slices = kube.get("endpointslice", "-n", NS, "-l", f"kubernetes.io/service-name={name}")
    return {s["metadata"]["name"]: s.get("endpoints") or [] for s in slices["items"]
            if s["metadata"]["name"] != f"{name}-infergate"}


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


def iptables(address: str) -> list[str]:
    """The node's NAT rules that name `address` (for a failure's message)."""
    out = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if address in line or "triton" in line]


def poke(kube, name: str):
    """A change of metadata wakes the operator now rather than at its next requeue."""
    kube.kubectl("annotate", "--overwrite", "infsvc", name, "-n", NS,
                 f"e2e.infergate.dev/poke={time.time()}")


def test_scale_to_zero_and_back_without_a_lost_call(kube, client):
    host = scenario.service_ip(kube, "triton")
    # An open stream is traffic: opened before scale to zero is asked for (the pod has been quiet
    # since it started, so without it the service would go to zero as soon as it could), it keeps
    # the pod up past idleSeconds.
    # One pod first, so that the stream's is the one that stays; the models the calls use.
    patch(kube, "triton", {"replicas": 1, "models": models(scenario.CLASSIFIER_LABELS)})
    kube.wait_until("triton at one pod", lambda: ready(kube, "triton") and len(
        kube.pods(NS, SERVICE_PODS.format("triton"))) == 1, timeout=300, interval=2)
    stream_seconds = 120
    held = {}

    def hold():
        try:
            held["answer"] = scenario.call(kube, "calls.py", "hold_stream", host, "--model",
                                           MODEL, "--seconds", str(stream_seconds), timeout=stream_seconds + 120)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            held["error"] = e
    holding = threading.Thread(target=hold)
    holding.start()
    (pod_ip,) = pod_ips(kube, SERVICE_PODS.format("triton"))

    def stream_open():
        assert "error" not in held, held
        return scenario.admin_status(kube, pod_ip)["traffic"]["in_flight"] >= 1
    kube.wait_until("the stream open on the pod", stream_open, timeout=60, interval=1)
    opened = time.monotonic()
    patch(kube, "triton", {"scaleToZero": {
        "idleSeconds": IDLE, "holdTimeoutSeconds": 300, "maxHeldCalls": MAX_HELD}})
    kube.wait_until("the activator ready and the Service on the pods", active(kube, "triton"),
                    timeout=stream_seconds - IDLE * 2 - 10, interval=1)
    # A selector no pod matches: the EndpointSlice controller's own slice is empty (kube-proxy
    # would send calls to the pods it names beside the operator's).
    assert kube.get("service", "-n", NS, "triton")["spec"]["selector"] == {
        "infergate.dev/endpoints-by": "operator"}
    kube.wait_until("the controller's slices empty", lambda: not any(
        other_slices(kube, "triton").values()), timeout=60)
    time.sleep(IDLE + 5)
    poke(kube, "triton")
    time.sleep(5)
    assert time.monotonic() - opened < stream_seconds, "the stream closed before the check"
    state = zero_state(kube, "triton")
    if state.get("state") != "Active":
        holding.join(timeout=stream_seconds)
    assert state.get("state") == "Active", ("scaled down under an open stream", state, held)
    assert len(kube.running_pods(NS, SERVICE_PODS.format("triton"))) == 1
    holding.join()
    assert "error" not in held, held
    went_idle = time.monotonic()
    kube.wait_until("triton at zero", at_zero(kube, "triton"), timeout=180, interval=1)
    to_zero_s = time.monotonic() - went_idle
    activators = pod_ips(kube, ACTIVATOR_PODS.format("triton"))
    assert slice_addresses(kube, "triton") == activators
    assert kube.condition(infsvc(kube, "triton"), "ScaledToZero")["status"] == "True"

    # Both ports reach the activator through the Service (a connection alone starts nothing).
    for port in ("8000", "8001"):
        for where in (host, activators[0]):
            got = scenario.call(kube, "calls.py", "connect", where, "--port", port)
            assert got["open"], (where, port, got, iptables(host))

    # From zero: REST, gRPC, a stream's sequence and a unary sequence, all at once.
    cold = scenario.call(kube, "calls.py", "from_zero", host, "--model", MODEL,
                         "--sequence-id", "880000", timeout=900)
    kube.wait_until("triton active again", active(kube, "triton"), timeout=120, interval=1)
    state = kube.wait_until("the cold start in the status",
                            lambda: zero_state(kube, "triton").get("lastColdStartSeconds"),
                            timeout=60)

    # From zero, past the cap: the excess refused with Retry-After, the rest answered.
    kube.wait_until("triton at zero again", at_zero(kube, "triton"), timeout=180, interval=1)
    burst = scenario.call(kube, "calls.py", "burst", host, "--model", MODEL, "--calls", str(BURST),
                          timeout=900)
    assert burst["ok"] == MAX_HELD and burst["refused"] == BURST - MAX_HELD, burst
    assert burst["retry_after"] == ["5"], burst
    assert all("holds as many calls as it may" in m for m in burst["messages"]), burst
    kube.wait_until("triton active again", active(kube, "triton"), timeout=120, interval=1)

    # From zero with an image that cannot be pulled: held calls get the reason.
    kube.wait_until("triton at zero again", at_zero(kube, "triton"), timeout=180, interval=1)
    model = infsvc(kube, "triton")["spec"]["model"]
    good = {"image": model["image"], "imagePullPolicy": model.get("imagePullPolicy")}
    patch(kube, "triton", {"model": {"image": BROKEN_IMAGE, "imagePullPolicy": "IfNotPresent"}})
    refused = scenario.call(kube, "calls.py", "refused", host, "--model", MODEL, timeout=900)
    assert refused["rest"]["status"] == 503, refused
    assert "ImagePullFailed" in refused["rest"]["body"], refused
    assert refused["grpc"]["code"] == "StatusCode.UNAVAILABLE", refused
    assert "ImagePullFailed" in refused["grpc"]["details"], refused
    failure = infsvc(kube, "triton")["status"].get("lastFailureInfo") or {}
    assert failure.get("reason") == "ImagePullFailed", failure
    # No call since: the pod that cannot start is not kept.
    started = time.monotonic()
    kube.wait_until("triton back at zero while its image fails", at_zero(kube, "triton"),
                    timeout=IDLE + 120, interval=1)
    to_zero_failing_s = time.monotonic() - started
    failure = infsvc(kube, "triton")["status"].get("lastFailureInfo") or {}
    assert failure.get("reason") == "ImagePullFailed", failure
    patch(kube, "triton", {"model": good})
    # The activator reads the status again within a second; until then it still has the failure.
    time.sleep(3)
    answers = scenario.call(kube, "calls.py", "from_zero", host, "--model", MODEL,
                            "--sequence-id", "881000", timeout=900)
    kube.wait_until("triton active again", active(kube, "triton"), timeout=300, interval=1)

    # Scale to zero removed: the selector back, the activator gone.
    patch(kube, "triton", {"scaleToZero": None})

    def plain():
        service = kube.get("service", "-n", NS, "triton")
        return (ready(kube, "triton")
                and "infergate.dev/endpoints-by" not in service["spec"]["selector"]
                and not kube.pods(NS, ACTIVATOR_PODS.format("triton"))
                and "scaleToZero" not in infsvc(kube, "triton")["status"])
    kube.wait_until("triton without scale to zero", plain, timeout=300, interval=2)
    scenario.call(kube, "calls.py", "binary", host, "--model", MODEL, "--elements", "4")
    record(kube, "scale-to-zero", {"to_zero_after_idle_s": round(to_zero_s, 1), "cold": cold,
                                   "status_cold_start_s": state, "burst": burst,
                                   "after_broken_image": answers,
                                   "to_zero_while_failing_s": round(to_zero_failing_s, 1)})


def test_mlserver_starts_from_zero(kube, client):
    """MLServer's cold start: idle to zero, then one REST call from zero."""
    host = scenario.service_ip(kube, "mlserver")
    patch(kube, "mlserver", {"scaleToZero": {"idleSeconds": IDLE}})
    kube.wait_until("mlserver at zero", at_zero(kube, "mlserver"), timeout=300, interval=1)
    started = time.monotonic()
    answered = scenario.call(kube, "calls.py", "burst", host, "--model", "simple", "--calls", "1",
                             timeout=900)
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
