"""Fixtures for the cluster tests: one control plane, the chart installed with real Helm, a real
sidecar process on loopback standing in for every pod's admin endpoint, and the real operator
running as a local process with the chart's ServiceAccount token (so the chart's RBAC is what it
gets).

Environment (set by tests/cluster/run):
  INFERGATE_CLUSTER_BIN   directory with kube-apiserver, etcd, kubectl, ... (tests/cluster/build.sh)
  INFERGATE_HELM          helm binary
  INFERGATE_OPERATOR_BIN  infergate-operator binary
  INFERGATE_SIDECAR_BIN   infergate-sidecar binary
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from controlplane import ControlPlane, free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
RELEASE = "infergate"
RELEASE_NAMESPACE = "infergate-system"
SIDECAR_IMAGE = "registry.example/infergate-sidecar:test"


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set; run the cluster tests with tests/cluster/run", returncode=2)
    return Path(value)


@pytest.fixture(scope="session")
def workdir():
    path = Path(tempfile.mkdtemp(prefix="infergate-cluster-"))
    yield path
    if os.environ.get("INFERGATE_KEEP_CLUSTER_LOGS"):
        print(f"\ncluster logs kept in {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(workdir) -> ControlPlane:
    plane = ControlPlane(_env_path("INFERGATE_CLUSTER_BIN"), workdir / "cluster")
    try:
        plane.start()
    except BaseException:
        plane.stop()
        raise
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def helm(cluster):
    binary = _env_path("INFERGATE_HELM")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([str(binary), f"--kubeconfig={cluster.kubeconfig}", *args],
                                capture_output=True, text=True, timeout=300)
        if check and result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed:\n{result.stderr}{result.stdout}")
        return result

    return run


@pytest.fixture(scope="session")
def chart(cluster, helm):
    """`helm install` of charts/infergate; uninstalled by test_9_uninstall (or at the end)."""
    helm("install", RELEASE, str(REPO / "charts/infergate"), "--namespace", RELEASE_NAMESPACE,
         "--create-namespace", "--set", f"sidecarImage.repository={SIDECAR_IMAGE.split(':')[0]}",
         "--set", "sidecarImage.tag=test")
    yield RELEASE
    if helm("status", RELEASE, "-n", RELEASE_NAMESPACE, check=False).returncode == 0:
        helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)


class Process:
    def __init__(self, name: str, args: list[str], log: Path, env: dict | None = None):
        self.name, self.log = name, log
        self.proc = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self):
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="session")
def sidecar(workdir):
    """A real sidecar with its built-in models; the operator probes it in place of every pod."""
    admin = free_port()
    proc = Process("sidecar", [
        str(_env_path("INFERGATE_SIDECAR_BIN")), "--host", "127.0.0.1",
        "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
        "--admin-port", str(admin), "--allow-client-shm",
    ], workdir / "sidecar.log")
    url = f"http://127.0.0.1:{admin}/status"
    wait_for("the sidecar's admin endpoint", lambda: urllib.request.urlopen(url, timeout=2).status == 200,
             timeout=30)
    yield {"admin": f"127.0.0.1:{admin}", "process": proc}
    proc.stop()


@pytest.fixture(scope="session")
def operator_token_kubeconfig(cluster, chart, workdir) -> Path:
    token = cluster.kubectl("create", "token", RELEASE, "-n", RELEASE_NAMESPACE,
                            "--duration=2h").stdout.strip()
    return cluster.token_kubeconfig(workdir / "operator.kubeconfig", token)


def start_operator(name: str, kubeconfig: Path, sidecar_admin: str, log: Path,
                   extra: list[str], env: dict | None = None) -> Process:
    """`infergate-operator run` with the identity of `kubeconfig`, its prober pointed at the
    sidecar on loopback; returned once ready, with `metrics`, its /metrics URL."""
    metrics = free_port()
    proc = Process(name, [
        str(_env_path("INFERGATE_OPERATOR_BIN")), "run",
        f"--sidecar-image={SIDECAR_IMAGE}",
        "--kubernetes-version=1.34",
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        "--probe-timeout-ms=1000",
        "--requeue-seconds=2",
        f"--probe-address-map=*:8003={sidecar_admin}",
        "--log-format=text", "--log-level=debug",
        *extra,
    ], log, env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAME": name, **(env or {})})

    def ready():
        assert proc.alive(), proc.output()[-4000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=2) as r:
            return r.status == 200

    wait_for(f"{name} to become ready", ready, timeout=60)
    proc.metrics = f"http://127.0.0.1:{metrics}/metrics"
    return proc


@pytest.fixture(scope="session")
def operator(cluster, chart, sidecar, operator_token_kubeconfig, workdir):
    """The real `infergate-operator run`, as the chart's ServiceAccount."""
    proc = start_operator("local-operator", operator_token_kubeconfig, sidecar["admin"],
                          workdir / "operator.log",
                          ["--leader-elect", f"--lease-name={RELEASE}-leader"],
                          env={"POD_NAMESPACE": RELEASE_NAMESPACE})
    yield proc
    proc.stop()
    log = proc.output()
    # The operator must never have been refused by RBAC: its permissions are the chart's. (Other
    # 403s, such as writes into a namespace being deleted, are the server's normal answers.)
    forbidden = [line for line in log.splitlines()
                 if re.search(r'is forbidden: User "[^"]+" cannot', line)]
    assert not forbidden, "the operator was refused by the API server:\n" + "\n".join(forbidden[:10])


@pytest.fixture
def namespace(cluster, request):
    """A fresh namespace per test, deleted afterwards."""
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
