"""No escalation through an InferenceService: the chart's tenant-fields ValidatingAdmissionPolicy,
enforced by the real API server, for real users (impersonated) whose rights RBAC decides.

- `tenant` may write InferenceServices in the namespace and nothing else. Every field that would
  make the operator create something the tenant could not create directly is refused, with a
  message that names the field and the permission it lacks.
- `platform` may also create each of those kinds: the same fields are admitted.
- `delegated` holds only the custom verbs on InferenceServices that an administrator grants for
  finer control than the kind: admitted too.
- A KEDA trigger that borrows a ClusterTriggerAuthentication is refused to everyone.
- An update that leaves such a field as it was is admitted, whoever sends it, so objects
  admitted before keep working.

What each user may do is checked with `kubectl auth can-i` first (KEDA's and the Prometheus
Operator's real CRDs are served, so that their kinds resolve), so a refusal is the policy's,
not a gap in the test's RBAC. Creates are server-side dry runs: admission runs in full and nothing
is stored for an operator to act on."""

from __future__ import annotations

import json

import pytest

from controlplane import wait_for
from test_5_autoscaling import third_party_crds  # noqa: F401 (a fixture: KEDA's and the
#                                                  Prometheus Operator's CRDs, for kubectl auth can-i)

NS = "tenant-fields"
API = "infergate.dev/v1alpha1"
KINDS = [("", "services"), ("networking.k8s.io", "networkpolicies"),
         ("keda.sh", "scaledobjects"), ("monitoring.coreos.com", "podmonitors"),
         ("", "pods"), ("rbac.authorization.k8s.io", "rolebindings")]
VERBS = ["expose", "set-network-peers", "add-triggers", "label-monitors", "use-serviceaccount"]
WRITE = ["get", "list", "create", "update", "patch", "delete"]

# Each escalating field: (spec fragment, what the refusal must name).
FIELDS = {
    "load_balancer": ({"service": {"type": "LoadBalancer"}},
                      ["spec.service.type LoadBalancer", "create on services", "verb expose"]),
    "node_port": ({"service": {"type": "NodePort"}},
                  ["spec.service.type NodePort", "create on services"]),
    "peers_beyond_the_namespace": (
        {"networkPolicy": {"clients": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}},
        ["spec.networkPolicy", "create on networkpolicies.networking.k8s.io",
         "verb set-network-peers"]),
    "peers_of_other_namespaces": (
        {"networkPolicy": {"metricsScrapers": [{"namespaceSelector": {}}]}},
        ["spec.networkPolicy", "create on networkpolicies.networking.k8s.io"]),
    "keda_triggers": (
        {"autoscaling": {"engine": "KEDA", "minReplicas": 1, "maxReplicas": 2,
                         "extraTriggers": [{"type": "metrics-api",
                                            "metadata": {"url": "http://169.254.169.254/",
                                                         "valueLocation": "a",
                                                         "targetValue": "1"}}]}},
        ["spec.autoscaling.extraTriggers", "create on scaledobjects.keda.sh",
         "verb add-triggers"]),
    "pod_monitor_labels": (
        {"monitoring": {"podMonitor": True, "podMonitorLabels": {"release": "prometheus"}}},
        ["spec.monitoring.podMonitorLabels", "create on podmonitors.monitoring.coreos.com",
         "verb label-monitors"]),
    "another_service_account": (
        {"pod": {"serviceAccountName": "payments"}},
        ["spec.pod.serviceAccountName", "ServiceAccount payments", "create on pods",
         "verb use-serviceaccount"]),
}


def resource(name: str, extra: dict | None = None) -> dict:
    spec = {"model": {"image": "registry.example/model:1"}}
    spec.update(extra or {})
    return {"apiVersion": API, "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


@pytest.fixture(scope="module")
def users(cluster, chart, third_party_crds):  # noqa: F811
    cluster.kubectl("create", "namespace", NS)
    roles = {
        "tenant": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                    "verbs": WRITE}],
        "platform": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                      "verbs": WRITE}]
        + [{"apiGroups": [group], "resources": [kind], "verbs": ["create"]}
           for group, kind in KINDS],
        "delegated": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                       "verbs": WRITE + VERBS}],
        "pods-only": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                       "verbs": WRITE},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
    }
    for user, rules in roles.items():
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": user, "namespace": NS}, "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": user, "namespace": NS},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": user}]}]}))

    def run(user: str, *args: str, doc: dict | None = None):
        return cluster.kubectl(*args, f"--as={user}", input=json.dumps(doc) if doc else None,
                               check=False)

    # The policy is enforced a moment after it is created: wait until it refuses.
    probe = resource("probe", FIELDS["load_balancer"][0])
    wait_for("the tenant-fields policy to be enforced",
             lambda: run("tenant", "create", "--dry-run=server", "-f", "-",
                         doc=probe).returncode != 0, timeout=60)
    yield run
    cluster.kubectl("delete", "namespace", NS, "--timeout=60s", check=False)


def can_i(cluster, user: str, verb: str, what: str) -> bool:
    got = cluster.kubectl("auth", "can-i", verb, what, "-n", NS, f"--as={user}", check=False)
    return got.stdout.strip() == "yes"


def test_the_users_rights_are_what_the_test_says(cluster, users):
    for group, kind in KINDS:
        what = f"{kind}.{group}" if group else kind
        assert not can_i(cluster, "tenant", "create", what), what
        assert not can_i(cluster, "delegated", "create", what), what
        assert can_i(cluster, "platform", "create", what), what
    for verb in VERBS:
        assert not can_i(cluster, "tenant", verb, "inferenceservices.infergate.dev")
        assert can_i(cluster, "delegated", verb, "inferenceservices.infergate.dev")
    assert can_i(cluster, "tenant", "create", "inferenceservices.infergate.dev")


