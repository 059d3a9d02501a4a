"""The CRD as the real API server sees it: installed by the chart, its OpenAPI schema and CEL rules
evaluated by the server, its printer columns and descriptions served to kubectl."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from conftest import REPO
from controlplane import wait_for

CRD = "inferenceservices.infergate.dev"


def isvc_examples() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "InferenceService":
                found.append((path.name, doc))
    return found


EXAMPLES = isvc_examples()


@pytest.fixture(scope="module")
def crd(cluster, chart):
    def established():
        crd = cluster.get_json("crd", CRD)
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in crd["status"]["conditions"])

    wait_for("the CRD to be established", established, timeout=30)
    return cluster.get_json("crd", CRD)


def test_the_chart_installs_the_generated_crd(crd):
    generated = yaml.safe_load((REPO / "crds" / f"{CRD}.yaml").read_text())
    assert crd["spec"]["names"] == {**crd["spec"]["names"], **generated["spec"]["names"]}
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    assert served == [v["name"] for v in generated["spec"]["versions"]]
    assert "infsvc" in crd["spec"]["names"]["shortNames"]


def test_kubectl_explain_shows_the_field_descriptions(cluster, crd):
    spec_doc = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    # The server publishes the CRD's OpenAPI a moment after it is established.
    out = wait_for("kubectl explain", lambda: cluster.kubectl("explain", "infsvc.spec").stdout,
                   timeout=30)
    assert "KIND:" in out and "InferenceService" in out
    # Every top-level spec field is listed with the first words of its description.
    for field, schema in spec_doc["properties"].items():
        assert field in out, f"{field} missing from kubectl explain"
        words = " ".join(schema.get("description", "").split()[:4])
        assert words and " ".join(words.split()) in " ".join(out.split()), \
            f"description of {field} ({words!r}) missing"
    nested = cluster.kubectl("explain", "infsvc.spec.extensions.systemSharedMemory").stdout
    assert "size" in nested


@pytest.mark.parametrize("name,doc", EXAMPLES, ids=[f"{n}:{d['metadata']['name']}" for n, d in EXAMPLES])
def test_every_example_is_accepted_by_the_server(cluster, crd, name, doc):
    result = cluster.kubectl("apply", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-",
                             input=json.dumps(doc))
    stored = json.loads(result.stdout)
    # Defaults from the schema are filled in by the server.
    assert stored["spec"]["replicas"] >= 0


def _base() -> dict:
    return copy.deepcopy(next(d for n, d in EXAMPLES if d["metadata"]["name"] == "triton"))


def _invalid_cases():
    def shm_without_size(d):
        d["spec"].setdefault("extensions", {})["systemSharedMemory"] = {"enabled": True, "size": "0"}
        return "systemSharedMemory.size must be a quantity greater than 0"

    def same_ports(d):
        d["spec"]["sidecar"] = {"ports": {"http": 8000, "grpc": 8000, "metrics": 8002, "admin": 8003}}
        return "sidecar ports must be pairwise different"

    def rest_upstream(d):
        d["spec"]["upstream"]["protocol"] = "rest"
        d["spec"]["upstream"].pop("restPort", None)
        return "upstream.protocol rest needs upstream.restPort"

    def cuda_without_gpu(d):
        d["spec"].setdefault("extensions", {})["cudaSharedMemory"] = {"enabled": True}
        return "extensions.cudaSharedMemory needs a GPU"

    def name_with_dot(d):
        d["metadata"]["name"] = "triton.v2"
        return "metadata.name must be a DNS-1035 label"

    def replicas_not_a_number(d):
        d["spec"]["replicas"] = "two"
        return "spec.replicas"

    def negative_replicas(d):
        d["spec"]["replicas"] = -1
        return "spec.replicas"

    def unknown_field(d):
        d["spec"]["modle"] = {}
        return 'unknown field "spec.modle"'

    # Credentials never ride in storageUri (the API server's regular expressions are RE2's,
    # which the operator's own admission check does not use: both are tested).
    def password_in_storage_uri(d):
        d["spec"]["model"]["storageUri"] = "https://user:hunter2@host/m.tgz"
        return "model.storageUri carries a user name or password"

    def presigned_storage_uri(d):
        d["spec"]["model"]["storageUri"] = "https://b.example/m.tgz?x-amz-SIGNATURE=ab"
        return "model.storageUri carries a signature or token in its query"

    def storage_uri_and_uri_from(d):
        d["spec"]["model"]["storageUri"] = "s3://b/m"
        d["spec"]["model"]["storage"] = {"uriFrom": {"secretKeyRef": {"name": "s", "key": "u"}}}
        return "give model.storageUri or model.storage.uriFrom, not both"

    def credentials_over_http(d):
        d["spec"]["model"]["storageUri"] = "http://host/m.tgz"
        d["spec"]["model"]["storage"] = {"secretName": "creds"}
        return "would travel in clear"

    return [shm_without_size, same_ports, rest_upstream, cuda_without_gpu, name_with_dot,
            replicas_not_a_number, negative_replicas, unknown_field, password_in_storage_uri,
            presigned_storage_uri, storage_uri_and_uri_from, credentials_over_http]


@pytest.mark.parametrize("mutate", _invalid_cases(), ids=lambda f: f.__name__)
def test_invalid_specs_are_rejected_by_the_server(cluster, crd, mutate):
    doc = _base()
    expected = mutate(doc)
    result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", "default",
                             "-f", "-", input=json.dumps(doc), check=False)
    assert result.returncode != 0, f"the server accepted it: {result.stdout}"
    assert expected in result.stderr, result.stderr
