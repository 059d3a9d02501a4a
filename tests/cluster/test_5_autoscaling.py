"""Autoscaling and monitoring against the real API server: the HorizontalPodAutoscaler it stores
(and the Deployment's replicas left to it), KEDA's ScaledObject and the Prometheus Operator's
PodMonitor validated by those projects' own CRDs (fetched from their Go modules), a cluster that
does not serve them reported in status, and an autoscaler dropped from the spec deleted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from controlplane import wait_for
from test_2_operator import apply, condition, exists, isvc, load_example

# The real CRDs, from the projects' Go modules (the module zip holds the YAML the projects ship).
THIRD_PARTY_CRDS = [
    ("github.com/kedacore/keda/v2@v2.18.0", "config/crd/bases/keda.sh_scaledobjects.yaml"),
    ("github.com/prometheus-operator/prometheus-operator@v0.85.0",
     "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"),
]


def module_file(module: str, path: str) -> Path:
    cache = Path(os.environ.get("INFERGATE_CACHE", Path.home() / ".cache/infergate"))
    env = {**os.environ, "GOMODCACHE": str(cache / "cluster/gomod-crds"), "GOFLAGS": "-modcacherw"}
    out = subprocess.run(["go", "mod", "download", "-json", module], env=env, check=True,
                         capture_output=True, text=True, cwd="/", timeout=600)
    return Path(json.loads(out.stdout)["Dir"]) / path


def installed_crds(cluster, files: list[Path]):
    """Installs the CRDs in `files` until the generator is closed (a fixture's body)."""
    names = []
    for f in files:
        cluster.kubectl("apply", "--server-side", "-f", str(f))
        names.append(cluster.get_json("-f", str(f))["metadata"]["name"])
    for name in names:
        cluster.kubectl("wait", f"crd/{name}", "--for=condition=Established", "--timeout=60s")
    yield names
    for name in names:
        cluster.kubectl("delete", "crd", name, "--wait=true", check=False)


@pytest.fixture(scope="module")
def third_party_crds(cluster):
    yield from installed_crds(cluster, [module_file(m, p) for m, p in THIRD_PARTY_CRDS])


def triton(autoscaling: dict | None = None, monitoring: dict | None = None) -> dict:
    doc = load_example("triton.yaml")
    doc["spec"]["model"]["resources"] = {"requests": {"cpu": "100m"}}
    if autoscaling is not None:
        doc["spec"]["autoscaling"] = autoscaling
    if monitoring is not None:
        doc["spec"]["monitoring"] = monitoring
    return doc


def test_an_hpa_owns_the_replicas(cluster, operator, namespace):
    doc = triton({"minReplicas": 2, "maxReplicas": 4, "target": 70})
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    wait_for("the HPA", lambda: exists(cluster, namespace, "hpa", name), timeout=60)
    hpa = cluster.get_json("hpa", name, "-n", namespace)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": name}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    # The HPA controller (in kube-controller-manager) takes the Deployment to minReplicas; the
    # operator, which applies no replicas, leaves it there.
    wait_for("the HPA to scale the Deployment to 2", lambda: cluster.get_json(
        "deployment", name, "-n", namespace)["spec"]["replicas"] == 2, timeout=90)
    assert exists(cluster, namespace, "pdb", name)

    # Autoscaling dropped: the HPA goes, and spec.replicas applies again.
    del doc["spec"]["autoscaling"]
    doc["spec"]["replicas"] = 1
    apply(cluster, namespace, doc)
    wait_for("the HPA to be deleted", lambda: not exists(cluster, namespace, "hpa", name),
             timeout=60)
    wait_for("replicas back to spec.replicas", lambda: cluster.get_json(
        "deployment", name, "-n", namespace)["spec"]["replicas"] == 1, timeout=60)


def test_a_kind_the_cluster_does_not_serve_is_reported(cluster, operator, namespace):
    # Before the KEDA CRD is installed (the module fixture below comes later).
    doc = triton({"engine": "KEDA", "maxReplicas": 3})
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)

    def refused():
        c = condition(isvc(cluster, namespace, name), "Ready")
        return c if c and c["reason"] == "ChildRejected" else None

    ready = wait_for("ChildRejected", refused, timeout=60)
    assert "the cluster does not serve keda.sh/v1alpha1 ScaledObject" in ready["message"], ready


