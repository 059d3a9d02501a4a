"""A pod that is not the sidecar's own, without credentials, against the sidecars: in the
examples' namespace (the client pod) and from another namespace. On the admin port, the kubelet's
probes' paths answer anyone (they say only live or ready); draining is refused (only the pod's
own preStop hook, on loopback, may); `/status` is refused without the operator's client
certificate (in plain HTTP, and over TLS without one), and served with it. On the REST port, the control APIs are the pod's alone by default
(`spec.auth`): silencing the log, tracing every call, loading or unloading a model are refused,
and so is registering shared memory (the staging pool, another client's region). The model
server's own ports answer nothing on the pod's address (`model.listen: Loopback`, the default):
there is no way past the sidecar. After the tries every pod is still Ready and in its Service."""

from __future__ import annotations

import re

import pytest

import scenario

NS = scenario.NS
INTRUDER_NS = "e2e-intruder"


def pod_ips(kube, served) -> list[tuple[str, list[int]]]:
    """Each pod's address, with the ports its model server was told to listen on."""
    ips = []
    for name, doc in served.items():
        ports = model_ports(doc)
        ips += [(p["status"]["podIP"], ports)
                for p in kube.running_pods(NS, f"app.kubernetes.io/instance={name}")]
    return ips


def model_ports(doc: dict) -> list[int]:
    """The model server's ports as the example sets them: Triton's --*-port flags, MLServer's
    MLSERVER_*_PORT variables, and upstream.grpcPort."""
    model = doc["spec"]["model"]
    ports = {int(m.group(1)) for a in model.get("args", [])
             if (m := re.fullmatch(r"--(?:http|grpc|metrics)-port=(\d+)", a))}
    ports |= {int(e["value"]) for e in model.get("env", [])
              if re.fullmatch(r"MLSERVER_(?:HTTP|GRPC|METRICS)_PORT", e["name"])}
    ports.add(doc["spec"].get("upstream", {}).get("grpcPort", 9001))
    return sorted(ports)


def intrude(kube, ip, ports, *extra, **where):
    port_args = [a for p in ports for a in ("--model-port", str(p))]
    return scenario.call(kube, "intrude.py", ip, *port_args, *extra, **where)


def assert_refused(got: dict, ip: str):
    assert got["livez"][0] == 200, (ip, got)
    assert got["readyz"][0] == 200, (ip, got)
    assert got["drain"][0] == 403 and "loopback" in got["drain"][1], (ip, got)
    assert got["status"][0] == 401, (ip, got)
    assert got["status_wrong_token"][0] == 401, (ip, got)
    assert got["status_over_tls_without_certificate"][0] == 401, (ip, got)
    # A refusal says nothing of the sidecar: no upstream, no model, no extension.
    for refusal in (got["status"][1], got["status_wrong_token"][1], got["drain"][1],
                    got["status_over_tls_without_certificate"][1]):
        assert "upstream" not in refusal and "extensions" not in refusal, (ip, refusal)
    for call in ("silence_the_log", "trace_everything", "load_a_model", "unload_a_model",
                 "register_the_staging_pool", "register_a_clients_region"):
        assert got[call][0] == 403, (ip, call, got)
        assert "restricted to clients in the server's pod" in got[call][1], (ip, call, got)
    # Nothing listens on the model server's ports at the pod's address: refused, not filtered.
    assert got["model_ports"], (ip, got)
    for port, answer in got["model_ports"].items():
        assert answer == "ConnectionRefusedError", (ip, port, got)
    assert got["readyz_after"][0] == 200 and got["ready_after"][0] == 200, (ip, got)


@pytest.fixture(scope="module")
def intruder(kube, served):
    """A client pod in a namespace of its own."""
    kube.apply(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {INTRUDER_NS}}}\n")
    return scenario.start_client(kube, namespace=INTRUDER_NS, name="intruder")


def test_a_pod_of_the_namespace_cannot_drain_or_read_status(kube, served, client):
    for ip, ports in pod_ips(kube, served):
        assert_refused(intrude(kube, ip, ports), ip)


def test_a_pod_of_another_namespace_cannot_drain_or_read_status(kube, served, intruder):
    for ip, ports in pod_ips(kube, served):
        assert_refused(intrude(kube, ip, ports, pod=intruder, namespace=INTRUDER_NS), ip)


def test_the_operators_client_certificate_reads_status(kube, served, client):
    cert, key = scenario.status_client_certificate(kube)
    for ip, ports in pod_ips(kube, served):
        got = intrude(kube, ip, ports, "--client-cert", cert, "--client-key", key)
        assert got["status_with_certificate"][0] == 200, (ip, got)
        assert '"extensions"' in got["status_with_certificate"][1], (ip, got)
    # Every resource's status came from its sidecars' /status, read with the same certificate.
    for name in served:
        obj = kube.get("infsvc", "-n", NS, name)
        assert obj["status"].get("extensions"), (name, obj["status"])


def test_no_intruder_took_a_pod_out_of_service(kube, served):
    for name in served:
        obj = kube.get("infsvc", "-n", NS, name)
        assert kube.condition(obj, "Ready").get("status") == "True", (name, obj["status"])
