"""The user's path, step by step: install the chart, give the examples their volumes, apply the
examples, start a client. Shared by the tests and the benchmark (bench/pods).

The examples are applied as written, except for what this node cannot provide:
- images: the locally built ones (no registry is reachable) instead of the published ones;
- CPU and memory requests: scaled down to fit every pod on one 2-core node (limits are kept);
- examples/triton.yaml's densenet_onnx (an ONNX model, not in the test repository): its labels
  entry is moved to `classifier`, the repository's classification model, with a ConfigMap of
  that model's labels.
Their volumes are provided as a user's cluster would: a PersistentVolume (hostPath on the node)
bound to each claim the examples name, holding a Triton or MLServer model repository.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path

import yaml

from kube import Kube

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLIENTS = HERE / "clients"

RELEASE = "infergate"
RELEASE_NS = "infergate-system"
NS = "e2e-examples"
SIDECAR_IMAGE = "localhost/infergate/infergate-sidecar:e2e"
OPERATOR_IMAGE = "localhost/infergate/infergate-operator:e2e"
STORAGE_IMAGE = "localhost/infergate/infergate-storage-initializer:e2e"
TRITON_IMAGE = "localhost/infergate-e2e/triton:2.51"
MLSERVER_IMAGE = "localhost/infergate-e2e/mlserver:1.7.1"
CLIENT_IMAGE = "localhost/infergate-e2e/client:2.71.0"

EXAMPLES = ["triton.yaml", "triton-shm.yaml", "sequence.yaml", "mlserver.yaml"]
# The models of the test repositories: what the calls need, no more (each python-backend model is
# a process of its own, and four model servers share two cores).
TRITON_MODELS = ["simple", "simple_string", "identity_fp32", "classifier", "simple_sequence",
                 "sequence_accumulator"]
MLSERVER_MODELS = ["simple", "identity_fp32", "classifier"]
CLASSIFIER_LABELS = "classifier-labels"


# ---------------------------------------------------------------- the chart

def install_chart(kube: Kube, replicas: int = 2):
    repo, tag = OPERATOR_IMAGE.rsplit(":", 1)
    side_repo, side_tag = SIDECAR_IMAGE.rsplit(":", 1)
    storage_repo, storage_tag = STORAGE_IMAGE.rsplit(":", 1)
    kube.helm("install", RELEASE, str(REPO / "charts/infergate"), "--namespace", RELEASE_NS,
              "--create-namespace",
              "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
              "--set", "image.pullPolicy=Never",
              "--set", f"sidecarImage.repository={side_repo}", "--set", f"sidecarImage.tag={side_tag}",
              "--set", f"storageInitializerImage.repository={storage_repo}",
              "--set", f"storageInitializerImage.tag={storage_tag}",
              "--set", f"replicaCount={replicas}",
              "--set", "logFormat=text",
              "--wait", "--timeout=5m")


def operator_pods(kube: Kube) -> list[dict]:
    return kube.running_pods(RELEASE_NS, "app.kubernetes.io/name=infergate-operator")


def leader(kube: Kube) -> str:
    lease = kube.get("lease", "-n", RELEASE_NS, f"{RELEASE}-leader")
    return lease["spec"].get("holderIdentity", "")


# ---------------------------------------------------------------- volumes

def write_repositories(root: Path) -> dict[str, Path]:
    """The Triton and MLServer model repositories the examples' claims serve."""
    triton, mlserver = root / "triton", root / "mlserver"
    subprocess.run([sys.executable, str(REPO / "tests/upstream/make_triton_repo.py"), str(triton)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, str(REPO / "tests/upstream/mlserver/make_repo.py"), str(mlserver),
                    "--http-port", "8080", "--grpc-port", "8081"], check=True, capture_output=True)
    # make_repo.py's settings.json binds MLServer to loopback (as examples/mlserver.yaml's
    # MLSERVER_HOST does; a settings.json in the repository wins over the environment).
    for repo, keep in ((triton, TRITON_MODELS), (mlserver, MLSERVER_MODELS)):
        for entry in repo.iterdir():
            if entry.is_dir() and entry.name not in keep:
                subprocess.run(["rm", "-rf", str(entry)], check=True)
    # Readable by the pods' non-root user.
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    return {"triton-model-repository": triton, "mlserver-models": mlserver}


def provide_claims(kube: Kube, claims: dict[str, Path], namespace: str):
    for claim, path in claims.items():
        pv_name = f"{namespace}-{claim}"
        kube.apply(yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "PersistentVolume",
             "metadata": {"name": pv_name},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                      "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                      "hostPath": {"path": str(path), "type": "Directory"},
                      "claimRef": {"namespace": namespace, "name": claim}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": claim, "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                      "volumeName": pv_name, "resources": {"requests": {"storage": "1Gi"}}}},
        ]))


# ---------------------------------------------------------------- examples

def _small(resources: dict | None, cpu: str = "100m", memory: str = "256Mi") -> dict:
    out = copy.deepcopy(resources or {})
    out.setdefault("requests", {})
    out["requests"]["cpu"] = cpu
    out["requests"]["memory"] = memory
    return out


