"""`spec.tls` on the real node: the `triton` InferenceService is given mutual TLS from a Secret
made here (a CA, the Service's names), and its control APIs a key (`auth.controlAPIs.from:
Key`); a client pod calls it by the Service's name with tritonclient over gRPC and HTTPS, the
refusals are seen (no certificate, another CA's, plaintext, a control call without the key), the
control calls with the key are served,
and the Secret is then rotated as cert-manager would rotate it: the new certificate is served to
new connections, and no container restarts. The kubelet's probes stay on the plain admin port
throughout, which the pod's readiness shows."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time

import scenario
from test_4_faults import infsvc, ready, record

sys.path.insert(0, str(scenario.REPO / "tests/conformance"))
import certs  # noqa: E402

NS = scenario.NS
SECRET = "triton-e2e-tls"
CLIENT_SECRET = "tls-client-certs"
CLIENT_POD = "tls-client"
CONTROL_SECRET = "triton-control-key"
SELECTOR = "app.kubernetes.io/instance=triton"
HOST = f"triton.{NS}.svc"
SERVICE_NAMES = ("DNS:triton", f"DNS:triton.{NS}", f"DNS:{HOST}", f"DNS:{HOST}.cluster.local")


def secret(name: str, files: dict) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
        "type": "Opaque",
        "data": {key: base64.b64encode(path.read_bytes()).decode() for key, path in files.items()},
    })


def serving_secret(ca, server) -> str:
    return secret(SECRET, {"tls.crt": server.cert, "tls.key": server.key, "ca.crt": ca.cert})


def start_tls_client(kube, service_ip: str):
    """A client pod that resolves the Service's names through hostAliases (the node has no
    cluster DNS) and holds the CA and two client certificates in a Secret volume."""
    kube.apply(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": CLIENT_POD, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "hostAliases": [{"ip": service_ip, "hostnames": ["triton", f"triton.{NS}", HOST]}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "certs", "secret": {"secretName": CLIENT_SECRET}}],
            "containers": [{
                "name": "client", "image": scenario.CLIENT_IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "certs", "mountPath": "/certs", "readOnly": True}],
            }],
        },
    }))
    kube.kubectl("wait", "--for=condition=Ready", f"pod/{CLIENT_POD}", "-n", NS,
                 "--timeout=180s", timeout=200)


def served_serial(kube) -> str:
    return scenario.call(kube, "tls.py", HOST, "/certs", "--serial",
                         pod=CLIENT_POD)["certificate"]["serial"]


def not_after(cert) -> int:
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", str(cert)],
                         check=True, capture_output=True, text=True).stdout
    return int(ssl.cert_time_to_seconds(out.strip().split("=", 1)[1]))


def test_mutual_tls_from_a_secret_and_its_rotation_without_a_restart(kube, client, workdir):
    folder = workdir / "tls"
    ca = certs.ca(folder, "service-ca")
    other = certs.ca(folder, "other-ca")
    server = certs.signed(folder, "server", ca, server=True, serial=1, names=SERVICE_NAMES)
    client_cert = certs.signed(folder, "client", ca, server=False)
    stranger = certs.signed(folder, "stranger", other, server=False)
    kube.apply(serving_secret(ca, server))
    kube.apply(secret(CLIENT_SECRET, {
        "ca.crt": ca.cert, "client.crt": client_cert.cert, "client.key": client_cert.key,
        "stranger.crt": stranger.cert, "stranger.key": stranger.key}))

    control_key = base64.b64encode(os.urandom(24)).decode()
    kube.apply(json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": CONTROL_SECRET, "namespace": NS},
        "type": "Opaque", "data": {"key": base64.b64encode(control_key.encode()).decode()}}))

    # One replica (the scale-out test left three) with mutual TLS and the control APIs behind a
    # key: one rollout.
    patched = time.monotonic()
    kube.kubectl("patch", "infsvc", "triton", "-n", NS, "--type=merge", "-p", json.dumps(
        {"spec": {"replicas": 1, "tls": {"secretName": SECRET, "mutual": True},
                  "auth": {"controlAPIs": {"from": "Key",
                                           "key": {"secretName": CONTROL_SECRET}}}}}))

    def one_mutual_pod():
        obj = infsvc(kube, "triton")
        tls = obj["status"].get("tls", {})
        pods = kube.running_pods(NS, SELECTOR)
        return (ready(kube, "triton") and obj["status"].get("replicas") == 1 and len(pods) == 1
                and tls.get("summary") == "Mutual" and obj)
    obj = kube.wait_until("triton Ready with mutual TLS", one_mutual_pod, timeout=420, interval=2)
    ready_after = time.monotonic() - patched
    assert obj["status"]["url"]["rest"] == f"https://{HOST}:8000"
    assert obj["status"]["tls"]["http"]["state"] == "Mutual"
    first_expiry = obj["status"]["tls"]["notAfter"]
    assert first_expiry == time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                         time.gmtime(not_after(server.cert))), obj["status"]["tls"]

    # The metrics port serves the certificate too (tls.metrics, the default), to scrapers that
    # present none.
    assert obj["status"]["tls"]["metrics"]["state"] == "On", obj["status"]["tls"]
    start_tls_client(kube, scenario.service_ip(kube, "triton"))
    pod_ip = kube.running_pods(NS, SELECTOR)[0]["status"]["podIP"]
    seen = scenario.call(kube, "tls.py", HOST, "/certs", "--metrics-ip", pod_ip,
                         "--control-key", control_key, pod=CLIENT_POD)
    # The control APIs: served with the key, from a pod that is not the service's own, and
    # refused without it.
    for call, answer in seen["control_with_key"].items():
        assert answer.startswith("served"), (call, seen["control_with_key"])
    for call, answer in seen["control_without_key"].items():
        assert answer.startswith("refused") and "infergate-control-key" in answer, \
            (call, seen["control_without_key"])
    assert seen["metrics_over_tls"].startswith("nv_"), seen
    assert seen["metrics_in_plaintext"] == "refused", seen
    assert seen["grpc_with_certificate"] is True, seen
    assert seen["http_with_certificate"] is True, seen
    assert seen["https_ready_with_certificate"] == 200, seen
    for refusal in ("grpc_without_certificate", "grpc_with_strangers_certificate",
                    "https_without_certificate", "https_with_strangers_certificate",
                    "plaintext_http", "plaintext_grpc"):
        assert seen[refusal] == "refused", (refusal, seen)
    assert seen["certificate"]["serial"] == "01", seen

    # Rotation, as cert-manager does it: the Secret's data replaced in place.
    pod = kube.running_pods(NS, SELECTOR)[0]
    renewed = certs.signed(folder, "renewed", ca, server=True, serial=2, names=SERVICE_NAMES,
                           days=3)
    rotated = time.monotonic()
    kube.apply(serving_secret(ca, renewed))
    kube.wait_until("the renewed certificate to be served",
                    lambda: served_serial(kube) == "02", timeout=180, interval=2)
    served_after = time.monotonic() - rotated
    # The sidecar reports the new expiry (what the operator copies into status.tls.notAfter).
    status = scenario.admin_status(kube, pod["status"]["podIP"])
    assert status["tls"]["grpc"]["not_after"] == not_after(renewed.cert), status["tls"]
    assert status["tls"]["http"]["not_after"] == not_after(renewed.cert), status["tls"]
    assert status["tls"]["metrics"]["not_after"] == not_after(renewed.cert), status["tls"]
    again = kube.get("pod", "-n", NS, pod["metadata"]["name"])
    statuses = again["status"].get("containerStatuses", []) + \
        again["status"].get("initContainerStatuses", [])
    restarts = {c["name"]: c["restartCount"] for c in statuses}
    assert restarts and all(n == 0 for n in restarts.values()), restarts
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]
    # Calls still go through with the renewed certificate.
    seen = scenario.call(kube, "tls.py", HOST, "/certs", pod=CLIENT_POD)
    assert seen["grpc_with_certificate"] is True and seen["http_with_certificate"] is True, seen
    assert seen["certificate"]["serial"] == "02", seen
    record(kube, "tls", {"mutual_tls_ready_after_s": round(ready_after, 1),
                         "renewed_certificate_served_after_s": round(served_after, 1)})