def test_keda_and_the_pod_monitor_pass_their_projects_schemas(cluster, operator, namespace,
                                                              third_party_crds):
    doc = triton({"engine": "KEDA", "minReplicas": 0, "maxReplicas": 3,
                  "metric": "PendingRequests", "target": 8,
                  "prometheusAddress": "http://prometheus.monitoring.svc:9090",
                  "extraTriggers": [{"type": "cron", "metadata": {
                      "timezone": "UTC", "start": "0 8 * * *", "end": "0 18 * * *",
                      "desiredReplicas": "1"}}]},
                 {"podMonitor": True, "servicePort": True,
                  "podMonitorLabels": {"release": "prometheus"}, "interval": "15s"})
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    wait_for("the ScaledObject", lambda: exists(cluster, namespace, "scaledobject", name), timeout=60)
    wait_for("the PodMonitor", lambda: exists(cluster, namespace, "podmonitor", name), timeout=60)
    so = cluster.get_json("scaledobject", name, "-n", namespace)
    assert so["spec"]["minReplicaCount"] == 0
    assert [t["type"] for t in so["spec"]["triggers"]] == ["prometheus", "cron"]
    pm = cluster.get_json("podmonitor", name, "-n", namespace)
    assert pm["metadata"]["labels"]["release"] == "prometheus"
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    service = cluster.get_json("service", name, "-n", namespace)
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]
    # No HPA of ours: KEDA makes its own from the ScaledObject.
    assert not exists(cluster, namespace, "hpa", name)

    # Both dropped from the spec: both deleted.
    del doc["spec"]["autoscaling"]
    doc["spec"]["monitoring"] = {}
    apply(cluster, namespace, doc)
    wait_for("the ScaledObject and PodMonitor to be deleted",
             lambda: not exists(cluster, namespace, "scaledobject", name)
             and not exists(cluster, namespace, "podmonitor", name), timeout=60)


def test_a_network_policy_is_stored_and_follows_the_spec(cluster, operator, namespace):
    doc = triton()
    doc["spec"]["networkPolicy"] = {
        "clients": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
        "metricsScrapers": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}]}
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    wait_for("the NetworkPolicy", lambda: exists(cluster, namespace, "networkpolicy", name),
             timeout=60)
    policy = cluster.get_json("networkpolicy", name, "-n", namespace)
    rules = policy["spec"]["ingress"]
    assert [sorted(p["port"] for p in r["ports"]) for r in rules] == [[8000, 8001], [8003], [8002]]
    # The operator's own namespace (the operator runs with POD_NAMESPACE) reaches the admin port.
    operator_peer = rules[1]["from"][0]
    assert operator_peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] \
        == "infergate-system"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"

    # Dropped from the spec: the default policy (clients from anywhere, the monitoring
    # namespace's scrapers).
    del doc["spec"]["networkPolicy"]
    apply(cluster, namespace, doc)
    wait_for("the default NetworkPolicy", lambda: cluster.get_json(
        "networkpolicy", name, "-n", namespace)["spec"]["ingress"][0].get("from") is None,
        timeout=60)
    policy = cluster.get_json("networkpolicy", name, "-n", namespace)
    assert policy["spec"]["ingress"][2]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"}
    # Turned off: deleted.
    doc["spec"]["networkPolicy"] = {"enabled": False}
    apply(cluster, namespace, doc)
    wait_for("the NetworkPolicy to be deleted",
             lambda: not exists(cluster, namespace, "networkpolicy", name), timeout=60)