def adapt(doc: dict) -> dict:
    """One example, changed only where this node differs from a user's cluster (module docs)."""
    doc = copy.deepcopy(doc)
    spec = doc["spec"]
    model = spec["model"]
    image = model["image"]
    if "tritonserver" in image:
        model["image"] = TRITON_IMAGE
    elif "mlserver" in image:
        model["image"] = MLSERVER_IMAGE
    else:
        raise ValueError(f"no test image stands for {image}")
    model["resources"] = _small(model.get("resources"))
    for container in spec.get("pod", {}).get("containers", []):
        container["image"] = CLIENT_IMAGE
        container["resources"] = _small(container.get("resources"), cpu="20m", memory="64Mi")
    for entry in spec.get("models", []):
        if entry["name"] == "densenet_onnx":
            entry["name"] = "classifier"
            entry["labels"] = {"configMap": CLASSIFIER_LABELS, "outputs": {"OUTPUT0": "labels.txt"}}
    return doc


def example(name: str) -> dict:
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    (doc,) = [d for d in docs if d.get("kind") == "InferenceService"]
    return doc


def restricted_namespace(kube: Kube, name: str):
    kube.apply(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }},
    }))


def apply_examples(kube: Kube, repos_root: Path) -> dict[str, dict]:
    """Applies the four examples into NS (restricted) and waits until each is Ready."""
    restricted_namespace(kube, NS)
    claims = write_repositories(repos_root)
    provide_claims(kube, claims, NS)
    labels = (claims["triton-model-repository"] / "classifier" / "labels.txt").read_text()
    kube.apply(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": CLASSIFIER_LABELS, "namespace": NS},
                               "data": {"labels.txt": labels}}))
    applied = {}
    for name in EXAMPLES:
        doc = adapt(example(name))
        kube.apply(yaml.safe_dump(doc), "-n", NS)
        applied[doc["metadata"]["name"]] = doc
    for name in applied:
        kube.wait_condition(f"infsvc/{name}", "Ready", NS, timeout="600s")
    return applied


def status_client_certificate(kube: Kube) -> tuple[str, str]:
    """The operator's client certificate and key (PEM), from the chart's Secret: what reads a
    sidecar's /status from outside its pod, over TLS (the sidecars hold only the CA)."""
    secret = kube.get("secret", "-n", RELEASE_NS, f"{RELEASE}-status-client")
    return tuple(base64.b64decode(secret["data"][k]).decode() for k in ("tls.crt", "tls.key"))


ADMIN_STATUS = """
import os, ssl, sys, tempfile, urllib.request
folder = tempfile.mkdtemp()
for name, pem in (("tls.crt", sys.argv[2]), ("tls.key", sys.argv[3])):
    with open(os.path.join(folder, name), "w") as f:
        f.write(pem)
# The admin port's certificate is the sidecar's own, made at start: nothing to verify it by.
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
context.load_cert_chain(os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key"))
print(urllib.request.urlopen(sys.argv[1], timeout=10, context=context).read().decode())
"""


def admin_status(kube: Kube, ip: str, pod: str = "client", namespace: str = NS) -> dict:
    """A sidecar's /status on its admin port, read from a pod with the operator's client
    certificate, over TLS, as the operator reads it."""
    cert, key = status_client_certificate(kube)
    out = kube.exec(namespace, pod, "client", [
        "python3", "-c", ADMIN_STATUS, f"https://{ip}:8003/status", cert, key])
    return json.loads(out.stdout)


def service_ip(kube: Kube, name: str, namespace: str = NS) -> str:
    return kube.get("service", "-n", namespace, name)["spec"]["clusterIP"]


# ---------------------------------------------------------------- the client pod

def start_client(kube: Kube, namespace: str = NS, name: str = "client") -> str:
    kube.apply(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "e2e-client"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "client", "image": CLIENT_IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    kube.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=180s",
                 timeout=200)
    return name


def call(kube: Kube, script: str, *args: str, pod: str = "client", container: str = "client",
         namespace: str = NS, timeout: float = 300) -> dict:
    """Runs tests/e2e/clients/SCRIPT in a pod; its last line of output is a JSON answer."""
    result = kube.python(namespace, pod, container, CLIENTS / script, *args, check=False,
                         timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{script} {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stderr[-4000:]}{result.stdout[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


class Load:
    """tests/e2e/clients/load.py running in the client pod against a Service, in the background."""

    def __init__(self, kube: Kube, service: str, model: str = "classifier", threads: int = 2,
                 namespace: str = NS, pod: str = "client", protocols: str = "rest,grpc"):
        self.kube, self.namespace, self.pod = kube, namespace, pod
        self.stop_file = f"/tmp/stop-load-{service}"
        host = service_ip(kube, service, namespace)
        argv = kube.kubectl_argv("exec", "-i", "-n", namespace, pod, "-c", "client", "--",
                                 "python3", "-", host, "--model", model, "--threads", str(threads),
                                 "--protocols", protocols, "--stop-file", self.stop_file)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.proc.stdin.write((CLIENTS / "load.py").read_text())
        self.proc.stdin.close()
        self.proc.stdin = None  # communicate() must not touch it again

    def stop(self) -> dict:
        self.kube.exec(self.namespace, self.pod, "client", ["touch", self.stop_file])
        out, err = self.proc.communicate(timeout=180)
        if self.proc.returncode != 0:
            raise AssertionError(f"load.py failed ({self.proc.returncode}):\n{err[-4000:]}{out[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])
