"""Faults on the real node, each under client load (REST and gRPC callers through the Service):
the model server killed, a rollout, the operator's leader deleted. Every call must end with an
answer or an error the client saw; no call may be lost, and no answer may be wrong. The errors a
client sees are those written in docs/e2e.md ("What a client sees").
"""

from __future__ import annotations

import json
import os
import signal
import time

import scenario

NS = scenario.NS


def infsvc(kube, name):
    return kube.get("infsvc", "-n", NS, name)


def ready(kube, name) -> bool:
    obj = infsvc(kube, name)
    c = kube.condition(obj, "Ready")
    return c.get("status") == "True" and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]


def record(kube, name: str, what: dict):
    """Keeps what a fault test saw in the work directory's logs (kept with
    INFERGATE_KEEP_E2E_LOGS=1), for docs/e2e.md."""
    (kube.work / "logs" / f"fault-{name}.json").write_text(json.dumps(what, indent=1))


def assert_nothing_lost(summary: dict):
    assert summary["hung"] == 0, summary
    assert summary["wrong"] == 0, summary
    assert summary["ok"] > 0, summary
    for caller in summary["callers"]:
        assert caller["ok"] > 0, summary


def test_model_container_killed(kube, client):
    """SIGKILL to the model server's process: the container restarts; the resource's status leaves
    Ready while it is down and comes back; callers get errors only while it is down."""
    pod = kube.running_pods(NS, "app.kubernetes.io/instance=triton")[0]
    name = pod["metadata"]["name"]
    restarts = {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}
    load = scenario.Load(kube, "triton")
    time.sleep(5)
    pid = kube.node.container_pid(name, "model", NS)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()

    def not_ready():
        c = kube.condition(infsvc(kube, "triton"), "Ready")
        return c.get("status") != "True" and c
    seen = kube.wait_until("status to leave Ready", not_ready, timeout=120, interval=0.5)
    kube.wait_until("status to be Ready again", lambda: ready(kube, "triton"), timeout=300, interval=1)
    back = time.monotonic() - killed
    time.sleep(5)
    summary = load.stop()
    assert_nothing_lost(summary)
    pod = kube.get("pod", "-n", NS, name)
    after = {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}
    assert after["model"] == restarts["model"] + 1, (restarts, after)
    record(kube, "model-killed", {"not_ready_condition": seen, "ready_again_after_s": round(back, 1),
                                  "load": summary})


def test_rollout_has_no_failed_requests(kube, client):
    """A spec change rolls the pods; the Service keeps answering every call."""
    before = {p["metadata"]["name"] for p in kube.running_pods(NS, "app.kubernetes.io/instance=triton")}
    load = scenario.Load(kube, "triton")
    time.sleep(5)
    kube.kubectl("patch", "infsvc", "triton", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": {"pod": {"annotations": {"e2e/rollout": str(time.time())}}}}))

    def rolled():
        pods = kube.running_pods(NS, "app.kubernetes.io/instance=triton")
        names = {p["metadata"]["name"] for p in pods}
        gone = not (names & before)
        return gone and ready(kube, "triton") and names
    kube.wait_until("the rollout to finish", rolled, timeout=420, interval=1)
    time.sleep(5)
    summary = load.stop()
    record(kube, "rollout", summary)
    assert_nothing_lost(summary)
    assert summary["errors"] == 0, json.dumps(summary, indent=1)
    # The old pods drained through their preStop hook, `infergate-drain` run in the model
    # container from the volume the sidecar copied it into; a hook that failed (not there, not
    # runnable, refused by the sidecar) is an event.
    events = kube.kubectl("get", "events", "-n", NS, "--field-selector",
                          "reason=FailedPreStopHook", "-o", "json").stdout
    failed = [e for e in json.loads(events)["items"]
              if e["involvedObject"]["name"] in before]
    assert failed == [], json.dumps(failed, indent=1)


def test_operator_leader_deleted(kube, release, served):
    """Two operator replicas: delete the leader's pod; the other takes the Lease, and a spec change
    made afterwards still reaches the status."""
    old = scenario.leader(kube)
    assert old
    kube.kubectl("delete", "pod", "-n", scenario.RELEASE_NS, old, "--wait=false")
    new = kube.wait_until("another operator to lead",
                          lambda: (h := scenario.leader(kube)) and h != old and h, timeout=120)
    assert new != old
    kube.kubectl("scale", "infsvc", "sequence", "-n", NS, "--replicas=1")

    def converged():
        obj = infsvc(kube, "sequence")
        st = obj["status"]
        return (st.get("observedGeneration") == obj["metadata"]["generation"]
                and st.get("replicas") == 1
                and kube.condition(obj, "Ready").get("status") == "True")
    kube.wait_until("the status to follow the new spec", converged, timeout=180)
