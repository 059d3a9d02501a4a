"""The NetworkPolicy the operator renders for each InferenceService, enforced on the real node
(kube-network-policies, for this module only: the node's bridge plugin enforces none). Each
policy admits the client ports from anywhere, the admin port from the operator's pods only, the
metrics port from the `monitoring` namespace only, and nothing else; the kubelet's probes, from
the node, pass.

Proven from pods, as an attacker would try it: the same connections from a pod of the examples'
namespace and from one of another namespace, first without enforcement (the admin and metrics
ports answer them: the sidecar's own rules are all that stands there) and then with it (dropped).
A scraper in `monitoring` still reaches the metrics port, the operator still reads every
sidecar's /status, and no pod stops being Ready."""

from __future__ import annotations

import re
import urllib.request

import pytest

import scenario
from test_3_intruder import INTRUDER_NS, intruder  # noqa: F401 - a fixture

NS = scenario.NS
MONITORING_NS = "monitoring"
# The sidecar's ports as the examples keep them (spec.sidecar.ports' defaults).
HTTP, METRICS, ADMIN = 8000, 8002, 8003


def sidecar_pods(kube, served) -> list[dict]:
    return [p for name in served
            for p in kube.running_pods(NS, f"app.kubernetes.io/instance={name}")]


def reach(kube, pods: list[dict], who: str, namespace: str) -> dict:
    """From pod `who`: a TCP connection to each pod's admin and metrics ports, and the REST port's
    readiness, keyed `<pod>/<what>`."""
    args = []
    for pod in pods:
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        args += ["--tcp", f"{name}/admin={ip}:{ADMIN}", "--tcp", f"{name}/metrics={ip}:{METRICS}",
                 "--get", f"{name}/ready=http://{ip}:{HTTP}/v2/health/ready"]
    return scenario.call(kube, "reach.py", *args, pod=who, namespace=namespace)


def restarts(kube, pods: list[dict]) -> dict:
    counts = {}
    for pod in pods:
        now = kube.get("pod", "-n", NS, pod["metadata"]["name"])
        for c in now["status"].get("containerStatuses", []) + \
                now["status"].get("initContainerStatuses", []):
            counts[f"{pod['metadata']['name']}/{c['name']}"] = c["restartCount"]
    return counts


def operator_metric(kube, name: str) -> float:
    """A counter of the operator, summed over its replicas (only the leader reconciles), read
    from the node."""
    total = 0.0
    for pod in kube.running_pods(scenario.RELEASE_NS, "app.kubernetes.io/name=infergate-operator"):
        url = f"http://{pod['status']['podIP']}:8080/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        total += sum(float(m.group(1)) for m in
                     re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
    return total


@pytest.fixture(scope="module")
def scraper(kube, served):
    """A pod of the `monitoring` namespace, which the rendered policies name as the scrapers'."""
    kube.apply(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {MONITORING_NS}}}\n")
    return scenario.start_client(kube, namespace=MONITORING_NS, name="scraper")


def test_the_rendered_policies_are_enforced_from_pods(kube, served, client, intruder, scraper):
    pods = sidecar_pods(kube, served)
    assert pods
    for name in served:
        policy = kube.get("networkpolicy", "-n", NS, name)
        assert policy["spec"]["policyTypes"] == ["Ingress"], policy["spec"]
    callers = [(client, NS), (intruder, INTRUDER_NS)]
    # Without enforcement, every pod reaches every port: what the sidecar itself allows there
    # (401 for /status, 403 for the drain: test_3_intruder) is all that stands in the way.
    for who, namespace in callers:
        got = reach(kube, pods, who, namespace)
        assert all(v == "accepted" for k, v in got.items() if not k.endswith("/ready")), got
    restarts_before = restarts(kube, pods)

    with kube.node.network_policies():
        for who, namespace in callers:
            got = reach(kube, pods, who, namespace)
            for pod in pods:
                name = pod["metadata"]["name"]
                # The client port: admitted from anywhere.
                assert got[f"{name}/ready"][0] == 200, (who, name, got)
                # The admin and metrics ports: dropped for every other pod.
                assert got[f"{name}/admin"] == "timeout", (who, name, got)
                assert got[f"{name}/metrics"] == "timeout", (who, name, got)
        # The scrapers' namespace reaches the metrics port, and nothing more.
        got = reach(kube, pods, scraper, MONITORING_NS)
        for pod in pods:
            name = pod["metadata"]["name"]
            assert got[f"{name}/metrics"] == "accepted", (name, got)
            assert got[f"{name}/admin"] == "timeout", (name, got)

        # The operator still reads every sidecar's /status. Connections it opened before the
        # enforcement would pass as established ones, so its pods are replaced: new processes,
        # new connections, and a reconcile of every resource as they start.
        selector = "app.kubernetes.io/name=infergate-operator"
        old = {p["metadata"]["uid"] for p in kube.pods(scenario.RELEASE_NS, selector)}
        kube.kubectl("delete", "pod", "-n", scenario.RELEASE_NS, "-l", selector, "--wait=true",
                     timeout=120)

        def new_operator_reconciled_all():
            pods = kube.running_pods(scenario.RELEASE_NS, selector)
            if not pods or any(p["metadata"]["uid"] in old for p in pods):
                return False
            return operator_metric(kube, "infergate_operator_reconciles_total") >= len(served)
        kube.wait_until("a new operator to reconcile every resource", new_operator_reconciled_all,
                        timeout=180, interval=2)
        assert operator_metric(kube, "infergate_operator_probe_failures_total") == 0
        for name in served:
            obj = kube.get("infsvc", "-n", NS, name)
            assert kube.condition(obj, "Ready").get("status") == "True", (name, obj["status"])
            assert kube.condition(obj, "Degraded").get("reason") != "PodsNotReporting", \
                (name, obj["status"])

    # The kubelet's probes passed throughout: no container restarted, every pod is Ready.
    assert restarts(kube, pods) == restarts_before
    for pod in pods:
        now = kube.get("pod", "-n", NS, pod["metadata"]["name"])
        ready = [c for c in now["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", now["status"]
