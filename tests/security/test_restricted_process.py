"""The sidecar as its pod runs it: a non-root user, no capabilities, a read-only root filesystem.

The images are never built here (no container engine), so this checks the process itself under
the restrictions the operator renders for the sidecar container (`runAsUser: 65532`,
`readOnlyRootFilesystem`, every capability dropped, no privilege escalation): a private mount
namespace with `/` remounted read-only (only `/dev/shm`, the pod's shared memory, stays writable)
and `setpriv` to uid/gid 65532 with empty capability sets and `no_new_privs`.

Two sidecars run that way, each checked end to end and then stopped with SIGTERM:
- the built-in models (the main job), with client shared memory;
- one fronting a model server (a real Triton 2.51, unrestricted, standing in for the model
  container, installed by tests/upstream/triton-env.sh when missing) with the staging pool: the
  restricted process creates the pool in `/dev/shm`, the model server opens it, and a 4 MiB
  tensor travels through it. (Another sidecar cannot stand in: it refuses keys with the reserved
  `infergate_` prefix, the pool's among them.)

Needs root (to create the namespace and drop to the user); skipped otherwise, with the reason.
Environment: INFERGATE_SIDECAR_BIN (default target/debug/infergate-sidecar).
"""

import os
import re
import shutil
import signal
import sys
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/tools"))
from ports import free_ports  # noqa: E402
BINARY = Path(os.environ.get("INFERGATE_SIDECAR_BIN", REPO / "target/debug/infergate-sidecar"))
UID = 65532  # the sidecar image's user and the operator's default `sidecar.runAsUser`

# Remount the root read-only in this (private) mount namespace, then become the pod's user with
# no capabilities at all; `exec` all the way, so the sidecar keeps the pid we signal.
RESTRICT = (
    "set -e; mount --make-rprivate /; mount -o remount,bind,ro /; "
    f"exec setpriv --reuid {UID} --regid {UID} --clear-groups "
    '--inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"'
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="needs root with unshare and setpriv (util-linux) to run the sidecar as uid 65532 "
    "on a read-only root filesystem",
)


class Sidecar:
    def __init__(self, args, restricted, log):
        self.http, self.grpc, self.metrics, self.admin = free_ports(4)
        ports = [
            f"--http-port={self.http}",
            f"--grpc-port={self.grpc}",
            f"--metrics-port={self.metrics}",
            f"--admin-port={self.admin}",
            "--host=127.0.0.1",
        ]
        command = [str(BINARY), *ports, *args]
        if restricted:
            command = ["unshare", "--mount", "--", "sh", "-c", RESTRICT, "restrict", *command]
        self.log = log
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.log_text()}"
            try:
                if requests.get(self.url("/v2/health/ready"), timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready in 60 s:\n{self.log_text()}")

    def url(self, path):
        return f"http://127.0.0.1:{self.http}{path}"

    def log_text(self):
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def metric(self, name, labels=""):
        text = requests.get(f"http://127.0.0.1:{self.metrics}/metrics", timeout=10).text
        found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\d+)$", text, re.MULTILINE)
        assert found, f"{name}{labels} not in the metrics"
        return int(found.group(1))

    def stop(self):
        """SIGTERM; the sidecar must drain and exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"no exit 30 s after SIGTERM:\n{self.log_text()}")


@pytest.fixture
def spawn(tmp_path):
    started = []

    def start(args, restricted=True):
        log = open(tmp_path / f"sidecar-{len(started)}.log", "wb")
        side = Sidecar(args, restricted, log)
        started.append(side)
        return side

    yield start
    for side in reversed(started):
        if side.proc.poll() is None:
            side.proc.kill()
            side.proc.wait()
        side.log.close()


@pytest.fixture
def config_file():
    """Writes a configuration readable by the pod's user, as the operator's ConfigMap mount is
    (pytest's own temporary directories are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="infergate-restricted-"))
    folder.chmod(0o755)

    def write(text):
        path = folder / "sidecar.yaml"
        path.write_text(text)
        path.chmod(0o644)
        return path

    yield write
    shutil.rmtree(folder, ignore_errors=True)


def assert_restricted(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["Uid"].split() == [str(UID)] * 4, fields["Uid"]
    assert fields["Gid"].split() == [str(UID)] * 4, fields["Gid"]
    assert fields["Groups"].strip() == ""
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[caps], 16) == 0, (caps, fields[caps])
    assert fields["NoNewPrivs"].strip() == "1"
    mounts = [line.split() for line in Path(f"/proc/{pid}/mounts").read_text().splitlines()]
    root = [m for m in mounts if m[1] == "/"]
    assert root and "ro" in root[-1][3].split(","), root


def assert_simple_over_http_and_grpc(side):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{side.http}")
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = http.infer("simple", inputs)
    assert (result.as_numpy("OUTPUT0") == a + b).all()
    assert (result.as_numpy("OUTPUT1") == a - b).all()
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{side.grpc}")
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = grpc.infer("simple", inputs)
    assert (result.as_numpy("OUTPUT0") == a + b).all()
    grpc.close()


def shm_objects_of(uid):
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.stat().st_uid == uid)


