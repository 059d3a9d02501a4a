"""A real Kubernetes node on this machine, for the end-to-end tests.

containerd 1.6 with runc (Debian packages), the kubelet and kube-proxy (built from Go modules
by tests/cluster/build.sh, like the control plane), the CNI plugins of Debian's
containernetworking-plugins (bridge, host-local, portmap, loopback) and a local pause image.
PID 1 here is not systemd and the cgroups are v1 ("hybrid"), so everything runs as plain
processes with the cgroupfs driver and state directories of its own under the work directory.

`stop()` tears down what the node leaves on the host, and `cleanup_host()` does it for a run
that died before it could: the pods' containers and network namespaces, the kubelet's mounts,
the `kubepods` cgroups, the bridge, the iptables chains of kube-proxy, the kubelet and CNI, and
the CNI plugins' state. The host's `net.ipv4.ip_forward` (the bridge plugin turns it on) is put
back as it was.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from controlplane import wait_for

NODE_NAME = "e2e-node"
BRIDGE = "ig-e2e0"
POD_CIDR = "10.244.0.0/24"
PAUSE_IMAGE = "localhost/infergate-e2e/pause:1"
CNI_BIN = "/usr/lib/cni"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where the kubelet keeps container log links and its device-plugin socket whatever its settings,
# and libcni its cache. Removed after a run when the run made them.
HOST_DIRS = [Path("/var/log/containers"), Path("/var/lib/cni"), Path("/var/lib/kubelet")]
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def run(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


class Node:
    def __init__(self, bin_dir: Path, work: Path, kubeconfig: Path, node_ip: str):
        self.bin = Path(bin_dir)
        self.work = Path(work)
        self.state = self.work / "node"
        self.kubeconfig = Path(kubeconfig)
        self.node_ip = node_ip
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.sock = self.state / "containerd" / "containerd.sock"
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.ip_forward_before = IP_FORWARD.read_text().strip()
        self.host_dirs_before = [d for d in HOST_DIRS if d.exists()]

    # ------------------------------------------------------------ processes
    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def check_alive(self):
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run("ctr", f"--address={self.sock}", "--namespace=k8s.io", *args, check=check)

    # ------------------------------------------------------------ start
    def start(self, archives: list[Path]):
        cleanup_host(keep=self.host_dirs_before)
        for d in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "podlogs"):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        self._containerd()
        for archive in archives:
            self.ctr("images", "import", str(archive))
        self._cni()
        self._kubelet()
        self._kube_proxy()
        return self

    def _containerd(self):
        c = self.state / "containerd"
        config = c / "config.toml"
        config.write_text(f"""\
version = 2
root = "{c / 'root'}"
state = "{c / 'state'}"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_unprivileged_ports = false
  # Without CAP_SYS_RESOURCE no process may lower its oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.state / 'cni/net.d'}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{c / 'opt'}"
