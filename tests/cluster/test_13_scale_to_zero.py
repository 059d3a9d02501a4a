"""Scale to zero against the real API server (`spec.scaleToZero`), the pods kwok's, their sidecar
the suite's one on loopback (whose /status says how long it has been quiet):

- the activator's objects made as the chart's ServiceAccount may make them (its Role grants the
  one Deployment's scale, which RBAC lets the operator grant only because it holds it);
- the client Service selecting no pod, its EndpointSlice the operator's, on the ready pods;
- once every pod has been quiet for idleSeconds, the Deployment at 0 and the slice on the
  activator's pods; status.scaleToZero and the ScaledToZero condition say so, and Ready stays;
- the activator's account scales it up through the scale subresource, and may do nothing more;
- the operator's own identity may not use the scale subresource (the admission policy);
- with KEDA, the ScaledObject's held-calls trigger passes KEDA's schema;
- scaleToZero removed: the selector back, the activator's objects and the slice deleted."""

from __future__ import annotations

import pytest

from controlplane import wait_for
from test_2_operator import apply, condition, exists, isvc, load_example
from test_5_autoscaling import installed_crds, module_file

KEDA = ("github.com/kedacore/keda/v2@v2.18.0", "config/crd/bases/keda.sh_scaledobjects.yaml")
IDLE = 10


@pytest.fixture(scope="module")
def keda_crd(cluster):
    yield from installed_crds(cluster, [module_file(*KEDA)])


def triton() -> dict:
    doc = load_example("triton.yaml")
    doc["spec"]["replicas"] = 1
    doc["spec"]["scaleToZero"] = {"idleSeconds": IDLE}
    doc["spec"]["model"]["resources"] = {"requests": {"cpu": "100m"}}
    return doc


def slice_addresses(cluster, namespace, name) -> list[str]:
    s = cluster.get_json("endpointslice", f"{name}-infergate", "-n", namespace)
    return sorted(a for e in s.get("endpoints") or [] for a in e["addresses"])


def pod_ips(cluster, namespace, selector) -> list[str]:
    pods = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return sorted(p["status"]["podIP"] for p in pods
                  if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
                  and any(c["type"] == "Ready" and c["status"] == "True"
                          for c in p["status"].get("conditions", [])))


def test_idle_to_zero_and_back_through_the_scale_subresource(cluster, operator, namespace,
                                                             operator_token_kubeconfig):
    doc = triton()
    name = doc["metadata"]["name"]
    service_pods = f"app.kubernetes.io/name=infergate,app.kubernetes.io/instance={name}"
    activator_pods = f"app.kubernetes.io/name=infergate-activator,app.kubernetes.io/instance={name}"
    apply(cluster, namespace, doc)
    for kind, object_name in (("deployment", f"{name}-activator"), ("configmap", f"{name}-activator"),
                              ("role", f"{name}-activator"), ("rolebinding", f"{name}-activator"),
                              ("serviceaccount", f"{name}-activator"), ("service", f"{name}-peers")):
        wait_for(f"{kind} {object_name}", lambda: exists(cluster, namespace, kind, object_name),
                 timeout=60)
    selector = cluster.get_json("service", name, "-n", namespace)["spec"]["selector"]
    assert selector == {"infergate.dev/endpoints-by": "operator"}, selector
    # The activator's account: the one Deployment's scale, the one InferenceService, no more.
    account = f"system:serviceaccount:{namespace}:{name}-activator"
    def can(*what):
        return cluster.kubectl("auth", "can-i", *what, "-n", namespace, f"--as={account}",
                               check=False).stdout.strip() == "yes"
    assert can("patch", f"deployments/{name}", "--subresource=scale")
    assert not can("patch", "deployments/other", "--subresource=scale")
    assert not can("patch", f"deployments/{name}")
    assert can("get", f"inferenceservices.infergate.dev/{name}")
    assert not can("get", "inferenceservices.infergate.dev/other")
    assert not can("list", "pods") and not can("get", "secrets")

    # Quiet for idleSeconds: zero, the activator in the Service.
    def at_zero():
        obj = isvc(cluster, namespace, name)
        state = obj.get("status", {}).get("scaleToZero") or {}
        replicas = cluster.get_json("deployment", name, "-n", namespace)["spec"].get("replicas")
        return state.get("state") == "ScaledToZero" and replicas == 0 and obj
    obj = wait_for("the service at zero", at_zero, timeout=IDLE + 90)
    assert condition(obj, "ScaledToZero")["status"] == "True"
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "ScaledToZero"), ready
    wait_for("the slice on the activator",
             lambda: (ips := pod_ips(cluster, namespace, activator_pods))
             and slice_addresses(cluster, namespace, name) == ips, timeout=60)

    # The operator's own identity never uses the scale subresource.
    refused = cluster.kubectl("scale", "deployment", name, "-n", namespace, "--replicas=1",
                              check=False, kubeconfig=operator_token_kubeconfig)
    assert refused.returncode != 0 and "does not write deployments/scale" in refused.stderr, \
        refused.stderr

    # The activator's account raises the scale subresource, as the activator does (`kubectl
    # scale` would read the Deployment first, which the account may not). The pods coming back
    # and the Service following them are shown on the real node (tests/e2e): here every pod's
    # sidecar is the suite's one, long quiet, so the operator takes the service to zero again.
    cluster.kubectl("patch", "deployment", name, "-n", namespace, "--subresource=scale",
                    "--type=merge", "-p", '{"spec": {"replicas": 1}}', f"--as={account}")

    del doc["spec"]["scaleToZero"]
    apply(cluster, namespace, doc)
    wait_for("the activator's objects and the slice deleted", lambda: not any(
        exists(cluster, namespace, kind, object_name) for kind, object_name in (
            ("deployment", f"{name}-activator"), ("configmap", f"{name}-activator"),
            ("role", f"{name}-activator"), ("endpointslice", f"{name}-infergate"),
            ("service", f"{name}-peers"))), timeout=60)
    selector = cluster.get_json("service", name, "-n", namespace)["spec"]["selector"]
    assert selector.get("app.kubernetes.io/instance") == name, selector
    wait_for("the count back in the spec", lambda: cluster.get_json(
        "deployment", name, "-n", namespace)["spec"].get("replicas") == 1, timeout=60)


def test_with_keda_held_calls_are_a_trigger_keda_accepts(cluster, operator, namespace, keda_crd):
    doc = triton()
    name = doc["metadata"]["name"]
    doc["spec"]["autoscaling"] = {
        "engine": "KEDA", "minReplicas": 0, "maxReplicas": 3, "metric": "PendingRequests",
        "prometheusAddress": "http://prometheus.monitoring.svc:9090"}
    apply(cluster, namespace, doc)
    wait_for("the ScaledObject", lambda: exists(cluster, namespace, "scaledobject", name),
             timeout=60)
    so = cluster.get_json("scaledobject", name, "-n", namespace)
    assert [t.get("name") for t in so["spec"]["triggers"]] == [None, "held-calls"], so
    assert so["spec"]["minReplicaCount"] == 0
    ready = condition(isvc(cluster, namespace, name), "Ready") or {}
    assert ready.get("reason") != "ChildRejected", ready
