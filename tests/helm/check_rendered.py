"""Checks one `helm template` output and splits it into one file per object for
kubernetes-validate. Usage: check_rendered.py RENDERED.yaml RBAC.json OUT_DIR
(or --newest-kubernetes: print the newest version kubernetes-validate knows)."""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


def verify_client_certificate(data: dict) -> None:
    """The Secret's certificate chains to its ca.crt for a TLS client, and its key is the
    certificate's (openssl, Debian's)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for key in ("tls.crt", "tls.key", "ca.crt"):
            files[key] = Path(tmp) / key
            files[key].write_bytes(base64.b64decode(data[key]))
        verified = subprocess.run(["openssl", "verify", "-purpose", "sslclient", "-CAfile",
                                   files["ca.crt"], files["tls.crt"]],
                                  capture_output=True, text=True)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        keys = [subprocess.run(command, capture_output=True, check=True).stdout for command in (
            ["openssl", "x509", "-in", files["tls.crt"], "-noout", "-pubkey"],
            ["openssl", "pkey", "-in", files["tls.key"], "-pubout"])]
        assert keys[0] == keys[1], "the key is not the certificate's"


def newest_kubernetes() -> str:
    import kubernetes_validate

    root = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
    versions = [tuple(map(int, m.groups())) for d in os.listdir(root)
                if (m := re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", d))]
    return ".".join(map(str, max(versions)))


def rules_of(obj) -> set:
    out = set()
    for rule in obj.get("rules", []):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


def main(rendered: str, rbac_json: str, out_dir: str) -> None:
    with open(rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    need = json.load(open(rbac_json))
    want_cluster = rules_of({"rules": need["clusterRules"]})
    want_leader = rules_of({"rules": need["leaderElectionRules"]})

    # RBAC: exactly what the operator needs; a Role in the namespace it watches, if it watches one.
    [deployment] = by_kind["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    watched = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")]
    roles = by_kind.get("Role", [])
    leader_roles = [r for r in roles if r["metadata"]["name"].endswith("-leader-election")]
    if watched:
        assert "ClusterRole" not in by_kind and "ClusterRoleBinding" not in by_kind, \
            "cluster-wide RBAC for an operator that watches one namespace"
        [operator_role] = [r for r in roles if r not in leader_roles]
        assert operator_role["metadata"]["namespace"] == watched[0], operator_role
        [binding] = [b for b in by_kind["RoleBinding"]
                     if b["roleRef"]["name"] == operator_role["metadata"]["name"]]
        assert binding["metadata"]["namespace"] == watched[0] and binding["roleRef"]["kind"] == "Role"
    else:
        [operator_role] = by_kind["ClusterRole"]
        [binding] = by_kind["ClusterRoleBinding"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": operator_role["metadata"]["name"]}, binding
    assert rules_of(operator_role) == want_cluster, (
        f"the operator's role differs from `infergate-operator rbac`: extra "
        f"{rules_of(operator_role) - want_cluster}, missing {want_cluster - rules_of(operator_role)}")
    if "--leader-elect" in args:
        assert len(leader_roles) == 1 and rules_of(leader_roles[0]) == want_leader, leader_roles
    else:
        assert not leader_roles, "a leader-election Role without leader election"

    # The operator's pod: non-root, read-only root filesystem, no capabilities, probes, resources.
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["INFERGATE_SIDECAR_IMAGE"], env
    assert any(a.startswith("--kubernetes-version=1.") for a in args), args

    # The status client certificate: a kubernetes.io/tls Secret of the release's namespace
    # (never in the pod spec), mounted whole into the operator, which reads it from the directory
    # its flag names. Its certificate is a client's, signed by the CA beside it; the CA's key is
    # in a Secret of its own that no pod mounts.
    assert "--status-client-cert-dir=/var/run/infergate/status-client" in args, args
    [client_volume] = [v for v in pod["volumes"] if v["name"] == "status-client"]
    secret_name = client_volume["secret"]["secretName"]
    assert any(m["name"] == "status-client" and m["readOnly"] and "subPath" not in m
               for m in container["volumeMounts"]), container["volumeMounts"]
    made = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    if secret_name in made:
        client = made[secret_name]
        assert client["type"] == "kubernetes.io/tls", client["type"]
        assert "PRIVATE KEY" not in base64.b64decode(client["data"]["ca.crt"]).decode()
        verify_client_certificate(client["data"])
        [ca] = [s for name, s in made.items() if name.endswith("-status-ca")]
        assert ca["data"]["tls.crt"] == client["data"]["ca.crt"]
        mounted = {v.get("secret", {}).get("secretName") for v in pod["volumes"]}
        assert ca["metadata"]["name"] not in mounted, "the CA's key is mounted"
    assert not any("token" in str(e).lower() and "value" in e for e in container["env"]), \
        "a token in the operator's environment"

    # The operator's writes are narrowed to its own objects by an admission policy matched to its
    # ServiceAccount, from Kubernetes 1.30 (the version the pods are rendered for).
    version = next(a.split("=", 1)[1] for a in args if a.startswith("--kubernetes-version="))
    policies = by_kind.get("ValidatingAdmissionPolicy", [])
    if int(version.lstrip("v").split(".")[1]) >= 30:
        named = {p["metadata"]["name"].rsplit("-", 2)[-2] + "-" + p["metadata"]["name"].rsplit("-", 1)[-1]: p
                 for p in policies}
        assert set(named) == {"operator-writes", "tenant-fields"}, list(named)
        bindings = {b["spec"]["policyName"]: b for b in by_kind["ValidatingAdmissionPolicyBinding"]}
        assert set(bindings) == {p["metadata"]["name"] for p in policies}, list(bindings)
        assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())
        policy = named["operator-writes"]
        # The tenants' policy is matched to InferenceServices alone, for every requester.
        tenants = named["tenant-fields"]["spec"]
        assert "matchConditions" not in tenants, tenants
        assert tenants["matchConstraints"]["resourceRules"] == [{
            "apiGroups": ["infergate.dev"], "apiVersions": ["*"],
            "resources": ["inferenceservices"], "operations": ["CREATE", "UPDATE"]}]
        account = pod["serviceAccountName"]
        namespace = deployment["metadata"]["namespace"]
        [condition] = policy["spec"]["matchConditions"]
        assert f"'system:serviceaccount:{namespace}:{account}'" in condition["expression"], condition
        written = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
                   for g in rule["apiGroups"] for r in rule["resources"]}
        # Every kind the operator may create, patch or delete is covered, and nothing else. A
        # LocalSubjectAccessReview is a question, not a stored object: the operator holds
        # `create` on it only so that it may grant it to the pods (RBAC lets it grant only what
        # it holds).
        writable = {(g, r) for rule in need["clusterRules"] for g in rule["apiGroups"]
                    for r in rule["resources"]
                    if {"create", "patch", "update", "delete"} & set(rule["verbs"])
                    and r not in ("events", "inferenceservices/status",
                                  "localsubjectaccessreviews")}
        assert written == writable, (written ^ writable)
    else:
        assert not policies, "a ValidatingAdmissionPolicy for a cluster older than 1.30"

    # The CRD comes with the chart.
    [crd] = by_kind["CustomResourceDefinition"]
    assert crd["metadata"]["name"] == "inferenceservices.infergate.dev"

    os.makedirs(out_dir, exist_ok=True)
    for i, d in enumerate(docs):
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            # Not a Kubernetes API: kubernetes-validate has no schema for it.
            assert d["spec"]["endpoints"][0]["port"] == "metrics", d
            continue
        with open(os.path.join(out_dir, f"{i:02d}-{d['kind']}.yaml"), "w") as f:
            yaml.safe_dump(d, f)


if __name__ == "__main__":
    if sys.argv[1:] == ["--newest-kubernetes"]:
        print(newest_kubernetes())
    else:
        main(*sys.argv[1:])
