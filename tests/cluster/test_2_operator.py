"""The real operator against the real API server: children as the server stores them, owner
references and garbage collection, the scale subresource, drift and deletion repaired, status
conditions and extension states written from real sidecar probes."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
import yaml

from conftest import REPO
from controlplane import wait_for

LABEL = "app.kubernetes.io/managed-by=infergate-operator"


def load_example(file: str) -> dict:
    docs = yaml.safe_load_all((REPO / "examples" / file).read_text())
    return next(d for d in docs if isinstance(d, dict) and d.get("kind") == "InferenceService")


def provide_volumes(cluster, namespace: str, doc: dict):
    """Creates what the example expects the user to have: each PersistentVolumeClaim it mounts,
    bound to a hostPath PersistentVolume (there is no provisioner in the test cluster, and the
    scheduler does not place a pod whose claim is missing or unbound)."""
    for volume in doc["spec"].get("pod", {}).get("volumes", []):
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if not claim or exists(cluster, namespace, "pvc", claim):
            continue
        pv = f"{namespace}-{claim}"[:63].strip("-")
        objects = [
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                      "storageClassName": "", "hostPath": {"path": f"/tmp/{pv}"},
                      "claimRef": {"namespace": namespace, "name": claim}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": claim, "namespace": namespace},
             "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv,
                      "resources": {"requests": {"storage": "1Gi"}}}},
        ]
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": objects}))
        # Bound before the pods come, as a provisioned claim would be: a pod scheduled before
        # the binding is refused once ("unbound immediate PersistentVolumeClaims"), which the
        # status rightly reports as a failure.
        cluster.kubectl("wait", f"pvc/{claim}", "-n", namespace,
                        "--for=jsonpath={.status.phase}=Bound", "--timeout=60s")


def apply(cluster, namespace: str, doc: dict):
    provide_volumes(cluster, namespace, doc)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def isvc(cluster, namespace, name) -> dict:
    return cluster.get_json("infsvc", name, "-n", namespace)


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def exists(cluster, namespace, kind, name) -> bool:
    r = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False)
    return r.returncode == 0


def wait_available(cluster, namespace, name, timeout=120):
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Available",
                    f"--timeout={timeout}s")


@pytest.fixture
def triton(cluster, operator, namespace):
    doc = load_example("triton.yaml")
    apply(cluster, namespace, doc)
    return namespace, doc["metadata"]["name"]


def test_children_are_created_with_owner_references(cluster, triton):
    namespace, name = triton
    owner = wait_for("the InferenceService to get a uid",
                     lambda: isvc(cluster, namespace, name)["metadata"].get("uid"))
    for kind, child in (("deployment", name), ("service", name), ("configmap", f"{name}-sidecar")):
        wait_for(f"{kind} {child}", lambda: exists(cluster, namespace, kind, child), timeout=60)
    children = cluster.get_json("deployment,service,configmap", "-n", namespace, "-l", LABEL,
                                "--show-managed-fields")["items"]
    assert sorted(c["kind"] for c in children) == ["ConfigMap", "Deployment", "Service"]
    for child in children:
        refs = child["metadata"]["ownerReferences"]
        assert refs == [{
            "apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService", "name": name,
            "uid": owner, "controller": True, "blockOwnerDeletion": True,
        }], child["kind"]
        managers = {m["manager"] for m in child["metadata"]["managedFields"]}
        assert "infergate-operator" in managers, (child["kind"], managers)
    deployment = next(c for c in children if c["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"] + pod.get("initContainers", [])}
    assert containers["infergate"]["image"] == "registry.example/infergate-sidecar:test"
    assert containers["model"]["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"
    # With one replica there is no PodDisruptionBudget.
    assert not exists(cluster, namespace, "pdb", name)


def test_it_becomes_available_and_ready_with_status_from_the_sidecar(cluster, triton, sidecar):
    namespace, name = triton
    wait_available(cluster, namespace, name)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    obj = isvc(cluster, namespace, name)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["readyReplicas"] == 1
    for kind in ("Ready", "Available", "ModelReady", "ExtensionsReady"):
        c = condition(obj, kind)
        assert c["status"] == "True", c
        assert c["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Degraded")["status"] == "False"
    # The extension states come from the real sidecar's admin endpoint.
    names = {e["name"]: e for e in status["extensions"]}
    assert names["binary_tensor_data"]["state"] == "Active"
    assert names["cuda_shared_memory"]["state"] != "Active"
    assert status["extensionsSummary"].endswith("active")
    assert status["model"]["name"] == "densenet_onnx"
    assert status["url"]["rest"] == f"http://{name}.{namespace}.svc:8000"


def metric(operator, name: str) -> float:
    text = urllib.request.urlopen(operator.metrics, timeout=5).read().decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_a_settled_service_is_reconciled_without_writes(cluster, operator, triton):
    """What the server stores (defaults filled in, quantities normalised) must compare equal to
    what the operator wants, or every reconcile would rewrite the children."""
    namespace, name = triton
    wait_available(cluster, namespace, name)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")

    def versions():
        items = cluster.get_json("deployment,service,configmap", "-n", namespace, "-l", LABEL)["items"]
        return {(i["kind"], i["metadata"]["name"]): i["metadata"]["resourceVersion"] for i in items}

    before, writes = versions(), metric(operator, "infergate_operator_child_writes_total")
    reconciles = metric(operator, "infergate_operator_reconciles_total")
    for i in range(3):  # each annotation change is a watch event, so a reconcile
        cluster.kubectl("annotate", "--overwrite", f"infsvc/{name}", "-n", namespace, f"touch={i}")
    wait_for("the reconciles to run", lambda: metric(
        operator, "infergate_operator_reconciles_total") >= reconciles + 1, timeout=30)
    time.sleep(2)
    assert versions() == before
    assert metric(operator, "infergate_operator_child_writes_total") == writes


def test_kubectl_get_shows_the_printer_columns(cluster, triton):
    namespace, name = triton
    wait_available(cluster, namespace, name)
    cluster.kubectl("wait", f"infsvc/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    out = cluster.kubectl("get", "infsvc", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "REPLICAS", "MODEL", "EXTENSIONS", "TLS", "AGE"]
    row = out[1].split()
    assert row[:4] == [name, "True", "1", "densenet_onnx"]
    # What the sidecar serves, as it reports it.
    assert row[6] == "Off", row  # after "4/4 active"
    wide = cluster.kubectl("get", "infsvc", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert {"URL", "CERT-EXPIRES"} <= set(wide[0].split())
    assert f"http://{name}.{namespace}.svc:8000" in wide[1]


def test_scale_subresource_drives_replicas_and_the_disruption_budget(cluster, triton):
    namespace, name = triton
    wait_available(cluster, namespace, name)
    cluster.kubectl("scale", f"infsvc/{name}", "-n", namespace, "--replicas=2")
    wait_for("the Deployment to follow to 2", lambda: cluster.get_json(
        "deployment", name, "-n", namespace)["spec"]["replicas"] == 2, timeout=60)
    wait_for("a PodDisruptionBudget", lambda: exists(cluster, namespace, "pdb", name), timeout=60)
    scale = f"/apis/infergate.dev/v1alpha1/namespaces/{namespace}/inferenceservices/{name}/scale"
    wait_for("status.replicas 2 through the scale subresource", lambda: json.loads(cluster.kubectl(
        "get", "--raw", scale).stdout)["status"].get("replicas") == 2, timeout=90)
    cluster.kubectl("scale", f"infsvc/{name}", "-n", namespace, "--replicas=1")
    wait_for("the PodDisruptionBudget to go", lambda: not exists(cluster, namespace, "pdb", name),
             timeout=60)
    assert cluster.get_json("deployment", name, "-n", namespace)["spec"]["replicas"] == 1


def test_spec_edits_reach_the_children(cluster, triton):
    namespace, name = triton
    wait_available(cluster, namespace, name)
    before = isvc(cluster, namespace, name)["metadata"]["generation"]
    cluster.kubectl("patch", "infsvc", name, "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"model": {"image": "nvcr.io/nvidia/tritonserver:24.11-py3"}}}))

    def model_image():
        d = cluster.get_json("deployment", name, "-n", namespace)
        return {c["name"]: c["image"] for c in d["spec"]["template"]["spec"]["containers"]}["model"]

    wait_for("the new image in the Deployment",
             lambda: model_image() == "nvcr.io/nvidia/tritonserver:24.11-py3", timeout=60)
    wait_for("observedGeneration to follow", lambda: isvc(cluster, namespace, name)["status"].get(
        "observedGeneration") == before + 1, timeout=60)


def test_drift_and_deleted_children_are_repaired(cluster, triton):
    namespace, name = triton
    wait_available(cluster, namespace, name)
    old_uid = cluster.get_json("service", name, "-n", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "service", name, "-n", namespace)
    wait_for("the Service to be recreated", lambda: cluster.get_json(
        "service", name, "-n", namespace)["metadata"]["uid"] != old_uid, timeout=60)
    cluster.kubectl("delete", "configmap", f"{name}-sidecar", "-n", namespace)
    wait_for("the ConfigMap to be recreated",
             lambda: exists(cluster, namespace, "configmap", f"{name}-sidecar"), timeout=60)
    # Someone scales the Deployment by hand: the InferenceService's replicas win.
    cluster.kubectl("scale", f"deployment/{name}", "-n", namespace, "--replicas=3")
    wait_for("the Deployment back at 1 replica", lambda: cluster.get_json(
        "deployment", name, "-n", namespace)["spec"]["replicas"] == 1, timeout=60)


def test_a_spec_the_server_would_refuse_in_the_pod_is_reported_not_retried(cluster, operator,
                                                                          namespace):
    doc = load_example("triton.yaml")
    doc["spec"]["model"]["ports"] = [{"name": "tritonserver-metrics", "containerPort": 9002}]
    apply(cluster, namespace, doc)
    name = doc["metadata"]["name"]

    def invalid():
        ready = condition(isvc(cluster, namespace, name), "Ready")
        return ready if ready and ready["reason"] == "InvalidSpec" else None

    ready = wait_for("the InvalidSpec condition", invalid, timeout=60)
    assert ready["status"] == "False"
    assert "tritonserver-metrics" in ready["message"] and "15" in ready["message"]
    assert not exists(cluster, namespace, "deployment", name)
    events = cluster.get_json("events", "-n", namespace)["items"]
    assert any(e.get("reason") == "InvalidSpec" for e in events), events


def test_a_service_of_the_same_name_that_the_user_made_is_never_taken_over(cluster, operator,
                                                                          namespace):
    doc = load_example("triton.yaml")
    name = doc["metadata"]["name"]
    theirs = {"apiVersion": "v1", "kind": "Service",
              "metadata": {"name": name, "namespace": namespace, "labels": {"team": "theirs"}},
              "spec": {"selector": {"app": "theirs"}, "ports": [{"name": "web", "port": 80}]}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(theirs))
    apply(cluster, namespace, doc)

    def conflict():
        ready = condition(isvc(cluster, namespace, name), "Ready")
        return ready if ready and ready["reason"] == "Conflict" else None

    ready = wait_for("the Conflict condition", conflict, timeout=60)
    assert ready["status"] == "False"
    assert f"Service '{name}' already exists and is not controlled by this InferenceService" \
        in ready["message"], ready
    events = cluster.get_json("events", "-n", namespace)["items"]
    assert any(e.get("reason") == "Conflict" for e in events), events
    service = cluster.get_json("service", name, "-n", namespace)
    assert "ownerReferences" not in service["metadata"], service["metadata"]
    assert service["spec"]["selector"] == {"app": "theirs"}
    assert [p["port"] for p in service["spec"]["ports"]] == [80]

    # Deleting the InferenceService leaves the user's Service where it was.
    cluster.kubectl("delete", "infsvc", name, "-n", namespace, "--wait=true", "--timeout=60s")
    time.sleep(3)
    assert exists(cluster, namespace, "service", name)

    # Once the user's object is gone, the next try creates the InferenceService's own.
    cluster.kubectl("delete", "service", name, "-n", namespace)
    apply(cluster, namespace, doc)
    wait_for("the InferenceService's own Service",
             lambda: cluster.get_json("service", name, "-n", namespace)["metadata"]
             .get("ownerReferences"), timeout=60)


def test_deleting_the_resource_garbage_collects_the_children(cluster, triton):
    namespace, name = triton
    wait_for("the Deployment", lambda: exists(cluster, namespace, "deployment", name), timeout=60)
    cluster.kubectl("delete", "infsvc", name, "-n", namespace, "--wait=true", "--timeout=60s")

    def gone():
        left = cluster.get_json("deployment,service,configmap,pdb,replicaset,pod", "-n", namespace,
                                "-l", LABEL)["items"]
        return not left

    wait_for("the children to be garbage collected", gone, timeout=90)


def test_every_example_gets_its_children_and_an_honest_status(cluster, operator, namespace):
    examples = sorted((REPO / "examples").glob("*.yaml"))
    names = []
    for path in examples:
        docs = [d for d in yaml.safe_load_all(path.read_text())
                if isinstance(d, dict) and d.get("kind") == "InferenceService"]
        if not docs:
            continue  # a sidecar configuration file, not a manifest
        for doc in docs:
            provide_volumes(cluster, namespace, doc)
            names.append(doc["metadata"]["name"])
        # As the user does it: the file itself.
        cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    assert len(names) >= 5

    def diagnose(error):
        # Seen intermittently (clean-clone CI runs, and once in four local runs): an example's
        # pod not becoming, or not staying, ready. Say what the nodes and pods looked like then.
        nodes = cluster.kubectl("get", "nodes", "-o", "wide", check=False).stdout
        pods = cluster.kubectl("get", "pods,deployments", "-n", namespace, "-o", "wide",
                               check=False).stdout
        conditions = cluster.kubectl(
            "get", "pods", "-n", namespace, "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.conditions}{\"\\n\"}{end}",
            check=False).stdout
        node_conditions = cluster.kubectl(
            "get", "nodes", "-o", "jsonpath={.items[*].status.conditions}", check=False).stdout
        return AssertionError(f"{error}\nnodes:\n{nodes}\n{node_conditions}\npods:\n{pods}\n"
                              f"{conditions}")

    for name in names:
        try:
            wait_available(cluster, namespace, name)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            raise diagnose(e) from e

    def wants_cuda(obj):
        return obj["spec"].get("extensions", {}).get("cudaSharedMemory", {}).get("enabled")

    def settled(name):
        # The status passes through "not yet" states while the pods start and the first probes
        # answer (a Deployment can also roll once more after it was first Available); settled is
        # the state it stays in: Ready, or — where the sidecar that answers cannot have what was
        # asked (CUDA without a GPU) — Available, held back by the extension.
        # Until then the last status seen is what a timeout reports.
        obj = isvc(cluster, namespace, name)
        current = obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        expected = ("Available",) if wants_cuda(obj) else ("Ready",)
        if not (current and condition(obj, "ExtensionsReady") and all(
                (condition(obj, c) or {}).get("status") == "True" for c in expected)):
            raise AssertionError(f"{name} not settled: {obj.get('status')}")
        return obj

    for name in names:
        try:
            obj = wait_for(f"{name} status", lambda: settled(name), timeout=90)
        except TimeoutError as e:
            raise diagnose(e) from e
        ready = condition(obj, "Ready")
        if wants_cuda(obj):
            # The sidecar that answers has no GPU: the status must say so, not claim success.
            assert ready["status"] == "False", obj["status"]
            ext = next(e for e in obj["status"]["extensions"] if e["name"] == "cuda_shared_memory")
            assert ext["state"] != "Active" and ext.get("reason"), ext
        else:
            assert ready["status"] == "True", (name, obj["status"])
        if obj["spec"]["replicas"] >= 2:
            assert exists(cluster, namespace, "pdb", name)


def test_operator_metrics_count_reconciles(operator):
    assert metric(operator, "infergate_operator_reconciles_total") > 0
    with pytest.raises(subprocess.TimeoutExpired):
        operator.proc.wait(timeout=0.1)  # still running
