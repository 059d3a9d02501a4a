"""What a caller outside the pod may not do, tried from outside: a network namespace of this
test's own, joined to the host by a veth pair, stands in for another pod. The sidecar runs with
its defaults (client shared memory allowed, as the operator renders it where the resource asks for
it); the caller in the namespace has no credential.

Refused to it, with Triton's restricted-API answer (HTTP 403, gRPC UNAVAILABLE), before any region
is looked at: registering, listing and unregistering system and CUDA shared memory, and an
inference naming a region. Allowed: inference without shared memory (the port is reachable). A
client on loopback, in the pod, keeps its region through all of it, and with
`--allow-remote-shm` the remote caller is served as before.

Needs root (to make the namespace and the veth pair); skipped otherwise.
Environment: INFERGATE_SIDECAR_BIN (default target/debug/infergate-sidecar).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests
import tritonclient.utils.shared_memory as shm

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/tools"))
from ports import free_ports  # noqa: E402

BINARY = Path(os.environ.get("INFERGATE_SIDECAR_BIN", REPO / "target/debug/infergate-sidecar"))
PYTHON = sys.executable
# Addresses of the test's own namespace pair (RFC 2544's benchmarking range: no real host has
# them); nothing outside this machine is reached.
HOST_SIDE, CALLER_SIDE = "198.18.91.1", "198.18.91.2"
REFUSAL = ("This API is restricted to clients in the server's pod: shared memory is served only "
           "to callers on loopback (server.allow_remote_shm serves it to other hosts)")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"),
    reason="needs root and iproute2 to make a network namespace for the remote caller",
)


@pytest.fixture(scope="module")
def namespace():
    tag = f"{os.getpid() % 100000}"
    ns, host_if, ns_if = f"ig-remote-{tag}", f"igrh{tag}", f"igrn{tag}"
    run = lambda *args: subprocess.run(["ip", *args], check=True, capture_output=True)  # noqa: E731
    run("netns", "add", ns)
    try:
        run("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        run("link", "set", ns_if, "netns", ns)
        run("addr", "add", f"{HOST_SIDE}/30", "dev", host_if)
        run("link", "set", host_if, "up")
        run("-n", ns, "addr", "add", f"{CALLER_SIDE}/30", "dev", ns_if)
        run("-n", ns, "link", "set", ns_if, "up")
        run("-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Sidecar:
    def __init__(self, tmp_path, args):
        self.http, self.grpc, self.metrics, self.admin = free_ports(4)
        self.log = open(tmp_path / f"sidecar-{self.http}.log", "wb")
        self.proc = subprocess.Popen([
            str(BINARY), f"--http-port={self.http}", f"--grpc-port={self.grpc}",
            f"--metrics-port={self.metrics}", f"--admin-port={self.admin}", "--host=0.0.0.0",
            "--allow-client-shm", *args,
        ], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}"
            try:
                if requests.get(f"http://127.0.0.1:{self.http}/v2/health/ready",
                                timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError("the sidecar was not ready in 60 s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


# Run in the namespace: every call a caller outside the pod might make, with what it got.
# What both scripts run in the namespace start with: the arguments, and a REST call recorded as
# [status, error].
CALLS_PRELUDE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import requests
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    host, http_port, grpc_port = sys.argv[1], sys.argv[2], sys.argv[3]
    http = f"http://{host}:{http_port}"
    got = {}

    def rest(name, method, path, body=None):
        r = requests.request(method, http + path, json=body, timeout=10)
        try:
            error = r.json().get("error") if isinstance(r.json(), dict) else None
        except ValueError:
            error = None
        got[name] = [r.status_code, error]
""")

