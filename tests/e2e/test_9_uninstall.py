"""Deleting the resources and `helm uninstall` leave nothing: no pod, no object of the release, no
container, address or cgroup on the node; stopping the node leaves the host as it was."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import node
import scenario

NS = scenario.NS


def test_deleting_the_examples_removes_their_pods(kube, served):
    kube.kubectl("delete", "infsvc", "--all", "-n", NS, "--wait=true", timeout=300)
    kube.wait_until("the examples' pods to go",
                    lambda: not kube.pods(NS, "app.kubernetes.io/managed-by=infergate-operator"),
                    timeout=300, interval=2)
    for kind in ("deployments", "services", "configmaps", "poddisruptionbudgets"):
        left = [o["metadata"]["name"] for o in kube.get(kind, "-n", NS, "-l",
                                                        "app.kubernetes.io/managed-by=infergate-operator")["items"]]
        assert left == [], (kind, left)


def test_helm_uninstall_leaves_nothing(kube, release):
    pods = {p["metadata"]["uid"] for p in kube.pods(scenario.RELEASE_NS, "app.kubernetes.io/name=infergate-operator")}
    kube.helm("uninstall", scenario.RELEASE, "-n", scenario.RELEASE_NS, "--wait", "--timeout=3m")
    kube.wait_until("the operator's pods to go",
                    lambda: not kube.pods(scenario.RELEASE_NS, "app.kubernetes.io/name=infergate-operator"),
                    timeout=180, interval=2)
    left = kube.kubectl("get", "all,lease,serviceaccount,role,rolebinding", "-n", scenario.RELEASE_NS,
                        "-l", "app.kubernetes.io/instance=infergate", "-o", "name").stdout.split()
    assert left == [], left
    cluster_left = kube.kubectl("get", "clusterrole,clusterrolebinding", "-l",
                                "app.kubernetes.io/instance=infergate", "-o", "name").stdout.split()
    assert cluster_left == [], cluster_left
    # Node side: no container, sandbox or cgroup of the operator's pods remains.
    def node_clean():
        containers = [c for c in kube.node.containers()
                      if c["labels"].get("io.kubernetes.pod.uid") in pods]
        cgroups = [d for uid in pods for d in Path("/sys/fs/cgroup/memory/kubepods").rglob(f"pod{uid}")]
        return not containers and not cgroups
    kube.wait_until("the node to drop the operator's pods", node_clean, timeout=120, interval=2)


def test_node_holds_only_the_remaining_pods(kube):
    """What is left running is the client pod: one sandbox's address, nothing else."""
    pods = kube.get("pods", "-A")["items"]
    running = {p["metadata"]["uid"] for p in pods}
    time.sleep(2)
    stray = [c for c in kube.node.containers()
             if c["labels"].get("io.kubernetes.pod.uid") not in running]
    assert stray == [], stray
    assert len(kube.node.ipam_reservations()) == len(pods), (kube.node.ipam_reservations(), len(pods))


def test_stopping_the_node_leaves_the_host_clean(kube):
    kube.dump_logs()
    kube.stop()
    chains = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert not [l for l in chains.splitlines() if l.startswith((":KUBE-", ":CNI-"))], chains
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "ig-e2e0" not in links and "veth" not in links, links
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(kube.work) not in mounts, [l for l in mounts.splitlines() if str(kube.work) in l]
    assert not list(Path("/sys/fs/cgroup").glob("*/kubepods")), list(Path("/sys/fs/cgroup").glob("*/kubepods"))
    # The directories the kubelet and CNI make on the host whatever their settings: gone, unless
    # they were there before the node started.
    made = [d for d in node.HOST_DIRS if d not in kube.node.host_dirs_before]
    left = {str(d): node.tree_listing(d) for d in made if d.exists()}
    assert left == {}, left
    netns = Path("/var/run/netns")
    assert not (netns.is_dir() and list(netns.glob("cni-*")))
