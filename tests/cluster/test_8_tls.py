"""`spec.tls` against the real API server: the Certificate of an issuer validated by cert-manager's
own CRD (fetched from its Go module), the Secret mounted in the sidecar, the status that says
what the sidecars serve (not what the spec asks for), the Certificate deleted when the spec moves to a
Secret of the user's, and the rule the API server enforces."""

from __future__ import annotations

import json

import pytest

from controlplane import wait_for
from test_2_operator import apply, exists, isvc
from test_5_autoscaling import module_file, triton

CERT_MANAGER = ("github.com/cert-manager/cert-manager@v1.21.2",
                "deploy/crds/cert-manager.io_certificates.yaml")


@pytest.fixture(scope="module")
def certificate_crd(cluster):
    path = module_file(*CERT_MANAGER)
    cluster.kubectl("apply", "--server-side", "-f", str(path))
    name = cluster.get_json("-f", str(path))["metadata"]["name"]
    cluster.kubectl("wait", f"crd/{name}", "--for=condition=Established", "--timeout=60s")
    yield name
    cluster.kubectl("delete", "crd", name, "--wait=true", check=False)


def tls_volume(cluster, namespace: str, name: str) -> dict | None:
    pod = cluster.get_json("deployment", name, "-n", namespace)["spec"]["template"]["spec"]
    return next((v for v in pod["volumes"] if v["name"] == "infergate-tls"), None)


def test_an_issuer_gets_a_certificate_that_cert_managers_schema_admits(
        cluster, operator, namespace, certificate_crd):
    doc = triton()
    doc["spec"]["tls"] = {"issuerRef": {"name": "team-ca", "kind": "ClusterIssuer"},
                          "mutual": True}
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    wait_for("the Certificate", lambda: exists(cluster, namespace, "certificate", f"{name}-tls"),
             timeout=60)
    cert = cluster.get_json("certificate", f"{name}-tls", "-n", namespace)
    assert cert["spec"]["secretName"] == f"{name}-tls"
    assert cert["spec"]["issuerRef"] == {"name": "team-ca", "kind": "ClusterIssuer",
                                         "group": "cert-manager.io"}
    assert cert["spec"]["dnsNames"] == [name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
                                        f"{name}.{namespace}.svc.cluster.local"]
    assert cert["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    wait_for("the Deployment", lambda: exists(cluster, namespace, "deployment", name), timeout=60)
    assert tls_volume(cluster, namespace, name)["secret"]["secretName"] == f"{name}-tls"
    # Status says what the sidecars serve, not what the spec asks for: this suite's pods (kwok's)
    # are answered for by one real sidecar in plaintext, and that is what is reported.
    status = wait_for("a pod's report in status.tls", lambda: (
        isvc(cluster, namespace, name).get("status", {}).get("tls", {})
        .get("http", {}).get("podsReporting") and isvc(cluster, namespace, name)["status"]["tls"]),
        timeout=60)
    assert status["summary"] == "Off", status
    assert isvc(cluster, namespace, name)["status"]["url"]["rest"].startswith("https://")

    # A Secret of the user's instead: the Certificate goes, the pods mount that Secret.
    doc["spec"]["tls"] = {"secretName": "my-cert"}
    apply(cluster, namespace, doc)
    wait_for("the Certificate to be deleted",
             lambda: not exists(cluster, namespace, "certificate", f"{name}-tls"), timeout=60)
    wait_for("the pods to mount my-cert", lambda: (tls_volume(cluster, namespace, name) or {})
             .get("secret", {}).get("secretName") == "my-cert", timeout=60)

    # TLS dropped: no Secret mounted, plain URLs again.
    del doc["spec"]["tls"]
    apply(cluster, namespace, doc)
    wait_for("the TLS volume to go", lambda: tls_volume(cluster, namespace, name) is None,
             timeout=60)
    wait_for("a plain URL", lambda: isvc(cluster, namespace, name)["status"]["url"]["rest"]
             .startswith("http://"), timeout=60)


def test_the_api_server_refuses_tls_without_one_source(cluster, namespace):
    for tls in ({"secretName": "a", "issuerRef": {"name": "b"}}, {"mutual": True}):
        doc = triton()
        doc["spec"]["tls"] = tls
        result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                                 input=json.dumps(doc), check=False)
        assert result.returncode != 0, tls
        assert "tls takes exactly one of" in result.stderr, result.stderr