""")
        self._start("containerd", ["containerd", f"--config={config}"])
        wait_for("containerd", lambda: self.check_alive() or
                 self.ctr("version", check=False).returncode == 0, timeout=60)

    def _cni(self):
        conflist = {
            "cniVersion": "0.4.0",
            "name": "e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state / "cni/ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }
        (self.state / "cni/net.d/10-e2e.conflist").write_text(json.dumps(conflist, indent=2))

    def _kubelet(self):
        k = self.state / "kubelet"
        config = self.state / "kubelet-config.yaml"
        config.write_text(f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{self.sock}
podLogsDir: {self.state / 'podlogs'}
volumePluginDir: {k / 'volume-plugins'}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
serializeImagePulls: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
""")
        self._start("kubelet", [
            str(self.bin / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={k}",
            f"--cert-dir={k / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={self.node_ip}",
            "--v=1",
        ])

        def ready():
            self.check_alive()
            node = json.loads(run(str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}",
                                  "get", "node", NODE_NAME, "-o", "json").stdout)
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in node.get("status", {}).get("conditions", []))

        wait_for(f"node {NODE_NAME} Ready", ready, timeout=180, interval=1)

    def _kube_proxy(self):
        # Flags that leave the host's conntrack sysctls alone, and no NodePorts on localhost.
        self._start("kube-proxy", [
            str(self.bin / "kube-proxy"),
            f"--kubeconfig={self.kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={POD_CIDR}",
            "--iptables-localhost-nodeports=false",
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--metrics-bind-address=127.0.0.1:10249",
            # Lowering its own OOM score needs CAP_SYS_RESOURCE, which this host withholds.
            "--oom-score-adj=0",
            "--healthz-bind-address=127.0.0.1:10256",
            "--v=1",
        ])
        wait_for("kube-proxy's rules", lambda: self.check_alive() or
                 "KUBE-SERVICES" in run("iptables", "-t", "nat", "-S", check=False).stdout,
                 timeout=60)

    # ------------------------------------------------------------ introspection
    def container_pid(self, pod: str, container: str, namespace: str) -> int:
        """The host pid of a running container's first process, through containerd's labels."""
        out = self.ctr("containers", "ls", "-q").stdout.split()
        for cid in out:
            info = json.loads(self.ctr("containers", "info", cid).stdout)
            labels = info.get("Labels", {})
            if (labels.get("io.kubernetes.pod.name") == pod
                    and labels.get("io.kubernetes.container.name") == container
                    and labels.get("io.kubernetes.pod.namespace") == namespace):
                task = self.ctr("tasks", "ls", check=False).stdout
                m = re.search(rf"^{cid}\s+(\d+)\s+RUNNING", task, re.M)
                if m:
                    return int(m.group(1))
        raise LookupError(f"no running container {container} of pod {namespace}/{pod}")

    def containers(self) -> list[dict]:
        """containerd's containers on the node (pods' sandboxes and containers), with labels."""
        found = []
        for cid in self.ctr("containers", "ls", "-q").stdout.split():
            info = json.loads(self.ctr("containers", "info", cid, check=False).stdout or "{}")
            found.append({"id": cid, "labels": info.get("Labels", {})})
        return found

    def ipam_reservations(self) -> list[str]:
        """Pod addresses the host-local IPAM plugin still holds."""
        d = self.state / "cni/ipam" / "e2e"
        if not d.is_dir():
            return []
        return [p.name for p in d.iterdir() if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", p.name)]

    # ------------------------------------------------------------ stop
    def stop(self):
        by_name = dict(self.procs)
        for name in ("kube-proxy", "kubelet"):
            _terminate(by_name.get(name))
        # Whatever pods are left: their containers, then their sandboxes (the CNI teardown
        # releases the addresses and the per-pod iptables chains).
        containerd = by_name.get("containerd")
        if containerd and containerd.poll() is None:
            self._remove_all_containers()
            _terminate(containerd)
        self.procs.clear()
        # kube-proxy's own chains, removed by kube-proxy itself.
        run(str(self.bin / "kube-proxy"), "--cleanup", check=False)
        cleanup_host(self.state, keep=self.host_dirs_before)
        if IP_FORWARD.read_text().strip() != self.ip_forward_before:
            IP_FORWARD.write_text(self.ip_forward_before)

    def _remove_all_containers(self):
        tasks = self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]
        for line in tasks:
            cid = line.split()[0]
            self.ctr("tasks", "kill", "--signal", "SIGKILL", cid, check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "RUNNING" not in self.ctr("tasks", "ls", check=False).stdout:
                break
            time.sleep(0.5)
        for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            self.ctr("tasks", "delete", "--force", line.split()[0], check=False)
        for cid in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", cid, check=False)


def _terminate(proc: subprocess.Popen | None):
    """SIGTERM to a process group, SIGKILL after 20 s."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------- host cleanup

def _mounts_under(prefix: str) -> list[str]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
            mounts.append(point)
    # Deepest first.
    return sorted(set(mounts), key=lambda p: p.count("/"), reverse=True)


def _iptables_chains(table: str) -> list[str]:
    out = run("iptables", "-t", table, "-S", check=False).stdout
    return re.findall(r"^-N (\S+)", out, re.M)


def _kill_cgroup_members():
    for _ in range(20):
        pids = set()
        for procs in CGROUP_ROOT.glob("*/kubepods/**/cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.25)


def cleanup_host(state: Path | None = None, keep: list[Path] = ()):
    """Removes what a node of these tests leaves on the host. Safe to call at any time. The
    directories in `keep` existed before the node started and are left in place."""
    # Network namespaces of pods (containerd's CRI names them cni-<uuid>).
    netns = Path("/var/run/netns")
    if netns.is_dir():
        for ns in netns.glob("cni-*"):
            run("umount", str(ns), check=False)
            ns.unlink(missing_ok=True)
    # Mounts under the state directory: the kubelet's bind mount of its root, pods' volumes
    # (tmpfs for memory-backed emptyDirs, projected tokens), containerd's overlay roots and shm.
    if state is not None:
        for point in _mounts_under(str(state)):
            run("umount", "-l", point, check=False)
    # Processes still in the pods' cgroups (a runtime that was killed leaves its containers).
    _kill_cgroup_members()
    # The pods' cgroups: rmdir bottom-up in every v1 hierarchy and the unified one.
    for hierarchy in CGROUP_ROOT.iterdir():
        root = hierarchy / "kubepods"
        if root.is_dir():
            for d in sorted((p for p in root.rglob("*") if p.is_dir()),
                            key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError:
                pass
    # The bridge and the veths on it.
    run("ip", "link", "delete", BRIDGE, check=False)
    # iptables: the kubelet's and kube-proxy's chains (kube-proxy --cleanup removes most of its
    # own, not the kubelet's), and the CNI plugins' per-pod chains.
    for table in ("filter", "nat", "mangle"):
        chains = [c for c in _iptables_chains(table) if c.startswith(("KUBE-", "CNI-"))]
        if not chains:
            continue
        rules = run("iptables", "-t", table, "-S", check=False).stdout.splitlines()
        for rule in rules:
            if rule.startswith("-A ") and any(f"-j {c}" in rule for c in chains):
                run("iptables", "-t", table, *shlex.split(rule.replace("-A ", "-D ", 1)), check=False)
        for chain in chains:
            run("iptables", "-t", table, "-F", chain, check=False)
        for chain in chains:
            run("iptables", "-t", table, "-X", chain, check=False)
    for d in HOST_DIRS:
        if d not in keep:
            _remove_tree(d)
    if state is not None:
        _remove_tree(state)


def _remove_tree(d: Path):
    """Removes a directory the node made, mounts under it first. A process that has not quite
    gone may still write there, so it tries a few times, then says what is left (a test then
    shows it) rather than failing the cleanup. While something is still mounted under it, it is
    not removed at all: rmtree would go down into the mounted file system and empty it."""
    for point in _mounts_under(str(d)):
        run("umount", "-l", point, check=False)
    if _mounts_under(str(d)):
        print(f"cleanup: {d} not removed, still mounted: {_mounts_under(str(d))}", file=sys.stderr)
        return
    for _ in range(10):
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            return
        time.sleep(0.5)
    print(f"cleanup: {d} could not be removed: {tree_listing(d)}", file=sys.stderr)


def tree_listing(d: Path, limit: int = 40) -> list[str]:
    """Up to `limit` paths under a directory, mount points marked, for a failure's message. The
    tree may be changing as it is walked (that is when it is asked for): whatever goes away
    meanwhile is skipped."""
    mounts = set(_mounts_under(str(d)))
    found = []
    for root, dirs, files in os.walk(d, onerror=lambda e: None):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(root, name)
            found.append(f"{path} (mount)" if path in mounts else path)
            if len(found) >= limit:
                return found
    return found
