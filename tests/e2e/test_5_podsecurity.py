"""PodSecurity: the examples run in a namespace that enforces the `restricted` profile (the
fixture applies them there), with the operator's secure defaults for the user's containers; a
resource that overrides them is refused by admission, and its status says so."""

from __future__ import annotations

import json

import scenario

NS = scenario.NS


def test_examples_namespace_enforces_restricted(kube, served):
    labels = kube.get("namespace", NS)["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels


def test_examples_pods_are_admitted_and_run(kube, served):
    for name in served:
        pods = kube.running_pods(NS, f"app.kubernetes.io/instance={name}")
        assert pods, name
        for pod in pods:
            spec = pod["spec"]
            for c in spec["containers"] + spec.get("initContainers", []):
                sc = c.get("securityContext", {})
                assert sc.get("allowPrivilegeEscalation") is False, (name, c["name"], sc)
                assert sc.get("capabilities", {}).get("drop") == ["ALL"], (name, c["name"], sc)
    events = kube.kubectl("get", "events", "-n", NS, "--field-selector", "reason=FailedCreate",
                          "-o", "json").stdout
    assert json.loads(events)["items"] == [], events


def test_an_override_to_root_is_refused_by_admission(kube, served):
    """The defaults are overridable: a model server asked to run as root is the user's choice, and
    the restricted namespace refuses its pods, which the ReplicaSet reports."""
    doc = scenario.adapt(scenario.example("triton.yaml"))
    doc["metadata"]["name"] = "as-root"
    doc["spec"]["model"]["securityContext"] = {"runAsUser": 0}
    doc["spec"]["models"] = []
    kube.apply(json.dumps(doc), "-n", NS)
    try:
        def refused():
            out = kube.kubectl("get", "events", "-n", NS, "--field-selector",
                               "reason=FailedCreate", "-o", "json").stdout
            messages = [e["message"] for e in json.loads(out)["items"]
                        if e["involvedObject"]["name"].startswith("as-root")]
            return [m for m in messages if "violates PodSecurity" in m]
        messages = kube.wait_until("the ReplicaSet's pods to be refused", refused, timeout=120)
        assert "runAsNonRoot" in messages[0] or "runAsUser=0" in messages[0], messages
        assert kube.pods(NS, "app.kubernetes.io/instance=as-root") == []
        obj = kube.get("infsvc", "-n", NS, "as-root")
        assert kube.condition(obj, "Ready").get("status") != "True", obj["status"]
    finally:
        kube.kubectl("delete", "infsvc", "as-root", "-n", NS, "--wait=true", check=False)
