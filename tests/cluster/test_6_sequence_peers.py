"""Sequence routing's discovery against the real API server: the operator (with the chart's RBAC)
gives an InferenceService with `routing: Sidecar` its headless Service and a Role; real sidecars,
with nothing but the token of the pods' service account, watch the EndpointSlices and follow
them as peers are listed and removed, and sequences sent round-robin over them answer exactly.

There is no kubelet here, so the "pods" are sidecars on loopback addresses (127.0.0.1-3), listed
by an EndpointSlice this test writes as the EndpointSlice controller would."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from conftest import Process, _env_path
from controlplane import free_port, wait_for

NAME = "seq"
MODEL = "sequence_accumulator"


def slice_doc(namespace: str, addresses: list[str], grpc_port: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{NAME}-peers-test", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": f"{NAME}-peers",
                                "endpointslice.kubernetes.io/managed-by": "cluster-test"}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": grpc_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
    }


def write_slice(cluster, namespace, addresses, grpc_port):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(slice_doc(namespace, addresses, grpc_port)))


def peers_seen(admin: str) -> dict:
    with urllib.request.urlopen(f"http://{admin}/status", timeout=5) as r:
        status = json.loads(r.read())
    return {p["address"]: p["state"] for p in status["sequence_peers"]["peers"]}


def infer(http: str, sequence_id: int, value: int, start: bool, end: bool) -> int:
    body = json.dumps({
        "parameters": {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end},
        "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
    }).encode()
    request = urllib.request.Request(f"http://{http}/v2/models/{MODEL}/infer", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())["outputs"][0]["data"][0]


def run_sequences(https: list[str], first_id: int, count: int = 6, length: int = 5):
    """Interleaved sequences, request n of sequence s to sidecar (s + n) % len: the running sums."""
    got = [[] for _ in range(count)]
    for n in range(length):
        for s in range(count):
            value = s * 10 + n + 1
            got[s].append(infer(https[(s + n) % len(https)], first_id + s, value,
                                start=n == 0, end=n == length - 1))
    want = [[sum(s * 10 + k + 1 for k in range(n + 1)) for n in range(length)]
            for s in range(count)]
    assert got == want


@pytest.fixture
def routed(cluster, operator, namespace):
    doc = {
        "apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"replicas": 3, "model": {"image": "registry.example/model:1"},
                 "extensions": {"sequence": {"enabled": True, "routing": "Sidecar"}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    return namespace


def test_the_operator_gives_the_pods_a_headless_service_and_least_access(cluster, routed):
    ns = routed
    wait_for("the peer objects", lambda: cluster.kubectl(
        "get", "rolebinding", f"{NAME}-sequence-peers", "-n", ns, check=False).returncode == 0,
        timeout=60)
    svc = cluster.get_json("service", f"{NAME}-peers", "-n", ns)
    assert svc["spec"]["clusterIP"] == "None"
    role = cluster.get_json("role", f"{NAME}-sequence-peers", "-n", ns)
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["list", "watch"]}]
    deploy = cluster.get_json("deployment", NAME, "-n", ns)
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == f"{NAME}-sequence-peers"
    account = f"system:serviceaccount:{ns}:{NAME}-sequence-peers"
    for verb, resource, want in (("watch", "endpointslices.discovery.k8s.io", "yes"),
                                 ("list", "pods", "no"), ("get", "secrets", "no")):
        got = cluster.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={account}",
                              check=False).stdout.strip()
        assert got == want, (verb, resource, got)

    # Back to Stream routing: the objects go.
    cluster.kubectl("patch", "infsvc", NAME, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"extensions":{"sequence":{"routing":"Stream"}}}}')
    wait_for("the peer objects to go", lambda: all(
        cluster.kubectl("get", kind, name, "-n", ns, check=False).returncode != 0
        for kind, name in (("service", f"{NAME}-peers"), ("role", f"{NAME}-sequence-peers"),
                           ("rolebinding", f"{NAME}-sequence-peers"),
                           ("serviceaccount", f"{NAME}-sequence-peers"))), timeout=60)


def test_sidecars_follow_the_endpointslices_with_the_pods_token(cluster, routed, workdir):
    ns = routed
    wait_for("the pods' service account", lambda: cluster.kubectl(
        "get", "rolebinding", f"{NAME}-sequence-peers", "-n", ns, check=False).returncode == 0,
        timeout=60)
    token = cluster.kubectl("create", "token", f"{NAME}-sequence-peers", "-n", ns,
                            "--duration=1h").stdout.strip()
    kubeconfig = cluster.token_kubeconfig(workdir / f"{ns}-pods.kubeconfig", token)
    grpc_port, http_port = free_port(), free_port()
    sidecars = {}
    try:
        for i in (1, 2, 3):
            ip = f"127.0.0.{i}"
            admin = free_port()
            sidecars[ip] = (Process(f"sidecar-{ip}", [
                str(_env_path("INFERGATE_SIDECAR_BIN")), "--host", ip,
                "--http-port", str(http_port), "--grpc-port", str(grpc_port),
                "--metrics-port", "0", "--admin-port", str(admin),
                "--sequence-peers-service", f"{NAME}-peers",
            ], workdir / f"{ns}-sidecar-{i}.log",
                env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_IP": ip,
                     "POD_NAMESPACE": ns}), f"127.0.0.1:{admin}")
        https = {ip: f"{ip}:{http_port}" for ip in sidecars}

        def all_see(ips):
            want = {f"{ip}:{grpc_port}": "ready" for ip in ips}

            def check():
                for ip in ips:
                    process, admin = sidecars[ip]
                    assert process.alive(), process.output()[-3000:]
                    if peers_seen(admin) != want:
                        return False
                return True
            wait_for(f"{ips} to see each other", check, timeout=60)

        # Two listed: they find each other; the third, unlisted, sees only itself.
        write_slice(cluster, ns, ["127.0.0.1", "127.0.0.2"], grpc_port)
        all_see(["127.0.0.1", "127.0.0.2"])
        run_sequences([https["127.0.0.1"], https["127.0.0.2"]], 100)

        # Sequences in flight when the third is listed finish, and new ones use all three.
        started = 200
        for s in range(4):
            infer(https["127.0.0.1"], started + s, s, start=True, end=False)
        write_slice(cluster, ns, ["127.0.0.1", "127.0.0.2", "127.0.0.3"], grpc_port)
        all_see(list(sidecars))
        for s in range(4):
            for n, http in enumerate(https.values()):
                got = infer(http, started + s, 1, start=False, end=False)
                assert got == s + n + 1, (s, n, got)
        run_sequences(list(https.values()), 300)

        # One removed from the slice: the others stop listing it.
        write_slice(cluster, ns, ["127.0.0.2", "127.0.0.3"], grpc_port)
        all_see(["127.0.0.2", "127.0.0.3"])
        run_sequences([https["127.0.0.2"], https["127.0.0.3"]], 400)
        for ip, (process, _) in sidecars.items():
            log = process.output()
            assert "Forbidden" not in log and "forbidden" not in log, (ip, log[-3000:])
    finally:
        for process, _ in sidecars.values():
            process.stop()