def test_builtin_models_as_non_root_on_a_read_only_root(spawn, config_file):
    before = shm_objects_of(UID)
    cfg = config_file("backend:\n  kind: builtin\nserver:\n  allow_client_shm: true\n")
    side = spawn(["--config", str(cfg)])
    assert_restricted(side.proc.pid)
    assert_simple_over_http_and_grpc(side)

    # Client shared memory: the client is in the same pod, as the same user.
    n = 1 << 16
    key = f"/restricted_client_{os.getpid()}"
    region = shm.create_shared_memory_region("restricted", key, 2 * 4 * n)
    try:
        os.chown(f"/dev/shm{key}", UID, UID)
        data = np.random.default_rng(7).standard_normal(n).astype(np.float32)
        shm.set_shared_memory_region(region, [data])
        client = httpclient.InferenceServerClient(f"127.0.0.1:{side.http}")
        client.register_system_shared_memory("restricted", key, 2 * 4 * n)
        tensor = httpclient.InferInput("INPUT0", [n], "FP32")
        tensor.set_shared_memory("restricted", 4 * n)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        out.set_shared_memory("restricted", 4 * n, offset=4 * n)
        client.infer("identity_fp32", [tensor], outputs=[out])
        echoed = shm.get_contents_as_numpy(region, np.float32, [n], offset=4 * n)
        assert (echoed == data).all()
        client.unregister_system_shared_memory("restricted")
    finally:
        shm.destroy_shared_memory_region(region)

    assert side.stop() == 0, side.log_text()
    assert shm_objects_of(UID) == before


def triton_install():
    """(tritonserver, its home, its venv, the library path it needs), from
    tests/upstream/triton-env.sh, which installs it when missing."""
    script = (
        f'REPO_ROOT="{REPO}"; cd "$REPO_ROOT"; log() {{ echo "$*" >&2; }}; '
        "source tests/upstream/triton-env.sh; "
        'printf "%s\n" "$TRITON_BIN" "$TRITON_HOME" "$TRITON_VENV" "$LD_PATH"'
    )
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()[:4]


class Triton:
    """Triton serving `simple` and `identity_fp32` from the project's python-backend repository."""

    def __init__(self, work):
        binary, home, venv, libs = triton_install()
        repo = work / "models"
        subprocess.run([sys.executable, str(REPO / "tests/upstream/make_triton_repo.py"), str(repo)],
                       check=True, capture_output=True)
        self.http, self.grpc = free_ports(2)
        self.log = open(work / "triton.log", "wb")
        env = {**os.environ, "PATH": f"{venv}/bin:{os.environ['PATH']}", "LD_LIBRARY_PATH": libs}
        self.proc = subprocess.Popen([
            binary, f"--model-repository={repo}", f"--backend-directory={home}/backends",
            f"--cache-directory={home}/caches", "--http-address=127.0.0.1",
            f"--http-port={self.http}", "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc}",
            "--allow-metrics=false", "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0", "--model-control-mode=explicit",
            "--load-model=simple", "--load-model=identity_fp32", "--exit-timeout-secs=5",
        ], stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=work)
        deadline = time.time() + 180
        while time.time() < deadline:
            assert self.proc.poll() is None, f"tritonserver exited {self.proc.returncode}"
            try:
                ready = requests.get(f"http://127.0.0.1:{self.http}/v2/health/ready", timeout=2)
                if ready.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError("tritonserver was not ready in 180 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.log.close()


@pytest.fixture
def triton(tmp_path):
    server = Triton(tmp_path)
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


def test_staging_pool_created_by_a_non_root_sidecar_is_opened_by_the_model_server(
    spawn, config_file, triton
):
    before = shm_objects_of(UID)
    cfg = config_file(
        "backend:\n"
        "  kind: upstream\n"
        f"  url: grpc://127.0.0.1:{triton.grpc}\n"
        "  staging_shm_bytes: 16777216\n",
    )
    side = spawn(["--config", str(cfg)])
    assert_restricted(side.proc.pid)
    status = requests.get(f"http://127.0.0.1:{side.admin}/status", timeout=10).json()
    assert status["shm"]["staging_pool"]["state"] == "Active", status["shm"]
    assert status["shm"]["shared_with_upstream"] is True, status["shm"]
    # The pool's name is never told; Triton, which registered it, lists it.
    regions = requests.get(f"http://127.0.0.1:{triton.http}/v2/systemsharedmemory/status",
                           timeout=10).json()
    pools = [r["key"] for r in regions if r["name"].startswith("infergate_staging_")]
    assert len(pools) == 1, regions
    assert Path(f"/dev/shm/{pools[0].lstrip('/')}").stat().st_uid == UID

    assert_simple_over_http_and_grpc(side)
    n = 1 << 20
    data = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    staged_before = side.metric("infergate_staging_bytes_total", '{direction="input"}')
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{side.grpc}")
    tensor = grpcclient.InferInput("INPUT0", [n], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("identity_fp32", [tensor])
    assert (result.as_numpy("OUTPUT0") == data).all()
    client.close()
    staged = side.metric("infergate_staging_bytes_total", '{direction="input"}')
    assert staged == staged_before + 4 * n

    assert side.stop() == 0, side.log_text()
    triton.stop()
    assert shm_objects_of(UID) == before, "the staging pool must be unlinked at exit"
