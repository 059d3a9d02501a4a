"""Checks one `helm template` output and splits it into one file per object for
kubernetes-validate. Usage: check_rendered.py RENDERED.yaml RBAC.json OUT_DIR
(or --newest-kubernetes: print the newest version kubernetes-validate knows)."""

import json
import os
import re
import sys

import yaml


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

    # RBAC: exactly what the operator needs.
    [cluster_role] = by_kind["ClusterRole"]
    assert rules_of(cluster_role) == want_cluster, (
        f"ClusterRole differs from `infergate-operator rbac`: extra {rules_of(cluster_role) - want_cluster}, "
        f"missing {want_cluster - rules_of(cluster_role)}")
    [deployment] = by_kind["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    roles = by_kind.get("Role", [])
    if "--leader-elect" in args:
        assert len(roles) == 1 and rules_of(roles[0]) == want_leader, roles
    else:
        assert not roles, "a leader-election Role without leader election"

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
