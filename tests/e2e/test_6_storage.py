"""A model repository in an S3 bucket to a served, autoscaled service, with one manifest
(examples/triton-s3.yaml): the storage initializer fetches the repository from a real S3 server
(rclone's `serve s3`, signature-v4 authentication, on this host) into the pod, Triton serves it
through the sidecar, the InferenceService is Ready with its HorizontalPodAutoscaler; a wrong key
shows in the status with the store's own error."""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import yaml

import scenario
from kube import host_ip

NS = "e2e-storage"
ACCESS_KEY, SECRET_KEY = "infergate-e2e", "e2e-secret-key-0123"


@pytest.fixture(scope="module")
def s3(kube, tmp_path_factory):
    """The S3 server on the host's address (pods reach the node there), with the `simple` model
    of the Triton test repository under s3://models/triton."""
    root = tmp_path_factory.mktemp("s3")
    full = root / "full"
    subprocess.run([sys.executable, str(scenario.REPO / "tests/upstream/make_triton_repo.py"),
                    str(full)], check=True, capture_output=True)
    shutil.copytree(full / "simple", root / "buckets" / "models" / "triton" / "simple")
    with socket.socket() as s:
        s.bind((host_ip(), 0))
        port = s.getsockname()[1]
    log = open(kube.work / "s3-server.log", "w")
    proc = subprocess.Popen([os.environ["INFERGATE_S3_SERVER"], "serve", "s3",
                             str(root / "buckets"), "--addr", f"{host_ip()}:{port}",
                             "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((host_ip(), port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.2)
    yield f"http://{host_ip()}:{port}"
    proc.terminate()
    proc.wait(10)


def manifest(endpoint: str, name: str, secret_key: str) -> list[dict]:
    """examples/triton-s3.yaml as a user fills it in, with this node's images and sizes."""
    docs = [d for d in yaml.safe_load_all((scenario.REPO / "examples/triton-s3.yaml").read_text())
            if d]
    secret = next(d for d in docs if d["kind"] == "Secret")
    service = next(d for d in docs if d["kind"] == "InferenceService")
    secret = copy.deepcopy(secret)
    secret["metadata"]["name"] = f"{name}-store"
    secret["stringData"].update({"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                 "AWS_SECRET_ACCESS_KEY": secret_key,
                                 "AWS_ENDPOINT_URL": endpoint})
    service = scenario.adapt(service)
    service["metadata"]["name"] = name
    service["spec"]["model"]["storage"]["secretName"] = f"{name}-store"
    return [secret, service]


@pytest.fixture(scope="module")
def storage_ns(kube, release):
    scenario.restricted_namespace(kube, NS)
    yield NS
    kube.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_a_repository_in_s3_is_served_and_autoscaled(kube, s3, storage_ns):
    kube.apply(yaml.safe_dump_all(manifest(s3, "triton-s3", SECRET_KEY)), "-n", NS)
    kube.wait_condition("infsvc/triton-s3", "Ready", NS, timeout="600s")
    obj = kube.get("infsvc", "-n", NS, "triton-s3")
    assert obj["status"]["model"]["name"] == "simple", obj["status"]
    assert "lastFailureInfo" not in obj["status"], obj["status"]

    (pod,) = kube.running_pods(NS, "app.kubernetes.io/instance=triton-s3")
    fetch = next(s for s in pod["status"]["initContainerStatuses"]
                 if s["name"] == "storage-initializer")
    assert fetch["state"]["terminated"]["exitCode"] == 0, fetch
    hpa = kube.get("hpa", "-n", NS, "triton-s3")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "triton-s3"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)

    # An inference through the Service, from a client pod: the model came from the bucket.
    client = scenario.start_client(kube, namespace=NS, name="storage-client")
    ip = scenario.service_ip(kube, "triton-s3", NS)
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
    out = kube.exec(NS, client, "client", ["python3", "-c",
        "import sys,urllib.request;"
        f"r=urllib.request.Request('http://{ip}:8000/v2/models/simple/infer',data=sys.argv[1].encode(),"
        "headers={'Content-Type':'application/json'});"
        "print(urllib.request.urlopen(r,timeout=30).read().decode())", body])
    answer = {o["name"]: o["data"] for o in json.loads(out.stdout)["outputs"]}
    assert answer["OUTPUT0"] == [i + 1 for i in range(16)], answer
    assert answer["OUTPUT1"] == [i - 1 for i in range(16)], answer


def test_a_wrong_key_shows_in_the_status_with_the_stores_error(kube, s3, storage_ns):
    kube.apply(yaml.safe_dump_all(manifest(s3, "triton-s3-badkey", "not-the-key")), "-n", NS)

    def failed():
        obj = kube.get("infsvc", "-n", NS, "triton-s3-badkey")
        info = obj.get("status", {}).get("lastFailureInfo")
        return obj if info and info["reason"] == "ModelFetchFailed" else None

    obj = kube.wait_until("ModelFetchFailed in the status", failed, timeout=300)
    info = obj["status"]["lastFailureInfo"]
    assert "SignatureDoesNotMatch" in info["message"], info
    assert info["exitCode"] == 1, info
    assert info["location"].endswith("container storage-initializer"), info
    ready = kube.condition(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ModelFetchFailed", ready
    kube.kubectl("delete", "infsvc", "-n", NS, "triton-s3-badkey", "--wait=false")