REMOTE_CALLS = CALLS_PRELUDE + textwrap.dedent("""

    def simple(region=None):
        inputs = [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                  for n in ("INPUT0", "INPUT1")]
        if region:
            inputs[0] = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                         "parameters": {"shared_memory_region": region,
                                        "shared_memory_byte_size": 64}}
        return {"inputs": inputs}

    rest("register", "POST", "/v2/systemsharedmemory/region/mine/register",
         {"key": "/anything", "offset": 0, "byte_size": 64})
    rest("status", "GET", "/v2/systemsharedmemory/status")
    rest("status_one", "GET", "/v2/systemsharedmemory/region/local/status")
    rest("unregister_all", "POST", "/v2/systemsharedmemory/unregister")
    rest("unregister_one", "POST", "/v2/systemsharedmemory/region/local/unregister")
    rest("cuda_register", "POST", "/v2/cudasharedmemory/region/mine/register",
         {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64})
    rest("cuda_status", "GET", "/v2/cudasharedmemory/status")
    rest("cuda_unregister_all", "POST", "/v2/cudasharedmemory/unregister")
    rest("infer_naming_a_region", "POST", "/v2/models/simple/infer", simple("local"))
    rest("infer", "POST", "/v2/models/simple/infer", simple())

    client = grpcclient.InferenceServerClient(f"{host}:{grpc_port}")
    def grpc(name, call):
        try:
            call()
            got[name] = ["OK", None]
        except InferenceServerException as e:
            got[name] = [e.status(), e.message()]
    grpc("grpc_register", lambda: client.register_system_shared_memory("mine", "/anything", 64))
    grpc("grpc_status", lambda: client.get_system_shared_memory_status())
    grpc("grpc_unregister_all", lambda: client.unregister_system_shared_memory())
    grpc("grpc_cuda_status", lambda: client.get_cuda_shared_memory_status())
    def infer(region):
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        if region:
            inputs[0].set_shared_memory(region, 64)
        client.infer("simple", inputs)
    grpc("grpc_infer_naming_a_region", lambda: infer("local"))
    grpc("grpc_infer", lambda: infer(None))
    print(json.dumps(got))
""")


def remote_calls(namespace, sidecar):
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, PYTHON, "-c", REMOTE_CALLS, HOST_SIDE,
         str(sidecar.http), str(sidecar.grpc)],
        check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def local_region():
    """A region of a client in the pod: registered over loopback."""
    key = f"/remote_test_local_{os.getpid()}"
    return key, shm.create_shared_memory_region("local", key, 64)


def register_locally(sidecar, key):
    """Registers the region as `local` over loopback; the sidecar's local REST address."""
    local = f"http://127.0.0.1:{sidecar.http}"
    r = requests.post(f"{local}/v2/systemsharedmemory/region/local/register",
                      json={"key": key, "offset": 0, "byte_size": 64}, timeout=10)
    assert r.status_code == 200, r.text
    return local


def test_shared_memory_is_refused_to_a_caller_outside_the_pod(tmp_path, namespace):
    sidecar = Sidecar(tmp_path, [])
    key, handle = local_region()
    try:
        local = register_locally(sidecar, key)

        got = remote_calls(namespace, sidecar)

        for name in ("register", "status", "status_one", "unregister_all", "unregister_one",
                     "cuda_register", "cuda_status", "cuda_unregister_all",
                     "infer_naming_a_region"):
            assert got[name] == [403, REFUSAL], (name, got[name])
        for name in ("grpc_register", "grpc_status", "grpc_unregister_all", "grpc_cuda_status",
                     "grpc_infer_naming_a_region"):
            assert got[name] == ["StatusCode.UNAVAILABLE", REFUSAL], (name, got[name])
        # The port itself is open to it: inference without shared memory is served.
        assert got["infer"][0] == 200, got["infer"]
        assert got["grpc_infer"] == ["OK", None], got["grpc_infer"]
        # The pod's own client still has its region, untouched by the tries to unregister it.
        status = requests.get(f"{local}/v2/systemsharedmemory/status", timeout=10).json()
        assert [s["name"] for s in status] == ["local"], status
    finally:
        sidecar.stop()
        shm.destroy_shared_memory_region(handle)


def test_allow_remote_shm_serves_other_hosts(tmp_path, namespace):
    sidecar = Sidecar(tmp_path, ["--allow-remote-shm"])
    key, handle = local_region()
    try:
        local = register_locally(sidecar, key)
        got = remote_calls(namespace, sidecar)
        assert got["status"] == [200, None], got["status"]
        assert got["status_one"][0] == 200, got["status_one"]
        # Served as any client, unregistering everyone's regions included.
        assert got["unregister_all"] == [200, None], got["unregister_all"]
        status = requests.get(f"{local}/v2/systemsharedmemory/status", timeout=10).json()
        assert status == [], status
        log = (tmp_path / f"sidecar-{sidecar.http}.log").read_text()
        assert "allow_remote_shm" in log, log[-2000:]
    finally:
        sidecar.stop()
        shm.destroy_shared_memory_region(handle)


# ---------------------------------------------------------------- the admin port

ADMIN_CALLS = textwrap.dedent("""
    import json, sys
    import requests
    admin = f"http://{sys.argv[1]}:{sys.argv[2]}"
    got = {}
    def get(name, path, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        r = requests.get(admin + path, headers=headers, timeout=10)
        got[name] = [r.status_code, r.text, r.headers.get("www-authenticate")]
    get("livez", "/livez")
    get("readyz", "/readyz")
    get("upstream_livez", "/upstream/livez")
    get("drain", "/drain?seconds=0")
    get("status", "/status")
    get("status_wrong", "/status", "a-wrong-token-of-some-length-000000")
    if len(sys.argv) > 3:
        get("status_token", "/status", sys.argv[3])
    print(json.dumps(got))
""")


