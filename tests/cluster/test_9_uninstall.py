"""`helm uninstall` leaves nothing of the release or of the operator behind (last in the run)."""

from __future__ import annotations

from conftest import RELEASE, RELEASE_NAMESPACE
from controlplane import wait_for

KINDS = ("deployments,replicasets,services,configmaps,serviceaccounts,roles,rolebindings,"
         "poddisruptionbudgets,leases,networkpolicies")
CLUSTER_KINDS = "clusterroles,clusterrolebindings"


def names(cluster, *args) -> list[str]:
    out = cluster.kubectl("get", *args, "-o", "name").stdout
    return [line for line in out.splitlines() if line]


def test_helm_uninstall_leaves_no_operator_objects(cluster, helm, chart, operator):
    # Nothing may be left of the InferenceServices either: remove them first, as a user would.
    cluster.kubectl("delete", "infsvc", "--all", "--all-namespaces", "--wait=true", "--timeout=60s")
    operator.stop()
    instance = f"app.kubernetes.io/instance={RELEASE}"
    assert names(cluster, KINDS, "-n", RELEASE_NAMESPACE, "-l", instance), "the chart installed nothing?"
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout=2m")

    # The operator's ReplicaSet and pod go by garbage collection, a moment after the Deployment.
    wait_for("the release's objects to be gone",
             lambda: names(cluster, KINDS + ",pods", "-n", RELEASE_NAMESPACE, "-l", instance) == [],
             timeout=60)
    assert names(cluster, CLUSTER_KINDS, "-l", instance) == []
    assert names(cluster, KINDS, "--all-namespaces", "-l", "app.kubernetes.io/managed-by=infergate-operator") == []
    # The operator's leader-election Lease goes with the release.
    assert [n for n in names(cluster, "leases", "-n", RELEASE_NAMESPACE) if "infergate" in n] == []
    # Helm never deletes CRDs on uninstall (its documented policy): the CRD, and only it, stays.
    assert names(cluster, "crd", "inferenceservices.infergate.dev") == [
        "customresourcedefinition.apiextensions.k8s.io/inferenceservices.infergate.dev"]
