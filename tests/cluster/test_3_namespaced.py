"""The chart with `watchNamespace`: the operator's permissions are a Role and RoleBinding in that
namespace, no ClusterRole, and an operator running with them (its ServiceAccount's token) does its
whole job there without one refusal, and touches nothing elsewhere.

The session's cluster-wide operator (test_2) is still running and reconciles the same resources;
what this proves is what the namespaced one can and cannot do, from its own log and counters."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest

from conftest import REPO, SIDECAR_IMAGE, start_operator
from controlplane import wait_for
from test_2_operator import apply, exists, load_example

RELEASE = "scoped"
RELEASE_NAMESPACE = "scoped-system"
WATCHED = "scoped-models"
ELSEWHERE = "scoped-elsewhere"


@pytest.fixture(scope="module")
def scoped(cluster, helm, chart, sidecar, workdir):
    # The CRD comes with the main release (`chart`); this one is installed with --skip-crds.
    for ns in (WATCHED, ELSEWHERE):
        cluster.kubectl("create", "namespace", ns)
    helm("install", RELEASE, str(REPO / "charts/infergate"), "--namespace", RELEASE_NAMESPACE,
         "--create-namespace", "--skip-crds", "--set", f"watchNamespace={WATCHED}",
         "--set", "leaderElection.enabled=false",
         "--set", f"sidecarImage.repository={SIDECAR_IMAGE.split(':')[0]}",
         "--set", "sidecarImage.tag=test")
    [account] = cluster.get_json("serviceaccount", "-n", RELEASE_NAMESPACE, "-l",
                                 f"app.kubernetes.io/instance={RELEASE}")["items"]
    name = account["metadata"]["name"]
    token = cluster.kubectl("create", "token", name, "-n", RELEASE_NAMESPACE,
                            "--duration=1h").stdout.strip()
    kubeconfig = cluster.token_kubeconfig(workdir / "scoped.kubeconfig", token)
    proc = start_operator("scoped-operator", kubeconfig, sidecar["admin"],
                          workdir / "scoped-operator.log", [f"--namespace={WATCHED}"])
    yield {"account": f"system:serviceaccount:{RELEASE_NAMESPACE}:{name}", "operator": proc}
    proc.stop()
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)
    for ns in (WATCHED, ELSEWHERE, RELEASE_NAMESPACE):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def can(cluster, account: str, *args: str) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={account}", check=False)
    return result.stdout.strip() == "yes"


def test_the_rbac_is_a_role_in_the_watched_namespace_only(cluster, scoped):
    account = scoped["account"]
    assert can(cluster, account, "patch", "deployments", "-n", WATCHED)
    assert can(cluster, account, "list", "inferenceservices.infergate.dev", "-n", WATCHED)
    assert not can(cluster, account, "list", "inferenceservices.infergate.dev", "-n", ELSEWHERE)
    assert not can(cluster, account, "list", "inferenceservices.infergate.dev", "--all-namespaces")
    assert not can(cluster, account, "create", "deployments", "-n", ELSEWHERE)
    roles = cluster.get_json("clusterrole", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    assert roles == []


def test_the_namespaced_operator_does_its_job_with_that_role(cluster, scoped):
    doc = load_example("triton.yaml")
    apply(cluster, WATCHED, doc)
    name = doc["metadata"]["name"]
    operator = scoped["operator"]

    def reconciled() -> bool:
        text = urllib.request.urlopen(operator.metrics, timeout=5).read().decode()
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("infergate_operator_reconcile")}
        return values.get("infergate_operator_reconciles_total", 0) > 0

    wait_for("the namespaced operator to reconcile", reconciled, timeout=60)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", WATCHED, "--for=condition=Ready",
                    "--timeout=120s")
    for kind, child in (("deployment", name), ("service", name), ("configmap", f"{name}-sidecar")):
        assert exists(cluster, WATCHED, kind, child), kind
    # A while of requeues (every 2 s) with nothing refused.
    time.sleep(6)
    assert operator.alive(), operator.output()[-4000:]
    refused = [line for line in operator.output().splitlines()
               if re.search(r'is forbidden: User "[^"]+" cannot', line)]
    assert not refused, "\n".join(refused[:10])
    text = urllib.request.urlopen(operator.metrics, timeout=5).read().decode()
    errors = next(float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("infergate_operator_reconcile_errors_total "))
    assert errors == 0, json.dumps(text[-2000:])


def test_it_leaves_other_namespaces_alone(cluster, scoped):
    doc = load_example("triton.yaml")
    apply(cluster, ELSEWHERE, doc)
    # The cluster-wide operator of test_2 reconciles it; the namespaced one never sees it.
    time.sleep(4)
    log = scoped["operator"].output()
    assert ELSEWHERE not in log, [line for line in log.splitlines() if ELSEWHERE in line][:5]
