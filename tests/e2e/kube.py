"""kubectl and helm against the end-to-end cluster, and what the tests read from it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from controlplane import ControlPlane, wait_for
from node import Node


def host_ip() -> str:
    """The host's address on its default route: the node's InternalIP and the API server's
    advertised address (pods reach the server there through the `kubernetes` Service)."""
    out = subprocess.run(["ip", "-j", "route", "get", "192.0.2.255"], capture_output=True,
                         text=True, check=True).stdout
    route = json.loads(out)[0]
    return route["prefsrc"]


def images_from(list_file: Path) -> dict[str, tuple[Path, str]]:
    """image -> (archive, image ID), from the list tests/e2e/images.sh prints."""
    images = {}
    for line in list_file.read_text().splitlines():
        if line.strip():
            name, archive, image_id = line.split()
            images[name] = (Path(archive), image_id)
    return images


def start(bin_dir: Path, helm: Path, images: dict[str, tuple[Path, str]], work: Path) -> "Kube":
    """The control plane and the node, with the images imported; stopped by `Kube.stop`."""
    ip = host_ip()
    plane = ControlPlane(bin_dir, work / "cluster", node_ip=ip)
    node = Node(bin_dir, work, plane.kubeconfig, ip)
    try:
        plane.start()
        node.start([archive for archive, _ in images.values()])
    except BaseException:
        node.stop()
        plane.stop()
        raise
    return Kube(plane, node, helm, work)


class Kube:
    def __init__(self, plane: ControlPlane, node: Node, helm_bin: Path, work: Path):
        self.plane = plane
        self.node = node
        self.helm_bin = helm_bin
        self.work = work
        self.kubeconfig = plane.kubeconfig

    # ------------------------------------------------------------ commands
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 180) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.plane.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                               f"{result.stderr}{result.stdout}")
        return result

    def kubectl_argv(self, *args: str) -> list[str]:
        return [str(self.plane.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.helm_bin), f"--kubeconfig={self.kubeconfig}", *args],
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed:\n{result.stderr}{result.stdout}")
        return result

    def get(self, *args: str):
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply(self, manifest: str, *args: str) -> str:
        return self.kubectl("apply", "-f", "-", *args, input=manifest).stdout

    # ------------------------------------------------------------ pods
    def pods(self, namespace: str, selector: str) -> list[dict]:
        return self.get("pods", "-n", namespace, "-l", selector)["items"]

    def running_pods(self, namespace: str, selector: str) -> list[dict]:
        return [p for p in self.pods(namespace, selector)
                if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    def exec(self, namespace: str, pod: str, container: str, argv: list[str],
             stdin: str | None = None, check: bool = True, timeout: float = 300
             ) -> subprocess.CompletedProcess:
        args = ["exec", "-n", namespace, pod, "-c", container]
        if stdin is not None:
            args.append("-i")
        return self.kubectl(*args, "--", *argv, input=stdin, check=check, timeout=timeout)

    def python(self, namespace: str, pod: str, container: str, script: Path, *args: str,
               check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        """Runs a script of tests/e2e/clients in a container, passed on standard input."""
        return self.exec(namespace, pod, container, ["python3", "-", *args],
                         stdin=script.read_text(), check=check, timeout=timeout)

    def wait_condition(self, kind_name: str, condition: str, namespace: str, timeout: str = "300s"):
        self.kubectl("wait", f"--for=condition={condition}", kind_name, "-n", namespace,
                     f"--timeout={timeout}", timeout=_seconds(timeout) + 30)

    def condition(self, obj: dict, kind: str) -> dict:
        for c in obj.get("status", {}).get("conditions", []) or []:
            if c["type"] == kind:
                return c
        return {}

    def wait_until(self, what: str, check, timeout: float = 180, interval: float = 1.0):
        return wait_for(what, check, timeout=timeout, interval=interval)

    def stop(self):
        """Stops the node (leaving the host clean) and the control plane; idempotent."""
        self.node.stop()
        self.plane.stop()

    # ------------------------------------------------------------ diagnostics
    def dump_logs(self):
        """Writes every pod's logs and the namespace events into the work directory."""
        out = self.work / "logs" / "pods"
        out.mkdir(parents=True, exist_ok=True)
        try:
            pods = self.get("pods", "-A")["items"]
        except Exception:  # noqa: BLE001 - best effort at teardown
            return
        for p in pods:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            spec = p["spec"]
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                r = self.kubectl("logs", "-n", ns, name, "-c", c["name"], check=False, timeout=30)
                (out / f"{ns}_{name}_{c['name']}.log").write_text(r.stdout + r.stderr)
        r = self.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False)
        (out / "events.txt").write_text(r.stdout + r.stderr)


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


def sleep_until(deadline: float):
    now = time.monotonic()
    if deadline > now:
        time.sleep(deadline - now)
