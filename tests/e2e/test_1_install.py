"""`helm install`: the operator runs as the chart's pods, from the image docker/operator.Dockerfile
builds, with in-cluster configuration and the chart's RBAC."""

from __future__ import annotations

import scenario


def test_node_runs_real_pods(kube):
    node = kube.get("node", "e2e-node")
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert info["kubeletVersion"].startswith("v1.34"), info
    # Nothing here is faked: no kwok node exists.
    names = [n["metadata"]["name"] for n in kube.get("nodes")["items"]]
    assert names == ["e2e-node"], names


def test_operator_runs_as_the_charts_pods(kube, release):
    pods = scenario.operator_pods(kube)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        spec = pod["spec"]
        assert spec["serviceAccountName"] == scenario.RELEASE
        (container,) = spec["containers"]
        assert container["image"] == scenario.OPERATOR_IMAGE
        # In-cluster configuration: the ServiceAccount token, no kubeconfig.
        env = {e["name"] for e in container.get("env", [])}
        assert "KUBECONFIG" not in env
        statuses = pod["status"]["containerStatuses"]
        assert all(s["ready"] for s in statuses), statuses
    # One of them leads, through the chart's Lease.
    holder = scenario.leader(kube)
    assert holder in {p["metadata"]["name"] for p in pods}, holder


def test_images_are_the_dockerfiles_builds(kube, release, served, images):
    """The operator's and the sidecars' containers run the images podman built from
    docker/*.Dockerfile (same image ID), not some other build."""
    running = {}
    for pod in kube.get("pods", "-A")["items"]:
        for status in pod["status"].get("containerStatuses", []) + \
                pod["status"].get("initContainerStatuses", []):
            running.setdefault(status["image"], set()).add(status["imageID"])
    for image in (scenario.OPERATOR_IMAGE, scenario.SIDECAR_IMAGE):
        _, built = images[image]
        assert any(built in i for i in running.get(image, ())), (image, built, running)
