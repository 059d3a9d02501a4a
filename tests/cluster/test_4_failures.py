"""Failures shown in the InferenceService's status, never only in Events, with the real API
server's and controllers' own answers: a child the server refuses, pods refused by PodSecurity
admission, a rollout that cannot progress, and a new generation whose pods stay Pending while the
previous ones serve."""

from __future__ import annotations

import copy
import json

from controlplane import wait_for
from test_2_operator import apply, condition, isvc, load_example


def triton_doc() -> dict:
    return load_example("triton.yaml")


def wait_reason(cluster, namespace, name, kind, reason, timeout=90) -> dict:
    """The InferenceService once its `kind` condition has `reason`."""
    def check():
        obj = isvc(cluster, namespace, name)
        c = condition(obj, kind)
        return obj if c and c["reason"] == reason else None
    return wait_for(f"{kind} with reason {reason}", check, timeout=timeout)


def test_a_child_the_server_refuses_is_reported_then_recovers(cluster, operator, namespace):
    doc = triton_doc()
    name = doc["metadata"]["name"]
    # A typo the CRD keeps (volume mounts are Kubernetes objects it does not check): the
    # Deployment is refused with 422.
    broken = copy.deepcopy(doc)
    broken["spec"]["model"].setdefault("volumeMounts", []).append(
        {"name": "modles", "mountPath": "/extra"})
    apply(cluster, namespace, broken)
    obj = wait_reason(cluster, namespace, name, "Ready", "ChildRejected")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    assert f"the API server refused Deployment '{name}' (422)" in ready["message"], ready
    assert 'Not found: "modles"' in ready["message"], ready
    info = obj["status"]["lastFailureInfo"]
    assert info["reason"] == "ChildRejected"
    assert info["location"] == f"Deployment/{name}"
    assert info["generation"] == obj["metadata"]["generation"]
    events = cluster.get_json("events", "-n", namespace)["items"]
    assert any(e.get("reason") == "ChildRejected" for e in events), events

    # Fixed: the service comes up, and the last failure stays on record.
    apply(cluster, namespace, doc)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Ready",
                    "--timeout=120s")
    obj = isvc(cluster, namespace, name)
    assert obj["status"]["lastFailureInfo"]["reason"] == "ChildRejected"


def test_pods_refused_by_pod_security_are_reported(cluster, operator, namespace):
    cluster.kubectl("label", "namespace", namespace,
                    "pod-security.kubernetes.io/enforce=restricted")
    doc = triton_doc()
    name = doc["metadata"]["name"]
    # runAsUser 0 is kept as written (root), which the restricted profile refuses.
    doc["spec"]["model"]["securityContext"] = {"runAsUser": 0}
    apply(cluster, namespace, doc)
    obj = wait_reason(cluster, namespace, name, "Ready", "PodsRejected")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    assert "violates PodSecurity" in ready["message"], ready
    assert obj["status"]["lastFailureInfo"]["location"] == f"Deployment/{name}"


def test_a_rollout_that_cannot_progress_is_reported(cluster, operator, namespace):
    doc = triton_doc()
    name = doc["metadata"]["name"]
    doc["spec"].setdefault("pod", {})["nodeSelector"] = {"example.com/no-such-node": "true"}
    doc["spec"]["rollout"] = {"progressDeadlineSeconds": 5}
    apply(cluster, namespace, doc)
    # The pod's own reason first: no node takes it.
    obj = wait_reason(cluster, namespace, name, "Ready", "Unschedulable")
    assert "didn't match Pod's node affinity/selector" in condition(obj, "Ready")["message"]
    assert obj["status"]["lastFailureInfo"]["location"].startswith(f"Pod/{name}-")
    # Then the Deployment gives up on the rollout, which RolledOut says.
    obj = wait_reason(cluster, namespace, name, "RolledOut", "ProgressDeadlineExceeded")
    assert condition(obj, "RolledOut")["status"] == "False"
    assert condition(obj, "Ready")["status"] == "False"


def test_a_pending_new_generation_is_not_ready_while_the_old_pods_serve(cluster, operator,
                                                                        namespace):
    doc = triton_doc()
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Ready",
                    "--timeout=120s")
    # A new spec whose pod no node takes: the old pod keeps serving.
    pending = copy.deepcopy(doc)
    pending["spec"].setdefault("pod", {})["nodeSelector"] = {"example.com/no-such-node": "true"}
    apply(cluster, namespace, pending)
    generation = isvc(cluster, namespace, name)["metadata"]["generation"]

    def rolling():
        obj = isvc(cluster, namespace, name)
        rolled = condition(obj, "RolledOut")
        if obj["status"].get("observedGeneration") != generation or \
                rolled["reason"] != "RolloutInProgress":
            return None
        return obj if condition(obj, "Ready")["reason"] == "Unschedulable" else None

    obj = wait_for("the new generation reported as not rolled out", rolling, timeout=90)
    assert condition(obj, "Available")["status"] == "True", obj["status"]
    assert condition(obj, "RolledOut")["status"] == "False"
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and ready["observedGeneration"] == generation, ready
    pods = cluster.get_json("pods", "-n", namespace)["items"]
    assert any(p["status"].get("phase") == "Running" for p in pods), json.dumps(pods)[:2000]

    # Back to a spec that fits: rolled out and Ready for the newest generation.
    apply(cluster, namespace, doc)
    generation = isvc(cluster, namespace, name)["metadata"]["generation"]

    def ready_again():
        obj = isvc(cluster, namespace, name)
        c = condition(obj, "Ready")
        return obj if c["status"] == "True" and c["observedGeneration"] == generation else None

    try:
        obj = wait_for("Ready for the newest generation", ready_again, timeout=120)
    except TimeoutError as e:
        deployment = cluster.get_json("deployment", name, "-n", namespace)
        pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
        raise AssertionError(f"{e}\n{json.dumps(isvc(cluster, namespace, name)['status'])}\n"
                             f"{json.dumps(deployment['status'])}\n{pods}") from None
    assert condition(obj, "RolledOut")["reason"] == "RolloutComplete"
