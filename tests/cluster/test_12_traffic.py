"""Traffic objects against the real API server: the HTTPRoute and GRPCRoute of
`service.gateway` validated by the Gateway API's own CRDs (from the `sigs.k8s.io/gateway-api`
module) and deleted when the gateway is dropped; a canary's Deployment, ConfigMap and headless
Service made beside the service's, a new share written without rolling a pod, and all of them
deleted when the canary goes."""

from __future__ import annotations

import pytest

from controlplane import wait_for
from test_2_operator import apply, exists, load_example
from test_5_autoscaling import installed_crds, module_file

GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.3"
ROUTE_CRDS = ["config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
              "config/crd/standard/gateway.networking.k8s.io_grpcroutes.yaml"]


@pytest.fixture(scope="module")
def route_crds(cluster):
    yield from installed_crds(cluster, [module_file(GATEWAY_API, path) for path in ROUTE_CRDS])


def triton() -> dict:
    doc = load_example("triton.yaml")
    doc["spec"]["model"]["resources"] = {"requests": {"cpu": "100m"}}
    return doc


def test_routes_pass_the_gateway_apis_schemas(cluster, operator, namespace, route_crds):
    doc = triton()
    name = doc["metadata"]["name"]
    doc["spec"]["service"] = {"gateway": {"name": "public", "namespace": "gateways",
                                          "hostname": "triton.models.example.com",
                                          "grpcSectionName": "grpc"}}
    apply(cluster, namespace, doc)
    wait_for("both routes", lambda: exists(cluster, namespace, "httproute", name)
             and exists(cluster, namespace, "grpcroute", name), timeout=60)
    http = cluster.get_json("httproute", name, "-n", namespace)
    grpc = cluster.get_json("grpcroute", name, "-n", namespace)
    assert http["spec"]["hostnames"] == grpc["spec"]["hostnames"] == ["triton.models.example.com"]
    assert http["spec"]["rules"][0]["backendRefs"][0]["port"] == 8000
    assert grpc["spec"]["rules"][0]["backendRefs"][0]["port"] == 8001
    assert grpc["spec"]["parentRefs"][0]["sectionName"] == "grpc"
    assert http["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"

    del doc["spec"]["service"]["gateway"]
    apply(cluster, namespace, doc)
    wait_for("both routes deleted", lambda: not exists(cluster, namespace, "httproute", name)
             and not exists(cluster, namespace, "grpcroute", name), timeout=60)


def test_a_canarys_objects_come_and_go_and_a_new_share_rolls_no_pod(cluster, operator,
                                                                    namespace):
    doc = triton()
    name = doc["metadata"]["name"]
    canary = {"trafficPercent": 10, "model": {**doc["spec"]["model"], "image": "triton:next"}}
    doc["spec"]["canary"] = canary
    apply(cluster, namespace, doc)
    for kind, object_name in (("deployment", f"{name}-canary"),
                              ("configmap", f"{name}-canary-sidecar"),
                              ("service", f"{name}-canary-peers")):
        wait_for(f"{kind} {object_name}",
                 lambda: exists(cluster, namespace, kind, object_name), timeout=60)
    deployment = cluster.get_json("deployment", f"{name}-canary", "-n", namespace)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert containers[0]["image"] == "triton:next"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "infergate-canary"
    service_selector = cluster.get_json("service", name, "-n", namespace)["spec"]["selector"]
    assert not all(labels.get(k) == v for k, v in service_selector.items())

    def share():
        data = cluster.get_json("configmap", f"{name}-sidecar", "-n", namespace)["data"]
        return data.get("canary-traffic-percent")
    wait_for("the share in the ConfigMap", lambda: share() == "10\n", timeout=60)
    generations = {d: cluster.get_json("deployment", d, "-n", namespace)["metadata"]["generation"]
                   for d in (name, f"{name}-canary")}
    canary["trafficPercent"] = 35
    apply(cluster, namespace, doc)
    wait_for("the new share", lambda: share() == "35\n", timeout=60)
    for d, generation in generations.items():
        assert cluster.get_json("deployment", d, "-n", namespace)["metadata"]["generation"] \
            == generation, f"{d} rolled for a new share"

    del doc["spec"]["canary"]
    apply(cluster, namespace, doc)
    wait_for("the canary's objects deleted", lambda: not any(
        exists(cluster, namespace, kind, object_name) for kind, object_name in (
            ("deployment", f"{name}-canary"), ("configmap", f"{name}-canary-sidecar"),
            ("service", f"{name}-canary-peers"))), timeout=60)
    assert share() is None
