"""Sequence routing's discovery against the real API server: the operator (with the chart's RBAC)
gives an InferenceService with `routing: Sidecar` its headless Service and a Role; real sidecars,
with nothing but the token of the pods' service account, watch the EndpointSlices and follow
them as peers are listed and removed, and sequences sent round-robin over them answer exactly.

There is no kubelet here, so the "pods" are sidecars on this host's address, each on ports of
its own, listed by EndpointSlices this test writes as the EndpointSlice controller would (one
slice per sidecar, since a slice has one port per name; the API server refuses loopback
addresses in slices), with the labels the EndpointSlice controller copies from the operator's
Service (the sidecars read only slices with them); a slice with the Service's name but not its
labels is not read."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.request

from conftest import Process, _env_path
from controlplane import free_port, wait_for

NAME = "seq"
MODEL = "sequence_accumulator"


def host_address() -> str:
    """This host's first global IPv4 address."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[3].split("/")[0]


# The labels the operator's peers Service carries, and so (the EndpointSlice controller copies
# them) its slices: the sidecars read only slices with them (server.sequence_peers_labels).
SERVICE_LABELS = {"app.kubernetes.io/name": "infergate", "app.kubernetes.io/instance": NAME,
                  "app.kubernetes.io/managed-by": "infergate-operator"}


def slice_doc(namespace: str, index: int, address: str, grpc_port: int,
              labels: dict = SERVICE_LABELS) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{NAME}-peers-test-{index}", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": f"{NAME}-peers",
                                "endpointslice.kubernetes.io/managed-by": "cluster-test",
                                **labels}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": grpc_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


def list_peers(cluster, namespace, address, listed: dict[int, int], unlisted: list[int]):
    """One slice per listed sidecar (index: gRPC port); the slices of `unlisted` deleted."""
    docs = [slice_doc(namespace, i, address, port) for i, port in listed.items()]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": docs}))
    for i in unlisted:
        cluster.kubectl("delete", "endpointslice", f"{NAME}-peers-test-{i}", "-n", namespace,
                        "--ignore-not-found")


# The admin port answers /status off loopback only to a token whose SHA-256 the sidecar's
# configuration lists, as the operator renders it (these sidecars listen on the host's address).
STATUS_TOKEN = "cluster-test-status-token-0123456789"


def peers_seen(admin: str) -> dict:
    request = urllib.request.Request(f"http://{admin}/status",
                                     headers={"Authorization": f"Bearer {STATUS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as r:
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


def apply_routed(cluster, namespace, replicas):
    doc = {
        "apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"replicas": replicas, "model": {"image": "registry.example/model:1"},
                 "extensions": {"sequence": {"enabled": True, "routing": "Sidecar"}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    # The RoleBinding is the last of the objects the operator makes for it.
    wait_for("the peer objects", lambda: cluster.kubectl(
        "get", "rolebinding", f"{NAME}-sequence-peers", "-n", namespace,
        check=False).returncode == 0, timeout=60)


def test_the_operator_gives_the_pods_a_headless_service_and_least_access(cluster, operator,
                                                                         namespace):
    ns = namespace
    apply_routed(cluster, ns, replicas=3)
    svc = cluster.get_json("service", f"{NAME}-peers", "-n", ns)
    assert svc["spec"]["clusterIP"] == "None"
    role = cluster.get_json("role", f"{NAME}-sequence-peers", "-n", ns)
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["list", "watch"]}]
    deploy = wait_for("the Deployment", lambda: cluster.get_json("deployment", NAME, "-n", ns))
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


def test_sidecars_follow_the_endpointslices_with_the_pods_token(cluster, operator, namespace,
                                                               workdir):
    # No pods of the Deployment: the test's sidecars stand in for them, in slices of its own.
    ns = namespace
    apply_routed(cluster, ns, replicas=0)
    token = cluster.kubectl("create", "token", f"{NAME}-sequence-peers", "-n", ns,
                            "--duration=1h").stdout.strip()
    kubeconfig = cluster.token_kubeconfig(workdir / f"{ns}-pods.kubeconfig", token)
    address = host_address()
    # What the operator renders into the sidecars' configuration for these slices.
    config = workdir / f"{ns}-sidecar.yaml"
    config.write_text(json.dumps({"server": {
        "sequence_peers_labels": ",".join(f"{k}={v}" for k, v in sorted(SERVICE_LABELS.items())),
        "status_token_sha256": [hashlib.sha256(STATUS_TOKEN.encode()).hexdigest()]}}))
    sidecars = {}
    try:
        for i in (1, 2, 3):
            grpc, http_port, admin = free_port(), free_port(), free_port()
            process = Process(f"sidecar-{i}", [
                str(_env_path("INFERGATE_SIDECAR_BIN")), "--host", address,
                "--http-port", str(http_port), "--grpc-port", str(grpc),
                "--metrics-port", "0", "--admin-port", str(admin),
                "--sequence-peers-service", f"{NAME}-peers", "--config", str(config),
            ], workdir / f"{ns}-sidecar-{i}.log",
                env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_IP": address,
                     "POD_NAMESPACE": ns})
            sidecars[i] = {"process": process, "grpc": grpc, "http": f"{address}:{http_port}",
                           "admin": f"{address}:{admin}"}

        def all_see(indices):
            want = {f"{address}:{sidecars[i]['grpc']}": "ready" for i in indices}

            def check():
                for i in indices:
                    process = sidecars[i]["process"]
                    assert process.alive(), process.output()[-3000:]
                    if peers_seen(sidecars[i]["admin"]) != want:
                        return False
                return True
            try:
                wait_for(f"sidecars {indices} to see each other", check, timeout=60)
            except TimeoutError as e:
                seen = {i: peers_seen(sidecars[i]["admin"]) for i in indices}
                logs = "\n".join(sidecars[i]["process"].output()[-2000:] for i in indices)
                raise AssertionError(f"{e}\nwant {want}\nseen {seen}\n{logs}") from None

        def http(*indices):
            return [sidecars[i]["http"] for i in indices]

        def listed(*indices):
            return {i: sidecars[i]["grpc"] for i in indices}

        # Two listed: they find each other. A slice with the Service's name that the
        # EndpointSlice controller did not make (a pod of anybody's could be its endpoint) lists
        # the third, and is not read.
        rogue = slice_doc(ns, 9, address, sidecars[3]["grpc"], labels={})
        cluster.kubectl("apply", "-f", "-", input=json.dumps(rogue))
        list_peers(cluster, ns, address, listed(1, 2), [3])
        all_see([1, 2])
        run_sequences(http(1, 2), 100)
        cluster.kubectl("delete", "endpointslice", f"{NAME}-peers-test-9", "-n", ns)

        # Sequences in flight when the third is listed finish, and new ones use all three.
        started = 200
        for s in range(4):
            infer(http(1)[0], started + s, s, start=True, end=False)
        list_peers(cluster, ns, address, listed(1, 2, 3), [])
        all_see([1, 2, 3])
        for s in range(4):
            for n, to in enumerate(http(1, 2, 3)):
                got = infer(to, started + s, 1, start=False, end=False)
                assert got == s + n + 1, (s, n, got)
        run_sequences(http(1, 2, 3), 300)

        # One removed from the slices: the others stop listing it.
        list_peers(cluster, ns, address, listed(2, 3), [1])
        all_see([2, 3])
        run_sequences(http(2, 3), 400)
        for i, sidecar in sidecars.items():
            log = sidecar["process"].output()
            assert "forbidden" not in log.lower(), (i, log[-3000:])
    finally:
        for sidecar in sidecars.values():
            sidecar["process"].stop()
