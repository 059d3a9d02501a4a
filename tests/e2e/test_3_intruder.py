"""A pod that is not the sidecar's own, without credentials, against the sidecars: in the
examples' namespace (the client pod) and from another namespace. On the admin port, the kubelet's
probes' paths answer anyone (they say only live or ready); draining is refused (only the pod's
own preStop hook, on loopback, may); `/status` is refused without the operator's token, and
served with it. On the REST port, the control APIs are the pod's alone by default
(`spec.auth`): silencing the log, tracing every call, loading or unloading a model are refused.
After the tries every pod is still Ready and in its Service."""

from __future__ import annotations

import pytest

import scenario

NS = scenario.NS
INTRUDER_NS = "e2e-intruder"


def pod_ips(kube, served) -> list[str]:
    ips = []
    for name in served:
        ips += [p["status"]["podIP"]
                for p in kube.running_pods(NS, f"app.kubernetes.io/instance={name}")]
    return ips


def assert_refused(got: dict, ip: str):
    assert got["livez"][0] == 200, (ip, got)
    assert got["readyz"][0] == 200, (ip, got)
    assert got["drain"][0] == 403 and "loopback" in got["drain"][1], (ip, got)
    assert got["status"][0] == 401, (ip, got)
    assert got["status_wrong_token"][0] == 401, (ip, got)
    # A refusal says nothing of the sidecar: no upstream, no model, no extension.
    for refusal in (got["status"][1], got["status_wrong_token"][1], got["drain"][1]):
        assert "upstream" not in refusal and "extensions" not in refusal, (ip, refusal)
    for call in ("silence_the_log", "trace_everything", "load_a_model", "unload_a_model"):
        assert got[call][0] == 403, (ip, call, got)
        assert "restricted to clients in the server's pod" in got[call][1], (ip, call, got)
    assert got["readyz_after"][0] == 200 and got["ready_after"][0] == 200, (ip, got)


@pytest.fixture(scope="module")
def intruder(kube, served):
    """A client pod in a namespace of its own."""
    kube.apply(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {INTRUDER_NS}}}\n")
    return scenario.start_client(kube, namespace=INTRUDER_NS, name="intruder")


def test_a_pod_of_the_namespace_cannot_drain_or_read_status(kube, served, client):
    for ip in pod_ips(kube, served):
        assert_refused(scenario.call(kube, "intrude.py", ip), ip)


def test_a_pod_of_another_namespace_cannot_drain_or_read_status(kube, served, intruder):
    for ip in pod_ips(kube, served):
        assert_refused(scenario.call(kube, "intrude.py", ip, pod=intruder,
                                     namespace=INTRUDER_NS), ip)


def test_the_operators_token_reads_status(kube, served, client):
    token = scenario.status_token(kube)
    for ip in pod_ips(kube, served):
        got = scenario.call(kube, "intrude.py", ip, "--token", token)
        assert got["status_with_token"][0] == 200, (ip, got)
        assert '"extensions"' in got["status_with_token"][1], (ip, got)
    # Every resource's status came from its sidecars' /status, read with the same token.
    for name in served:
        obj = kube.get("infsvc", "-n", NS, name)
        assert obj["status"].get("extensions"), (name, obj["status"])


def test_no_intruder_took_a_pod_out_of_service(kube, served):
    for name in served:
        obj = kube.get("infsvc", "-n", NS, name)
        assert kube.condition(obj, "Ready").get("status") == "True", (name, obj["status"])