@pytest.mark.parametrize("field", FIELDS)
def test_a_field_that_escalates_is_refused_to_a_tenant_without_the_right(users, field):
    extra, phrases = FIELDS[field]
    got = users("tenant", "create", "--dry-run=server", "-f", "-", doc=resource("esc", extra))
    assert got.returncode != 0, got.stdout
    assert "ValidatingAdmissionPolicy" in got.stderr and "tenant-fields" in got.stderr, got.stderr
    for phrase in phrases:
        assert phrase in got.stderr, (phrase, got.stderr)
    assert "tenant" in got.stderr and f"namespace {NS}" in got.stderr, got.stderr


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("user", ["platform", "delegated"])
def test_the_same_field_is_admitted_for_a_user_with_the_right(users, field, user):
    extra, _ = FIELDS[field]
    got = users(user, "create", "--dry-run=server", "-f", "-", doc=resource("esc", extra))
    assert got.returncode == 0, got.stderr


def test_a_plain_resource_is_admitted_for_the_tenant(users):
    got = users("tenant", "create", "--dry-run=server", "-f", "-", doc=resource("plain"))
    assert got.returncode == 0, got.stderr
    # Peers inside the namespace (pod selectors) make nothing beyond what the tenant's pods get.
    local = {"networkPolicy": {"clients": [{"podSelector": {"matchLabels": {"app": "web"}}}]}}
    got = users("tenant", "create", "--dry-run=server", "-f", "-", doc=resource("local", local))
    assert got.returncode == 0, got.stderr


def test_a_cluster_trigger_authentication_is_refused_to_everyone(users):
    borrowed = {"autoscaling": {"engine": "KEDA", "minReplicas": 1, "maxReplicas": 2,
                                "extraTriggers": [{"type": "aws-sqs-queue",
                                                   "metadata": {"queueURL": "q"},
                                                   "authenticationRef": {
                                                       "name": "cloud",
                                                       "kind": "ClusterTriggerAuthentication"}}]}}
    for user in ("tenant", "platform", "delegated"):
        got = users(user, "create", "--dry-run=server", "-f", "-",
                    doc=resource("borrowed", borrowed))
        assert got.returncode != 0, (user, got.stdout)
        assert "ClusterTriggerAuthentication" in got.stderr and "refused to everyone" in got.stderr


def test_an_update_that_keeps_an_admitted_field_is_admitted_and_one_that_changes_it_is_not(users):
    created = users("platform", "create", "-f", "-",
                    doc=resource("exposed", {"service": {"type": "LoadBalancer"}}))
    assert created.returncode == 0, created.stderr
    # The tenant scales it: the LoadBalancer is as it was.
    scaled = users("tenant", "patch", "infsvc", "exposed", "-n", NS, "--type=merge",
                   "-p", json.dumps({"spec": {"replicas": 2}}))
    assert scaled.returncode == 0, scaled.stderr
    # The tenant may not change what the LoadBalancer is (its annotations pick its kind on
    # clouds), nor move a service to NodePort.
    annotated = users("tenant", "patch", "infsvc", "exposed", "-n", NS, "--type=merge", "-p",
                      json.dumps({"spec": {"service": {"annotations": {"lb": "external"}}}}))
    assert annotated.returncode != 0 and "spec.service.type LoadBalancer" in annotated.stderr
    # Back to ClusterIP is no escalation.
    closed = users("tenant", "patch", "infsvc", "exposed", "-n", NS, "--type=merge",
                   "-p", json.dumps({"spec": {"service": {"type": "ClusterIP"}}}))
    assert closed.returncode == 0, closed.stderr
    users("platform", "delete", "infsvc", "exposed", "-n", NS)


def test_a_bound_service_account_needs_the_right_to_bind_roles(users):
    routed = {"pod": {"serviceAccountName": "payments"},
              "extensions": {"sequence": {"enabled": True, "routing": "Sidecar"}}}
    # May create pods, not bind Roles: refused, naming the RoleBinding the operator would make.
    got = users("pods-only", "create", "--dry-run=server", "-f", "-",
                doc=resource("routed", routed))
    assert got.returncode != 0
    assert "bind a Role to ServiceAccount payments" in got.stderr, got.stderr
    assert "create on rolebindings.rbac.authorization.k8s.io" in got.stderr, got.stderr
    for user in ("platform", "delegated"):
        got = users(user, "create", "--dry-run=server", "-f", "-", doc=resource("routed", routed))
        assert got.returncode == 0, (user, got.stderr)


def test_the_policy_type_checks_against_the_crd_without_warnings(cluster, users):
    """The API server checks each expression against the CRD's schema; a field name the schema
    does not have would show here, and the expression would never match."""
    (policy,) = [p for p in cluster.get_json("validatingadmissionpolicies")["items"]
                 if p["metadata"]["name"].endswith("-tenant-fields")]
    wait_for("the policy's type check", lambda: "typeChecking" in cluster.get_json(
        "validatingadmissionpolicy", policy["metadata"]["name"]).get("status", {}), timeout=60)
    status = cluster.get_json("validatingadmissionpolicy", policy["metadata"]["name"])["status"]
    assert not status["typeChecking"].get("expressionWarnings"), status["typeChecking"]
