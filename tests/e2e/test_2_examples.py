"""`kubectl apply -f examples/...` then `kubectl wait --for=condition=Ready`, and the resources'
status as the real sidecars in the pods report it."""

from __future__ import annotations

import pytest

import scenario

NS = scenario.NS
SERVICES = ["triton", "triton-shm", "sequence", "mlserver"]


def infsvc(kube, name):
    return kube.get("infsvc", "-n", NS, name)


@pytest.mark.parametrize("name", SERVICES)
def test_example_is_ready(kube, served, name):
    obj = infsvc(kube, name)
    ready = kube.condition(obj, "Ready")
    assert ready.get("status") == "True", obj["status"]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    want = obj["spec"].get("replicas", 1)
    pods = kube.running_pods(NS, f"app.kubernetes.io/instance={name}")
    assert len(pods) == want, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        statuses = pod["status"]["containerStatuses"] + pod["status"].get("initContainerStatuses", [])
        assert all(s.get("ready") or s["name"] != "infergate" for s in statuses), statuses


def admin_status(kube, client, pod) -> dict:
    """What a pod's sidecar reports on its admin port (the operator probes the same endpoint,
    with the same token)."""
    return scenario.admin_status(kube, pod["status"]["podIP"], pod=client)


@pytest.mark.parametrize("name", SERVICES)
def test_status_extensions_are_what_the_sidecars_report(kube, served, client, name):
    obj = infsvc(kube, name)
    extensions = {e["name"]: e for e in obj["status"]["extensions"]}
    pods = kube.running_pods(NS, f"app.kubernetes.io/instance={name}")
    reported = admin_status(kube, client, pods[0])
    for entry in reported["extensions"]:
        mine = extensions[entry["name"]]
        assert mine["state"].lower() == entry["state"].lower(), (mine, entry)
        assert mine.get("implementation", "").lower() == (entry.get("implementation") or "").lower(), (mine, entry)


# What each example's pair (sidecar + model server) can do, and where it is implemented, as the
# design says it should be reported: the sidecar adds binary data and classification; Triton
# brings sequences, and takes clients' CUDA handles where client shared memory is on; MLServer has
# neither (the sidecar runs sequences, and no one can open CUDA handles: no GPU here); system
# shared memory is on where the example turns it on.
EXPECTED = {
    "triton": {
        "binary_tensor_data": ("Active", "sidecar"),
        "classification": ("Active", "sidecar"),
        "sequence": ("Active", "upstream"),
        "system_shared_memory": ("Disabled", "sidecar"),
        "cuda_shared_memory": ("Disabled", "upstream"),
    },
    "triton-shm": {
        "binary_tensor_data": ("Active", "sidecar"),
        "classification": ("Active", "sidecar"),
        "sequence": ("Active", "upstream"),
        "system_shared_memory": ("Active", "sidecar"),
        "cuda_shared_memory": ("Active", "upstream"),
    },
    "sequence": {
        "sequence": ("Active", "upstream"),
        "binary_tensor_data": ("Active", "sidecar"),
        "system_shared_memory": ("Disabled", "sidecar"),
    },
    "mlserver": {
        "binary_tensor_data": ("Active", "sidecar"),
        "classification": ("Active", "sidecar"),
        "sequence": ("Active", "sidecar"),
        "system_shared_memory": ("Disabled", "sidecar"),
        "cuda_shared_memory": ("Unsupported", "sidecar"),
    },
}


@pytest.mark.parametrize("name", SERVICES)
def test_extension_states(kube, served, name):
    obj = infsvc(kube, name)
    states = {e["name"]: (e["state"], e.get("implementation")) for e in obj["status"]["extensions"]}
    for extension, want in EXPECTED[name].items():
        assert states.get(extension) == want, (extension, obj["status"]["extensions"])