def admin_calls(namespace, sidecar, token=None):
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, PYTHON, "-c", ADMIN_CALLS, HOST_SIDE,
         str(sidecar.admin), *([token] if token else [])],
        check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def config_file(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return f"--config={path}"


def test_the_admin_port_refuses_to_drain_or_tell_a_caller_outside_the_pod(tmp_path, namespace):
    """The binary's defaults: probes' paths open, the drain and the status loopback only."""
    sidecar = Sidecar(tmp_path, [])
    try:
        got = admin_calls(namespace, sidecar)
        assert got["livez"][:2] == [200, "ok\n"], got
        assert got["readyz"][:2] == [200, "ok\n"], got
        # Built-in models: there is no model server to probe.
        assert got["upstream_livez"][:2] == [404, "no model server\n"], got
        assert got["drain"][0] == 403, got
        assert json.loads(got["drain"][1]) == {
            "error": "/drain is accepted only from inside the pod (loopback)"}
        assert got["status"][0] == 403 and got["status_wrong"][0] == 403, got
        assert "backend" not in got["status"][1], got
        # Still serving and ready: the refused drain did nothing.
        local = f"http://127.0.0.1:{sidecar.http}"
        assert requests.get(f"{local}/v2/health/ready", timeout=5).status_code == 200
        # From inside the pod the status is served.
        r = requests.get(f"http://127.0.0.1:{sidecar.admin}/status", timeout=5)
        assert r.status_code == 200 and "extensions" in r.json(), r.text
        log = (tmp_path / f"sidecar-{sidecar.http}.log").read_text()
        refused = [line for line in log.splitlines() if "admin call refused" in line]
        assert any(CALLER_SIDE in line and "drain" in line for line in refused), log[-3000:]
    finally:
        sidecar.stop()


def test_a_model_server_on_loopback_is_probed_through_the_admin_port(tmp_path, namespace):
    """The kubelet cannot reach a model server bound to 127.0.0.1 (`model.listen: Loopback`);
    `/upstream/livez` answers for it from outside, and says only whether it accepts connections.
    The model server here is a second sidecar serving the built-in models on loopback."""
    model_server = Sidecar(tmp_path, [])
    sidecar = None
    try:
        sidecar = Sidecar(tmp_path, [f"--upstream=grpc://127.0.0.1:{model_server.grpc}"])
        got = admin_calls(namespace, sidecar)
        assert got["upstream_livez"][:2] == [200, "ok\n"], got
        model_server.stop()
        got = admin_calls(namespace, sidecar)
        assert got["upstream_livez"][:2] == [
            503, "the model server does not accept connections\n"], got
        # The sidecar itself stays live: the kubelet restarts the model server, not the sidecar.
        assert got["livez"][:2] == [200, "ok\n"], got
    finally:
        if sidecar:
            sidecar.stop()
        if model_server.proc.poll() is None:
            model_server.stop()


def test_status_is_served_outside_the_pod_only_with_a_listed_token(tmp_path, namespace):
    token = "operator-status-token-" + os.urandom(12).hex()
    digest = hashlib.sha256(token.encode()).hexdigest()
    sidecar = Sidecar(tmp_path, [config_file(tmp_path, f"""
        server:
          status_token_sha256: ["{digest}"]
    """)])
    try:
        got = admin_calls(namespace, sidecar, token)
        assert got["status"][0] == 401, got
        assert got["status"][2] == 'Bearer realm="infergate-admin"', got
        assert got["status_wrong"][0] == 401, got
        # The two refusals read the same: nothing says whether a token was missing or wrong.
        assert got["status"][1] == got["status_wrong"][1], got
        assert got["status_token"][0] == 200, got
        status = json.loads(got["status_token"][1])
        assert "extensions" in status
        # The staging pool's key and the token are never in the status.
        assert "infergate_staging" not in got["status_token"][1]
        assert token not in got["status_token"][1]
        # The drain stays loopback only, token or not.
        assert got["drain"][0] == 403, got
        # The audit lines name the caller and the credential, never the token.
        log = (tmp_path / f"sidecar-{sidecar.http}.log").read_text()
        audit = [line for line in log.splitlines() if "admin call" in line]
        assert any(CALLER_SIDE in line and "status token" in line and "allowed=true" in line
                   for line in audit), audit
        assert any(CALLER_SIDE in line and "allowed=false" in line for line in audit), audit
        assert token not in log
    finally:
        sidecar.stop()


ADMIN_TLS_CALLS = textwrap.dedent("""
    import json, ssl, sys
    import requests
    host, port, ca_cert, ca_key, stranger_cert, stranger_key = sys.argv[1:7]
    got = {}
    def get(name, scheme, path, cert=None):
        # The port's certificate is the sidecar's own, made at start: nobody can verify it, and
        # nothing rests on it (the client's certificate is the credential).
        try:
            r = requests.get(f"{scheme}://{host}:{port}{path}", cert=cert, verify=False,
                             timeout=10)
            got[name] = [r.status_code, r.text]
        except requests.exceptions.SSLError as e:
            got[name] = ["SSLError", str(e)]
        except requests.exceptions.ConnectionError as e:
            got[name] = ["ConnectionError", str(e)]
    get("plain_livez", "http", "/livez")
    get("plain_status", "http", "/status")
    get("tls_livez", "https", "/livez")
    get("tls_status_without_certificate", "https", "/status")
    get("tls_status_of_another_ca", "https", "/status", (stranger_cert, stranger_key))
    get("tls_status", "https", "/status", (ca_cert, ca_key))
    get("tls_drain", "https", "/drain?seconds=0", (ca_cert, ca_key))
    print(json.dumps(got))
""")


def test_status_is_served_outside_the_pod_to_a_client_certificate_of_the_status_ca(tmp_path,
                                                                                   namespace):
    """`server.status_client_ca`: the admin port speaks TLS too, and a client certificate of that
    CA, and only of it, reads /status from outside the pod; probes stay plain HTTP, the drain
    stays loopback only."""
    sys.path.insert(0, str(REPO / "tests/conformance"))
    import certs
    status_ca = certs.ca(tmp_path / "status-ca", "status")
    operator = certs.signed(tmp_path / "status-ca", "operator", status_ca, server=False)
    stranger_ca = certs.ca(tmp_path / "stranger-ca", "status")  # the same name, another key
    stranger = certs.signed(tmp_path / "stranger-ca", "stranger", stranger_ca, server=False)
    for pair in (operator, stranger):
        for path in (pair.cert, pair.key):
            path.chmod(0o644)
    sidecar = Sidecar(tmp_path, [config_file(tmp_path, f"""
        server:
          status_client_ca: {status_ca.cert}
    """)])
    try:
        out = subprocess.run(
            ["ip", "netns", "exec", namespace, PYTHON, "-c", ADMIN_TLS_CALLS, HOST_SIDE,
             str(sidecar.admin), str(operator.cert), str(operator.key), str(stranger.cert),
             str(stranger.key)],
            check=True, capture_output=True, text=True, timeout=60)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        # The kubelet's probes: plain HTTP, as before, and over TLS without a certificate too.
        assert got["plain_livez"] == [200, "ok\n"], got
        assert got["tls_livez"] == [200, "ok\n"], got
        # No certificate, in plain or over TLS: a credential is asked for.
        for name in ("plain_status", "tls_status_without_certificate"):
            assert got[name][0] == 401, (name, got)
            assert "backend" not in got[name][1], (name, got)
        # A certificate of another CA (the same CA name): the handshake does not complete.
        assert got["tls_status_of_another_ca"][0] in ("SSLError", "ConnectionError"), got
        # The status CA's certificate reads the status.
        assert got["tls_status"][0] == 200, got
        assert "extensions" in json.loads(got["tls_status"][1]), got
        # And opens nothing else: the drain is the pod's own.
        assert got["tls_drain"][0] == 403, got
        local = f"http://127.0.0.1:{sidecar.http}"
        assert requests.get(f"{local}/v2/health/ready", timeout=5).status_code == 200
        log = (tmp_path / f"sidecar-{sidecar.http}.log").read_text()
        audit = [line for line in log.splitlines() if "admin call" in line]
        assert any(CALLER_SIDE in line and "client certificate" in line and "allowed=true" in line
                   for line in audit), audit
    finally:
        sidecar.stop()


def test_the_prestop_hook_drains_from_inside_the_pod_within_the_bound(tmp_path):
    """The sidecar copies `infergate-drain` into server.drain_hook_dir at start; run from there,
    as the model container's preStop hook runs it, it drains the sidecar over loopback, for no
    longer than server.max_drain_seconds."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    sidecar = Sidecar(tmp_path, [config_file(tmp_path, f"""
        server:
          drain_hook_dir: "{hook_dir}"
          max_drain_seconds: 1
    """)])
    try:
        hook = hook_dir / "infergate-drain"
        assert hook.is_file() and os.access(hook, os.X_OK), list(hook_dir.iterdir())
        started = time.monotonic()
        out = subprocess.run([str(hook), f"--port={sidecar.admin}", "--seconds=60"],
                             capture_output=True, text=True, timeout=30)
        took = time.monotonic() - started
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert answer["draining"] is True and answer["seconds"] == 1, answer
        assert took < 20, took
        ready = requests.get(f"http://127.0.0.1:{sidecar.http}/v2/health/ready", timeout=5)
        assert ready.status_code != 200
        readyz = requests.get(f"http://127.0.0.1:{sidecar.admin}/readyz", timeout=5)
        assert readyz.status_code == 503 and readyz.text == "not ready\n"
    finally:
        sidecar.stop()


def test_the_hook_fails_loudly_where_no_sidecar_answers(tmp_path):
    hook = BINARY.with_name("infergate-drain")
    port = free_ports(1)[0]
    out = subprocess.run([str(hook), f"--port={port}", "--seconds=0"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 1 and "cannot reach the sidecar's admin port" in out.stderr, out


# Run in the namespace: the control APIs' calls that change what the server does for everyone.
CONTROL_CALLS = CALLS_PRELUDE + textwrap.dedent("""
    rest("silence_the_log", "POST", "/v2/logging",
         {"log_error": False, "log_warning": False, "log_info": False})
    rest("trace_everything", "POST", "/v2/trace/setting", {"trace_rate": "1"})
    rest("unload", "POST", "/v2/repository/models/simple/unload")
    rest("index", "POST", "/v2/repository/index")
    rest("infer", "POST", "/v2/models/simple/infer",
         {"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                     for n in ("INPUT0", "INPUT1")]})
    client = grpcclient.InferenceServerClient(f"{host}:{grpc_port}")
    def grpc(name, call):
        try:
            call()
            got[name] = ["OK", None]
        except InferenceServerException as e:
            got[name] = [e.status(), e.message()]
    grpc("grpc_log_settings", lambda: client.update_log_settings({"log_info": False}))
    grpc("grpc_unload", lambda: client.unload_model("simple"))
    grpc("grpc_live", lambda: client.is_server_live())
    print(json.dumps(got))
""")


def test_pod_only_control_apis_refuse_a_caller_outside_the_pod(tmp_path, namespace):
    """`--pod-only-api` (what the operator renders by default for the control APIs): a caller
    outside the pod cannot silence the log, turn tracing on, or unload a model, over either
    protocol, and inference is still served to it; the same calls on loopback are served."""
    sidecar = Sidecar(tmp_path, ["--pod-only-api=logging,trace,model-repository",
                                 "--model-control-mode=explicit", "--log-format=json"])
    try:
        got = subprocess.run(
            ["ip", "netns", "exec", namespace, PYTHON, "-c", CONTROL_CALLS, HOST_SIDE,
             str(sidecar.http), str(sidecar.grpc)],
            check=True, capture_output=True, text=True, timeout=120)
        got = json.loads(got.stdout.strip().splitlines()[-1])
        words = "This API is restricted to clients in the server's pod (server.pod_only_api)"
        for call in ("silence_the_log", "trace_everything", "unload", "index"):
            assert got[call] == [403, words], (call, got)
        assert got["infer"] == [200, None], got
        grpc_words = words.replace("API", "protocol")
        for call in ("grpc_log_settings", "grpc_unload"):
            assert got[call] == ["StatusCode.UNAVAILABLE", grpc_words], (call, got)
        assert got["grpc_live"] == ["OK", None], got
        # Nothing changed: the model is still there and the log still says what it did.
        local = f"http://127.0.0.1:{sidecar.http}"
        assert requests.get(f"{local}/v2/models/simple/ready", timeout=10).status_code == 200
        assert requests.get(f"{local}/v2/logging", timeout=10).json()["log_info"] is True
        # From the pod (loopback), the same calls are served.
        r = requests.post(f"{local}/v2/trace/setting", json={"trace_rate": "2"}, timeout=10)
        assert r.status_code == 200, r.text
        audit = (tmp_path / f"sidecar-{sidecar.http}.log").read_text()
        refused = [json.loads(line) for line in audit.splitlines()
                   if '"control call refused"' in line]
        assert refused and all(line["credential"] == "the pod (loopback)" for line in refused)
        assert any(line["caller"].startswith(CALLER_SIDE) for line in refused), refused
    finally:
        sidecar.stop()
