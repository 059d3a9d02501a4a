"""A scale-out reaches a long-lived gRPC client: one gRPC channel (tritonclient, one caller)
keeps calling the `triton` Service while its InferenceService goes from 1 to 3 replicas. A
channel holds one connection, which kube-proxy sent to one pod; the sidecars ask every connection
to go after `spec.sidecar.maxConnectionAgeSeconds` (short here), so the channel reconnects and
its calls reach every pod, which each pod's own statistics show. No call is lost on the way.
"""

from __future__ import annotations

import json
import time

import scenario
from test_4_faults import assert_nothing_lost, infsvc, ready, record

NS = scenario.NS
AGE_SECONDS = 3
SELECTOR = "app.kubernetes.io/instance=triton"


def patch(kube, spec: dict):
    kube.kubectl("patch", "infsvc", "triton", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": spec}))


def settled(kube, replicas: int):
    """The resource Ready at its generation with `replicas` running pods, all of this
    generation's template: their addresses."""
    def check():
        pods = kube.running_pods(NS, SELECTOR)
        obj = infsvc(kube, "triton")
        if not ready(kube, "triton") or obj["status"].get("replicas") != replicas:
            return False
        if len(pods) != replicas or not all(p["status"].get("podIP") for p in pods):
            return False
        return sorted(p["status"]["podIP"] for p in pods)
    return check


def test_one_grpc_channel_reaches_every_pod_after_a_scale_out(kube, client):
    patch(kube, {"replicas": 1, "sidecar": {"maxConnectionAgeSeconds": AGE_SECONDS}})
    kube.wait_until("one pod with the short connection age", settled(kube, 1), timeout=420)
    load = scenario.Load(kube, "triton", threads=1, protocols="grpc")
    try:
        time.sleep(3)
        kube.kubectl("scale", "infsvc", "triton", "-n", NS, "--replicas=3")
        scaled = time.monotonic()
        ips = kube.wait_until("three ready pods", settled(kube, 3), timeout=420)
        ready_after = time.monotonic() - scaled
        before = scenario.call(kube, "calls.py", "served", ",".join(ips), "--model", "classifier")

        def every_pod_served():
            now = scenario.call(kube, "calls.py", "served", ",".join(ips), "--model",
                                "classifier")
            return all(now[ip] > before[ip] for ip in ips) and now
        # The channel reconnects every 2.7–3.3 s, to a pod kube-proxy picks at random: within
        # 90 s, a pod it never reaches would be a one-in-a-million draw.
        after = kube.wait_until("the channel's calls to reach every pod", every_pod_served,
                                timeout=90, interval=2)
        all_served_after = time.monotonic() - scaled
    finally:
        summary = load.stop()
    assert_nothing_lost(summary)
    assert summary["errors"] == 0, json.dumps(summary, indent=1)
    record(kube, "scale-out", {"ready_after_s": round(ready_after, 1),
                               "every_pod_served_after_s": round(all_served_after, 1),
                               "calls_per_pod": {ip: after[ip] - before[ip] for ip in ips},
                               "load": summary})
    # Left at three replicas and the short age: only the uninstall follows, and a rollout back
    # would cost CI a minute.
