"""A real Kubernetes control plane on loopback, for tests.

etcd, kube-apiserver, kube-controller-manager (garbage collection, Deployment ->
ReplicaSet -> Pod), kube-scheduler and kwok (fake nodes whose pods become Running
and Ready without containers), started from the binaries tests/cluster/build.sh
builds. Certificates are generated per run with openssl; the admin identity is a
client certificate in group system:masters. Everything lives in one work
directory and is stopped by `stop()`.

With `node_ip` (the end-to-end tests, whose real node runs pods), the API server
also listens on that address and advertises it, so pods reach it through the
`kubernetes` Service, and kwok is left out.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

FAKE_NODE = "kwok-node-0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check, timeout: float = 60.0, interval: float = 0.25):
    """Calls `check` until it returns a truthy value; raises after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported below if it never succeeds
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})")


class ControlPlane:
    def __init__(self, bin_dir: Path, work: Path, node_ip: str | None = None):
        self.bin = Path(bin_dir)
        self.node_ip = node_ip
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.pki = self.work / "pki"
        self.logs = self.work / "logs"
        self.logs.mkdir(exist_ok=True)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = self.work / "admin.kubeconfig"

    # ------------------------------------------------------------ processes
    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [str(self.bin / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append((name, proc))
        return proc

    def _check_alive(self):
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def start(self):
        self._certificates()
        self._etcd()
        self._apiserver()
        self._write_kubeconfig(self.kubeconfig, user={
            "client-certificate": str(self.pki / "admin.crt"),
            "client-key": str(self.pki / "admin.key"),
        })
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--v=1"]
        # The node lifecycle controller judges a kubelet by its heartbeats, by default 50 s apart
        # at most, while kwok's come every 20-45 s, later on a loaded machine. A late one made it
        # call the fake node not ready and mark every pod on it not ready; kwok then reported the
        # node ready again but never the pods, and Deployments lost their available replicas for
        # good (seen in CI, and in the controller's log: "all Nodes are not-Ready. Entering master
        # disruption mode"). The controller stays (it lifts the node's not-ready taint), with a
        # grace period no test run reaches.
        self._start("kube-controller-manager", [
            *common,
            "--controllers=*",
            "--node-monitor-grace-period=30m",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--concurrent-gc-syncs=5",
            # Its default is a host directory (/usr/libexec/kubernetes/...), made at start.
            f"--flex-volume-plugin-dir={self.work / 'flexvolume'}",
        ])
        self._start("kube-scheduler", [
            *common,
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ])
        if self.node_ip:
            return self
        self._start("kwok", [
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.244.0.1",
            f"--server-address=127.0.0.1:{free_port()}",
        ])
        self._fake_node()
        return self

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    # ------------------------------------------------------------ pieces
    def _openssl(self, *args: str):
        subprocess.run(["openssl", *args], check=True, cwd=self.pki, capture_output=True)

    def _certificates(self):
        self.pki.mkdir(exist_ok=True)
        o = self._openssl
        o("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
          "-days", "2", "-subj", "/CN=infergate-test-ca")
        (self.pki / "server.ext").write_text(
            f"subjectAltName=IP:127.0.0.1,IP:10.96.0.1,{f'IP:{self.node_ip},' if self.node_ip else ''}"
            "DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n")
        (self.pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        for name, subj, ext in [
            ("server", "/CN=kube-apiserver", "server.ext"),
            ("admin", "/O=system:masters/CN=infergate-test-admin", "client.ext"),
        ]:
            o("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
              "-subj", subj)
            o("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
              "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext)
        o("genrsa", "-out", "sa.key", "2048")
        o("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def _etcd(self):
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._start("etcd", [
            "--name=default",
            f"--data-dir={self.work / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            f"--listen-metrics-urls=http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ])

        def healthy():
            self._check_alive()
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                return json.load(r).get("health") == "true"

        wait_for("etcd", healthy, timeout=60)

    def _apiserver(self):
        p = self.pki
        if self.node_ip:
            # Pods reach the server through the `kubernetes` Service, whose endpoint is the
            # advertised address; the server keeps that endpoint itself. Logs and exec go to the
            # kubelet at the node's InternalIP.
            network = [
                "--bind-address=0.0.0.0",
                f"--advertise-address={self.node_ip}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ]
        else:
            network = [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ]
        self._start("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}",
            *network,
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={p / 'server.crt'}",
            f"--tls-private-key-file={p / 'server.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            f"--cert-dir={self.work / 'apiserver-certs'}",
            "--v=1",
        ])
        ctx = ssl.create_default_context(cafile=str(p / "ca.crt"))
        ctx.load_cert_chain(str(p / "admin.crt"), str(p / "admin.key"))

        def ready():
            self._check_alive()
            with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=ctx) as r:
                return r.status == 200

        wait_for("kube-apiserver /readyz", ready, timeout=120, interval=0.5)

    def _write_kubeconfig(self, path: Path, user: dict, namespace: str = "default"):
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server,
                "certificate-authority": str(self.pki / "ca.crt"),
            }}],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "test", "context": {
                "cluster": "test", "user": "user", "namespace": namespace,
            }}],
            "current-context": "test",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig that authenticates with a bearer token (a ServiceAccount's)."""
        return self._write_kubeconfig(path, user={"token": token})

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=120,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                               f"{result.stderr}{result.stdout}")
        return result

    def get_json(self, *args: str):
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def _fake_node(self):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": FAKE_NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": FAKE_NODE, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"},
            },
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            },
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(node))

        def node_ready():
            self._check_alive()
            n = self.get_json("node", FAKE_NODE)
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in n.get("status", {}).get("conditions", []))

        wait_for("the kwok node to be Ready", node_ready, timeout=60)
