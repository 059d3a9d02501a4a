"""The operator writes only its own objects: the chart's ValidatingAdmissionPolicy, enforced by
the real API server, against the operator's own identity (a token of the chart's ServiceAccount,
which the ClusterRole lets write Deployments, Services, ConfigMaps, ... in every namespace).

Refused to it: changing, deleting or taking over (by adding the label) an object without its
managed-by label, in a user's namespace and in kube-system, and creating one without the label.
Admitted: creating, changing and deleting one with the label. The operator's whole reconcile
runs under the same policy in the other cluster tests and on the real node (tests/e2e)."""

from __future__ import annotations

import json

import pytest

from conftest import RELEASE
from controlplane import wait_for

NS = "operator-writes"
MANAGED = {"app.kubernetes.io/managed-by": "infergate-operator"}


@pytest.fixture(scope="module")
def as_operator(cluster, chart, operator_token_kubeconfig):
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl("create", "configmap", "users", "-n", NS, "--from-literal=a=b")
    cluster.kubectl("create", "service", "clusterip", "users", "-n", NS, "--tcp=80:8080")
    cluster.kubectl("create", "deployment", "users", "-n", NS, "--image=registry.example/app:1")
    # The policy is enforced a moment after it is created: wait until it refuses.
    def run(*args, input=None):
        return cluster.kubectl(*args, input=input, check=False,
                               kubeconfig=operator_token_kubeconfig)
    wait_for("the admission policy to be enforced",
             lambda: run("label", "configmap", "users", "-n", NS, "x=y").returncode != 0,
             timeout=60)
    yield run
    cluster.kubectl("delete", "namespace", NS, "--timeout=60s", check=False)


def refused(result, phrase: str):
    assert result.returncode != 0, result.stdout
    assert "ValidatingAdmissionPolicy" in result.stderr and phrase in result.stderr, result.stderr


def test_an_object_that_is_not_the_operators_cannot_be_changed_deleted_or_taken_over(
        cluster, as_operator):
    not_its_own = "changes and deletes only objects it manages"
    refused(as_operator("patch", "deployment", "users", "-n", NS, "--type=merge", "-p",
                        json.dumps({"spec": {"replicas": 0}})), not_its_own)
    refused(as_operator("delete", "service", "users", "-n", NS), not_its_own)
    refused(as_operator("label", "configmap", "users", "-n", NS,
                        "app.kubernetes.io/managed-by=infergate-operator"), not_its_own)
    # The system's own objects, which the ClusterRole alone would let it change.
    refused(as_operator("label", "configmap", "extension-apiserver-authentication",
                        "-n", "kube-system", "x=y"), not_its_own)
    # Untouched.
    users = json.loads(cluster.kubectl("get", "configmap", "users", "-n", NS, "-o", "json").stdout)
    assert users["metadata"].get("labels") is None, users["metadata"]


def test_the_operator_creates_only_labelled_objects_and_manages_them(cluster, as_operator):
    unlabelled = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "unlabelled", "namespace": NS}}
    refused(as_operator("create", "-f", "-", input=json.dumps(unlabelled)),
            "writes only objects labelled app.kubernetes.io/managed-by=infergate-operator")
    labelled = {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "labelled", "namespace": NS, "labels": MANAGED},
                "spec": {"ports": [{"port": 80}]}}
    created = as_operator("create", "-f", "-", input=json.dumps(labelled))
    assert created.returncode == 0, created.stderr
    changed = as_operator("annotate", "service", "labelled", "-n", NS, "k=v")
    assert changed.returncode == 0, changed.stderr
    # Dropping its own label would hand the object to no one: refused too.
    refused(as_operator("label", "service", "labelled", "-n", NS,
                        "app.kubernetes.io/managed-by-"), "writes only objects labelled")
    deleted = as_operator("delete", "service", "labelled", "-n", NS)
    assert deleted.returncode == 0, deleted.stderr


def test_the_policy_matches_the_operator_alone(cluster, as_operator):
    """An administrator is not the operator: the policy does not apply to them."""
    cluster.kubectl("label", "configmap", "users", "-n", NS, "x=y")
    policy = json.loads(cluster.kubectl("get", "validatingadmissionpolicy",
                                        f"{RELEASE}-operator-writes", "-o", "json").stdout)
    [condition] = policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:infergate-system:{RELEASE}" in condition["expression"]
