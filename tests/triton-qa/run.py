#!/usr/bin/env python3
"""Run Triton's own QA test modules (server repo, branch r24.10 = Triton 2.51) against one
server at a time on localhost:8000/8001 (the addresses the tests hard-code), and count what
passes. Called by run.sh, which prepares everything named below; nothing is fetched here.

Nothing of Triton's test code is kept in this project: the tests are read from QA_ROOT (a copy
extracted from Triton's git repositories into a temporary directory by run.sh) and run as they
are. Where a test names a model the catalog lacks and a catalog model has the same contract for
what the test checks, the copy that runs gets the catalog's name (MAPPED below; the mapped copy
is written beside the original in QA_ROOT). Every other difference from Triton's test.sh is in
the `note` of its step.

Environment (run.sh sets it):
  QA_ROOT         the extracted tree (QA_ROOT/qa/L0_http, …, QA_ROOT/qa/clients)
  QA_PY           the Python that runs the tests (tritonclient[all]==2.71.0, psutil, requests)
  QA_TARGETS      sidecar,triton (either or both; one server runs at a time)
  QA_MODULES      optional filter: L0_http,L0_grpc,… (default: all)
  QA_OUT          where logs and results.json go
  SIDECAR_BIN     the sidecar binary
  TRITON_BIN, TRITON_BACKENDS, TRITON_PATH, TRITON_LD_PATH, TRITON_REPO
                  tritonserver, its backends, PATH and LD_LIBRARY_PATH for the python backend,
                  and the repository written by tests/upstream/make_triton_repo.py
  HEALTH_PROBE    optional grpc-health-probe binary (L0_grpc's health-probe check)
  LANG_CLIENTS    the Go, JavaScript and Java example clients, built by build-lang-clients.sh

Also usable as the unittest runner: run.py --unittest FILE RESULT_JSON [TEST_NAME...]
"""

from __future__ import annotations

import collections
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HTTP, GRPC, METRICS, NGINX = 8000, 8001, 8002, 8004
# L0_https's clients name `localhost` with `--ssl`: HTTPS on its default port.
HTTPS = 443
# Where a Triton behind the sidecar listens (steps whose models only Triton can run).
UPSTREAM_HTTP, UPSTREAM_GRPC, UPSTREAM_METRICS = 8100, 8101, 8102
SELF = Path(__file__).resolve()

# The seven models of Triton's docs repository that L0_http / L0_grpc serve and that the catalog
# has (densenet_onnx and inception_graphdef are image models, not in the catalog).
DOCS_MODELS = [
    "simple",
    "simple_int8",
    "simple_string",
    "simple_identity",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_string_dyna_sequence",
]

# QA model name -> catalog model with the same contract for what the test checks.
MAPPED = {
    '"onnx_zero_1_float32"': '"identity_fp32"',  # FP32 [-1] identity
    '"onnx_zero_1_object"': '"identity_bytes"',  # BYTES [-1] identity
}


# --------------------------------------------------------------------------- unittest runner
def unittest_main(argv) -> int:
    """Run the tests of one Triton QA file; write {test id: [status, first line of message]}."""
    import importlib.util
    import unittest

    path, out, names = argv[0], argv[1], argv[2:]
    sys.argv = [path]
    spec = importlib.util.spec_from_file_location("qa_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(names, module) if names else loader.loadTestsFromModule(module)
    results: dict = {}

    def short(err_text: str) -> str:
        lines = [l for l in err_text.strip().splitlines() if l.strip()]
        return lines[-1][:400] if lines else ""

    class Result(unittest.TextTestResult):
        def _id(self, test):
            return test.id().replace("qa_module.", "")

        def addSuccess(self, test):
            super().addSuccess(test)
            results.setdefault(self._id(test), ["pass", ""])

        def addFailure(self, test, err):
            super().addFailure(test, err)
            results[self._id(test)] = ["fail", short(self._exc_info_to_string(err, test))]

        def addError(self, test, err):
            super().addError(test, err)
            results[self._id(test)] = ["fail", short(self._exc_info_to_string(err, test))]

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            results[self._id(test)] = ["skip", reason]

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                results[self._id(test)] = ["fail", short(self._exc_info_to_string(err, test))]

    runner = unittest.TextTestRunner(verbosity=2, resultclass=Result, stream=sys.stderr)
    runner.run(suite)
    Path(out).write_text(json.dumps(results, indent=1))
    return 0


# --------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(f"[triton-qa] {msg}", file=sys.stderr, flush=True)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_ports_free(ports, timeout=60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if all(port_free(p) for p in ports):
            return
        time.sleep(0.5)
    raise RuntimeError(f"ports {ports} still busy")


def http(method: str, path: str, body: bytes | None = None, port: int = HTTP,
         tls: ssl.SSLContext | None = None):
    """One request on 127.0.0.1; with `tls`, over HTTPS with that context (only readiness is
    asked that way)."""
    scheme = "https" if tls else "http"
    req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30, context=tls) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def load_with_config(model: str, config: dict) -> None:
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    code, text = http("POST", f"/v2/repository/models/{model}/load", body)
    if code != 200:
        raise RuntimeError(f"load {model} with config: {code} {text!r}")


class Server:
    """One server on 8000/8001/8002, started for a step and stopped after it. With `upstream`,
    the sidecar serves the models from a Triton behind it (on 8100/8101/8102) instead of its
    built-in catalog: for models only Triton can run (Triton's own test models)."""

    count = 0

    def __init__(self, target, out: Path, models, mode="none", env=None,
                 triton_args=(), triton_override=None, sidecar_setup=None, both_args=(),
                 upstream=False, sidecar_config=None, sidecar_https=(), https_client=None):
        self.target, self.out, self.models, self.mode = target, out, models, mode
        # The server under test's environment (not the Triton behind the sidecar's).
        self.env = env or {}
        # With `upstream`: the sidecar's configuration (YAML) in place of `--upstream`.
        self.sidecar_config = sidecar_config
        # Flags both servers take with the same meaning (the restricted APIs and protocols).
        self.both_args = list(both_args)
        self.triton_args, self.triton_override = list(triton_args), triton_override or {}
        self.sidecar_setup = sidecar_setup
        self.upstream = upstream
        # The sidecar's own HTTPS flags (L0_https): its HTTP port becomes HTTPS on 443, where
        # Triton's test.sh puts nginx in front of Triton's plain HTTP.
        self.sidecar_https = list(sidecar_https)
        # Readiness over HTTPS: the certificate is not checked; under mutual TLS the client
        # presents `https_client` (certificate, key).
        self.https_client = https_client
        self.proc = None
        self.upstream_proc = None

    def start(self) -> None:
        Server.count += 1
        n = Server.count
        wait_ports_free([HTTP, GRPC, METRICS])
        if self.target == "sidecar" and self.upstream:
            wait_ports_free([UPSTREAM_HTTP, UPSTREAM_GRPC, UPSTREAM_METRICS])
            ports = (UPSTREAM_HTTP, UPSTREAM_GRPC, UPSTREAM_METRICS)
            self.upstream_proc = self._spawn(self._triton(n, ports, flags=False),
                                             f"upstream-triton-{n}", triton=True, env={})
            self._wait_ready(self.upstream_proc, UPSTREAM_HTTP, f"upstream-triton-{n}")
        if self.target == "sidecar":
            http_port = HTTPS if self.sidecar_https else HTTP
            cmd = [os.environ["SIDECAR_BIN"], "--host", "127.0.0.1",
                   "--http-port", str(http_port), "--grpc-port", str(GRPC),
                   "--metrics-port", str(METRICS), "--admin-port", "0",
                   "--model-control-mode", self.mode,
                   # Triton 2.51 has no such switch: client shared memory is always on there.
                   "--allow-client-shm"] + self.both_args + self.sidecar_https
            if self.upstream and self.sidecar_config:
                cfg = self.out / f"sidecar-{n}.yaml"
                cfg.write_text(self.sidecar_config)
                cmd += ["--config", str(cfg)]
            elif self.upstream:
                cmd += ["--upstream", f"grpc://127.0.0.1:{UPSTREAM_GRPC}"]
            else:
                cfg = self.out / f"sidecar-{n}.yaml"
                cfg.write_text("backend:\n  kind: builtin\n  models: ["
                               + ", ".join(self.models) + "]\n")
                cmd += ["--config", str(cfg)]
            self.proc = self._spawn(cmd, f"sidecar-{n}", triton=False)
        else:
            self.proc = self._spawn(self._triton(n, (HTTP, GRPC, METRICS)), f"triton-{n}",
                                    triton=True)
        if self.target == "sidecar" and self.sidecar_https:
            context = ssl._create_unverified_context()
            if self.https_client:
                context.load_cert_chain(*self.https_client)
            self._wait_ready(self.proc, HTTPS, self.target, tls=context)
        else:
            self._wait_ready(self.proc, HTTP, self.target)
        if self.target == "sidecar" and self.sidecar_setup:
            self.sidecar_setup()

    def _triton(self, n: int, ports, flags=True) -> list:
        """Triton's command line, serving this step's models on `ports` (HTTP, gRPC, metrics);
        with `flags`, the step's server flags too (not for the Triton behind the sidecar)."""
        repo = self.out / f"repo-{n}"
        repo.mkdir()
        for m in self.models:
            src = self.triton_override.get(m, Path(os.environ["TRITON_REPO"]) / m)
            shutil.copytree(src, repo / m)
        cmd = [os.environ["TRITON_BIN"], f"--model-repository={repo}",
               f"--backend-directory={os.environ['TRITON_BACKENDS']}",
               "--http-address=127.0.0.1", f"--http-port={ports[0]}",
               "--grpc-address=127.0.0.1", f"--grpc-port={ports[1]}",
               "--metrics-address=127.0.0.1", f"--metrics-port={ports[2]}",
               "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0",
               "--exit-timeout-secs=5"]
        if self.mode != "none":
            cmd += [f"--model-control-mode={self.mode}", "--load-model=*"]
        if not flags:
            return cmd
        return cmd + self.triton_args + self.both_args

    def _spawn(self, cmd, name: str, triton: bool, env=None):
        env = dict(os.environ, **(self.env if env is None else env))
        if triton:
            env["PATH"] = os.environ["TRITON_PATH"]
            env["LD_LIBRARY_PATH"] = os.environ["TRITON_LD_PATH"]
        self.log_path = self.out / f"{name}.log"
        return subprocess.Popen(cmd, stdout=open(self.log_path, "wb"),
                                stderr=subprocess.STDOUT, env=env, cwd=self.out,
                                start_new_session=True)

    def _wait_ready(self, proc, port: int, name: str, tls: ssl.SSLContext | None = None) -> None:
        end = time.time() + 240
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited; see {self.log_path}")
            try:
                if http("GET", "/v2/health/ready", port=port, tls=tls)[0] == 200:
                    return
            except OSError:
                pass
            if time.time() > end:
                raise RuntimeError(f"{name} not ready; see {self.log_path}")
            time.sleep(0.3)

    def stop(self) -> None:
        for proc in (self.proc, self.upstream_proc):
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.proc = self.upstream_proc = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            # A server that did not start: stop what did (the Triton behind the sidecar).
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()


# --------------------------------------------------------------------------- cases
class Ctx:
    def __init__(self, target: str, out: Path):
        self.target, self.out = target, out
        self.qa = Path(os.environ["QA_ROOT"]) / "qa"
        self.py = os.environ["QA_PY"]
        self.n = 0

    def run(self, cmd, cwd, env=None, timeout=900):
        self.n += 1
        logfile = self.out / f"client-{self.n}.log"
        full_env = dict(os.environ, **(env or {}))
        try:
            p = subprocess.run(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=timeout)
            text, rc = p.stdout.decode(errors="replace"), p.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = (e.stdout or b"").decode(errors="replace") + "\nTIMEOUT", -1
        logfile.write_text(f"$ {' '.join(map(str, cmd))}\n{text}")
        return rc, text

    def unittest(self, module: str, file: str, names=(), env=None):
        """[(test id, status, message)] of one unittest process."""
        result = self.out / f"unittest-{self.n + 1}.json"
        rc, text = self.run([self.py, str(SELF), "--unittest", file, str(result), *names],
                            self.qa / module, env)
        if not result.exists():
            last = text.strip().splitlines()[-1:] or [""]
            return [(f"{file}:{','.join(names) or '*'}", "fail", f"did not run: {last[0]}")]
        return [(k, *v) for k, v in json.loads(result.read_text()).items()]

    def judge(self, label: str, cmd, cwd, env=None, check=None):
        """One client run: passes when it exits 0 (and `check` accepts its output); a failure
        says why, or shows the output's last line."""
        rc, text = self.run(cmd, cwd, env)
        ok, why = check(rc, text) if check is not None else (rc == 0, "")
        return [(label, "pass" if ok else "fail", "" if ok else why or last_line(text))]

    def script(self, name: str, args, env=None, check=None):
        """One Python example client."""
        return self.judge(" ".join([name, *args]),
                          [self.py, str(self.qa / "clients" / name), *args],
                          self.qa / "clients", env, check)


def last_line(text: str) -> str:
    return ([l for l in text.strip().splitlines() if l.strip()][-1:] or [""])[0][:400]


def counted_line(words: str):
    """test.sh's judgement of an example client: exit status 0 and `grep -c WORDS` of its
    output exactly 1."""
    def check(rc, text):
        if rc != 0:
            return False, f"rc={rc}: {last_line(text)}"
        n = sum(1 for l in text.splitlines() if words in l)
        return n == 1, "" if n == 1 else f"{n} lines with {words!r}, test.sh wants 1"
    return check


one_pass = counted_line("PASS")  # L0_grpc's loop over the Python examples


def mapped_copy(src: Path, mapping: dict, suffix: str) -> str:
    text = src.read_text()
    for a, b in mapping.items():
        text = text.replace(a, b)
    dst = src.with_name(src.stem + suffix + ".py")
    dst.write_text(text)
    return dst.name


def decoupled_repeat_only(src: Path) -> str:
    """decoupled_test.py with its trials cut to repeat_int32 (the other five trial models are
    ensembles, in neither server's repository)."""
    text = src.read_text()
    text, n = re.subn(r"self\.trials_ = \[.*?\n        \]", 'self.trials_ = [("repeat_int32", None)]',
                      text, count=1, flags=re.S)
    if n != 1:
        raise RuntimeError("decoupled_test.py: trials_ list not found")
    dst = src.with_name("decoupled_test_repeat_int32.py")
    dst.write_text(text)
    return dst.name


def curl_blocks(test_sh: Path):
    """L0_http's curl checks of binary/JSON combinations: the blocks of test.sh between its
    'Test combinations of binary and JSON data' server start and the next kill, each starting
    at `rm -f ./curl.out`, run as they are (each sets RET=1 on a failed check)."""
    text = test_sh.read_text()
    start = text.index("# Test combinations of binary and JSON data")
    section = text[start:text.index("kill $SERVER_PID", start)]
    section = section[section.index("rm -f ./curl.out"):]
    blocks = ["rm -f ./curl.out" + b for b in section.split("rm -f ./curl.out") if b.strip()]
    return blocks


def nginx(out: Path, grpc: bool):
    """nginx with basic auth on 8004 in front of 8000 (REST) or 8001 (gRPC), as L0_http and
    L0_grpc start it (their nginx.conf names paths under /opt/tritonserver, so the same settings
    are written here with paths under `out`)."""
    pw = subprocess.run(["openssl", "passwd", "-apr1", "password"], capture_output=True,
                        text=True, check=True).stdout.strip()
    (out / "pswd").write_text(f"username:{pw}\n")
    if grpc:
        server = f"listen {NGINX} http2;\n location / {{ grpc_pass grpc://127.0.0.1:{GRPC}; }}"
    else:
        server = (f"listen {NGINX};\n location / {{ proxy_pass http://127.0.0.1:{HTTP};"
                  " proxy_set_header Host $host; }")
    conf = out / ("nginx-grpc.conf" if grpc else "nginx-http.conf")
    write_nginx_conf(conf, out, f"""auth_basic "Restricted Content";
  auth_basic_user_file {out}/pswd;
  server {{ {server} }}""")
    return start_nginx(conf, NGINX)


def write_nginx_conf(conf: Path, out: Path, http_body: str) -> None:
    """An nginx configuration with its pid, logs and temporary files under `out`, and
    `http_body` in its `http` block."""
    tmp = out / "nginx-tmp"
    tmp.mkdir(exist_ok=True)
    conf.write_text(f"""worker_processes 1;
pid {out}/nginx.pid;
error_log {out}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
  access_log {out}/nginx-access.log;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  {http_body}
}}
""")


def start_nginx(conf: Path, port: int):
    """nginx with `conf`, in the foreground, once it listens on `port` (or after 5 s)."""
    wait_ports_free([port])
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(50):
        if not port_free(port):
            break
        time.sleep(0.1)
    return proc


# --------------------------------------------------------------------------- steps
def skipped(label, why):
    return [(label, "skip", why)]


def l0_http(c: Ctx, rows):
    mod = "L0_http"
    http_test = mapped_copy(c.qa / mod / "http_test.py", MAPPED, "_catalog_names")
    with Server(c.target, c.out, ["identity_fp32", "identity_bytes", "simple"]):
        rows["L0_http http_test.py"] += c.unittest(mod, http_test)
    with Server(c.target, c.out, DOCS_MODELS):
        rows["L0_http python_http_aio_test.py"] += c.unittest(mod, "python_http_aio_test.py")

    ex = "L0_http example clients (Python)"
    with Server(c.target, c.out, DOCS_MODELS):
        for name in ["simple_http_health_metadata.py", "simple_http_aio_infer_client.py",
                     "simple_http_infer_client.py", "simple_http_async_infer_client.py",
                     "simple_http_shm_string_client.py", "simple_http_shm_client.py",
                     "simple_http_cudashm_client.py", "simple_http_string_infer_client.py",
                     "simple_http_sequence_sync_infer_client.py",
                     "reuse_infer_objects_client.py"]:
            rows[ex] += c.script(name, ["-v"])
        rows[ex] += skipped("image_client.py -m inception_graphdef",
                            "model inception_graphdef and images not in the catalog")

        def base_path(rc, text):
            seen = "POST /base_path/v2/models/simple/infer" in text
            return rc != 0 and seen, f"rc={rc}, request line seen={seen} (test.sh wants rc!=0 and the line)"

        rows[ex] += c.script("simple_http_infer_client.py", ["-u", "localhost:8000/base_path", "-v"],
                             check=base_path)
        blocks = curl_blocks(c.qa / mod / "test.sh")
        for i, block in enumerate(blocks, 1):
            rc, _ = c.run(["bash", "-c", "RET=0\n" + block + "\nexit $RET"], c.out)
            answer = c.out / "curl.out"
            why = answer.read_text()[:300] if rc != 0 and answer.exists() else ""
            rows["L0_http curl binary/JSON checks (test.sh)"].append(
                (f"curl block {i}", "pass" if rc == 0 else "fail", why))
        nx = nginx(c.out, grpc=False)
        try:
            rows["L0_http http_basic_auth_test.py (nginx)"] += c.unittest(mod, "http_basic_auth_test.py")
        finally:
            nx.terminate()
            nx.wait()
    with Server(c.target, c.out, DOCS_MODELS, mode="explicit"):
        rows[ex] += c.script("simple_http_model_control.py", ["-v"], check=one_pass)
    with Server(c.target, c.out, DOCS_MODELS):
        rows[ex] += c.script("simple_http_sequence_sync_infer_client.py", ["-v", "-d"])
    # The generate extension, with Triton's own test model (mock_llm, a decoupled python model
    # that answers with its prompt): the sidecar serves it from a Triton behind it.
    generate_models = c.qa / mod / "generate_models"
    if generate_models.is_dir():
        with Server(c.target, c.out, ["mock_llm"], upstream=True,
                    triton_override={"mock_llm": generate_models / "mock_llm"}):
            rows["L0_http generate_endpoint_test.py"] += c.unittest(mod, "generate_endpoint_test.py")
    restricted = ["--http-restricted-api=model-repository:admin-key=admin-value",
                  "--http-restricted-api=inference,metadata:infer-key=infer-value"]
    with Server(c.target, c.out, DOCS_MODELS, both_args=restricted):
        rows["L0_http http_restricted_api_test.py"] += c.unittest(
            mod, "http_restricted_api_test.py", ["RestrictedAPITest"])


def l0_shared_memory(c: Ctx, rows):
    mod = "L0_shared_memory"
    tests = ["test_invalid_create_shm", "test_valid_create_set_register",
             "test_unregister_before_register", "test_unregister_after_register",
             "test_reregister_after_register", "test_unregister_after_inference",
             "test_register_after_inference", "test_too_big_shm", "test_mixed_raw_shm",
             "test_unregisterall", "test_infer_offset_out_of_bound",
             "test_infer_byte_size_out_of_bound", "test_register_out_of_bound",
             "test_python_client_leak"]
    row = "L0_shared_memory shared_memory_test.py"
    for t in tests:
        for proto in ["http", "grpc"]:
            with Server(c.target, c.out, ["simple"]):
                got = c.unittest(mod, "shared_memory_test.py", [f"SharedMemoryTest.{t}"],
                                 env={"CLIENT_TYPE": proto})
                rows[row] += [(f"{i} [{proto}]", s, m) for i, s, m in got]
    # test.sh serves qa/python_models/execute_delayed_model (15 s per request) as "simple".
    delayed = c.out / "execute_delayed_simple"
    if not delayed.exists():
        (delayed / "1").mkdir(parents=True)
        src = c.qa / "python_models" / "execute_delayed_model"
        shutil.copy(src / "config.pbtxt", delayed / "config.pbtxt")
        shutil.copy(src / "model.py", delayed / "1" / "model.py")
    for proto in ["http", "grpc"]:
        with Server(c.target, c.out, ["simple"], triton_override={"simple": delayed}):
            rows[row] += c.unittest(
                mod, "shared_memory_test.py",
                [f"TestSharedMemoryUnregister.test_unregister_shm_during_inference_{proto}"],
                env={"CLIENT_TYPE": proto})


def l0_grpc(c: Ctx, rows):
    mod = "L0_grpc"
    ex = "L0_grpc example clients (Python)"
    with Server(c.target, c.out, DOCS_MODELS):
        rows[ex] += c.script("simple_grpc_health_metadata.py", ["-v"])
        for name in ["simple_grpc_aio_infer_client.py",
                     "simple_grpc_aio_sequence_stream_infer_client.py",
                     "simple_grpc_infer_client.py", "simple_grpc_async_infer_client.py",
                     "simple_grpc_string_infer_client.py",
                     "simple_grpc_sequence_stream_infer_client.py",
                     "simple_grpc_sequence_sync_infer_client.py",
                     "simple_grpc_shm_string_client.py", "simple_grpc_shm_client.py",
                     "simple_grpc_cudashm_client.py", "simple_grpc_keepalive_client.py",
                     "simple_grpc_custom_args_client.py", "grpc_explicit_byte_content_client.py",
                     "grpc_explicit_int_content_client.py",
                     "grpc_explicit_int8_content_client.py"]:
            rows[ex] += c.script(name, ["-v"], check=one_pass)
        for name in ["image_client.py", "grpc_image_client.py"]:
            rows[ex] += skipped(f"{name} -m inception_graphdef",
                                "model inception_graphdef and images not in the catalog")
        rows[ex] += skipped("grpc_client.py", "model densenet_onnx not in the catalog")
        rows[ex] += c.script("reuse_infer_objects_client.py", ["-v", "-i", "grpc", "-u", "localhost:8001"])
        nx = nginx(c.out, grpc=True)
        try:
            rows["L0_grpc grpc_basic_auth_test.py (nginx)"] += c.unittest(mod, "grpc_basic_auth_test.py")
        finally:
            nx.terminate()
            nx.wait()
        probe = os.environ.get("HEALTH_PROBE")
        if probe:
            rc, text = c.run([probe, f"-addr=localhost:{GRPC}"], c.out)
            ok = "status: SERVING" in text
            rows["L0_grpc grpc-health-probe"].append(
                ("grpc-health-probe (online)", "pass" if ok else "fail", "" if ok else text.strip()[:300]))
    with Server(c.target, c.out, DOCS_MODELS,
                triton_args=["--grpc-infer-response-compression-level=high"]):
        trace = {"GRPC_TRACE": "compression,channel", "GRPC_VERBOSITY": "DEBUG"}

        def deflate(rc, text):
            ok = rc == 0 and "Compressed[deflate]" in text
            return ok, f"rc={rc}, 'Compressed[deflate]' in trace={'Compressed[deflate]' in text}"

        rows[ex] += c.script("simple_grpc_infer_client.py", ["-v", "-C", "deflate"], env=trace,
                             check=deflate)
    with Server(c.target, c.out, DOCS_MODELS, mode="explicit"):
        rows[ex] += c.script("simple_grpc_model_control.py", ["-v"], check=one_pass)
    with Server(c.target, c.out, DOCS_MODELS):
        for name in ["simple_grpc_sequence_stream_infer_client.py",
                     "simple_grpc_sequence_sync_infer_client.py"]:
            rows[ex] += c.script(name, ["-v", "-d"])
        rows["L0_grpc python_grpc_aio_test.py"] += c.unittest(mod, "python_grpc_aio_test.py")
    restricted = ["--grpc-restricted-protocol=model-repository:admin-key=admin-value",
                  "--grpc-restricted-protocol=inference,health:infer-key=infer-value"]
    with Server(c.target, c.out, DOCS_MODELS, both_args=restricted):
        rows["L0_grpc python_unit_test.py (restricted protocol)"] += c.unittest(
            mod, "python_unit_test.py", ["RestrictedProtocolTest"])


def delayed_identity(out: Path) -> Path:
    """custom_identity_int32 with L0_client_timeout's execute_delay_ms 3000 (Triton side)."""
    d = out / "custom_identity_int32_3000"
    if not d.exists():
        shutil.copytree(Path(os.environ["TRITON_REPO"]) / "custom_identity_int32", d)
        cfg = d / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('string_value: "0"', 'string_value: "3000"'))
    return d


def set_delay_3000():
    """Sidecar side: the same delay, through a load with a configuration (explicit mode)."""
    load_with_config("custom_identity_int32",
                     {"parameters": {"execute_delay_ms": {"string_value": "3000"}}})


def l0_client_timeout(c: Ctx, rows):
    mod = "L0_client_timeout"
    model = ["custom_identity_int32"]
    over = {"custom_identity_int32": delayed_identity(c.out)} if c.target == "triton" else {}
    # test.sh's server for these runs in mode none; the sidecar needs explicit for the load.
    mode = "explicit" if c.target == "sidecar" else "none"
    with Server(c.target, c.out, model, mode=mode, triton_override=over,
                sidecar_setup=set_delay_3000):
        for t in ["test_grpc_infer", "test_grpc_async_infer", "test_grpc_stream_infer",
                  "test_http_infer", "test_http_async_infer"]:
            rows["L0_client_timeout client_infer_timeout_test.py"] += c.unittest(
                mod, "client_infer_timeout_test.py", [f"ClientInferTimeoutTest.{t}"])
    with Server(c.target, c.out, model, mode="explicit", triton_override=over,
                env={"TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"},
                sidecar_setup=set_delay_3000):
        rows["L0_client_timeout client_non_infer_timeout_test.py"] += c.unittest(
            mod, "client_non_infer_timeout_test.py")


def l0_decoupled(c: Ctx, rows):
    mod = "L0_decoupled"
    test = decoupled_repeat_only(c.qa / mod / "decoupled_test.py")
    row = "L0_decoupled decoupled_test.py"
    with Server(c.target, c.out, ["repeat_int32"]):
        for t in ["test_one_to_none", "test_one_to_one", "test_one_to_many",
                  "test_no_streaming", "test_response_order", "test_wrong_shape"]:
            rows[row] += c.unittest(mod, test, [f"DecoupledTest.{t}"])
        rows[row] += c.unittest(mod, test, ["DecoupledTest.test_one_to_multi_many"],
                                env={"TRITONSERVER_DELAY_GRPC_RESPONSE": "2000"})
    # NonDecoupledTest: repeat_int32 with `decoupled: False` (test.sh edits its config).
    nd = c.out / "repeat_int32_non_decoupled"
    if c.target == "triton":
        shutil.copytree(Path(os.environ["TRITON_REPO"]) / "repeat_int32", nd)
        cfg = nd / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace("decoupled: true", "decoupled: false"))
    mode = "explicit" if c.target == "sidecar" else "none"
    with Server(c.target, c.out, ["repeat_int32"], mode=mode, triton_override={"repeat_int32": nd},
                sidecar_setup=lambda: load_with_config(
                    "repeat_int32", {"model_transaction_policy": {"decoupled": False}})):
        rows[row] += c.unittest(mod, test, ["NonDecoupledTest"])


def trace_args(file: str, level: str, rate: int) -> list:
    """test.sh's trace flags (both servers take them with the same meaning)."""
    return ["--trace-config", f"triton,file={file}", "--trace-config", f"level={level}",
            "--trace-config", f"rate={rate}"]


def l0_trace(c: Ctx, rows):
    """L0_trace's checks of Triton's trace files (test.sh's first four server runs), judged as
    test.sh judges them (its `trace_summary.py -t` line counts), and trace_endpoint_test.py.
    The Python example clients stand in for test.sh's C++ ones; each makes two inferences of
    `simple` where those make one (and the HTTP one a third, of an unknown model, which is not
    traced), so every count test.sh expects is doubled here, and where test.sh's 20 requests at
    rate 6 leave 3 traces in two files (2 and 1 at log_frequency 2), the 40 here leave 6 in
    three (2, 2 and 2)."""
    mod = "L0_trace"
    row = "L0_trace test.sh trace-file checks"
    summary = c.qa / "common" / "trace_summary.py"

    def case(name, ok, why=""):
        rows[row].append((name, "pass" if ok else "fail", "" if ok else str(why)[:300]))

    def send(times):  # test.sh's send_inference_requests
        for _ in range(times):
            for client in ("simple_http_infer_client.py", "simple_grpc_infer_client.py"):
                c.run([c.py, str(c.qa / "clients" / client)], c.qa / "clients")

    def counted(name):  # test.sh's `grep -c COMPUTE_INPUT_END` and `grep -c ^simple`
        path = c.out / name
        if not path.exists():
            return "no file"
        _, text = c.run([c.py, str(summary), "-t", str(path)], c.out)
        lines = text.splitlines()
        return (sum("COMPUTE_INPUT_END" in line for line in lines),
                sum(line.startswith("simple") for line in lines))

    def setting(model=None, body=None):
        path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
        status, text = http("POST" if body is not None else "GET", path,
                            None if body is None else json.dumps(body).encode())
        try:
            return status, json.loads(text)
        except ValueError:
            return status, {}

    def expect(name, answer, **fields):
        status, got = answer
        wanted = {k: v if k == "trace_level" else str(v) for k, v in fields.items()}
        shown = {k: got.get(k) for k in wanted}
        case(name, status == 200 and shown == wanted, f"{status} {got}")

    def settings(level, rate, count, log_frequency, file):
        return dict(trace_level=[level], trace_rate=rate, trace_count=count,
                    log_frequency=log_frequency, trace_file=file, trace_mode="triton")

    # 1. Tracing off at start, turned on through the API: only what follows is traced.
    with Server(c.target, c.out, ["simple"], both_args=trace_args("trace_off_to_min.log", "OFF", 1)):
        expect("off to min: global update", setting(body={"trace_level": ["TIMESTAMPS"]}),
               **settings("TIMESTAMPS", 1, -1, 0, "trace_off_to_min.log"))
        send(10)
    got = counted("trace_off_to_min.log")
    case("off to min: 40 traces", got == (40, 40), got)

    # 2. A model's own log_frequency: its traces in numbered files, two at a time.
    with Server(c.target, c.out, ["simple"], both_args=trace_args("global_trace.log", "TIMESTAMPS", 6)):
        status, got = setting("simple", {"trace_file": "global_trace.log"})
        case("model: trace_file refused", status != 200 and got.get("error") ==
             "trace file location can not be updated through network protocol", f"{status} {got}")
        expect("model: log_frequency 2", setting("simple", {"log_frequency": "2"}),
               **settings("TIMESTAMPS", 6, -1, 2, "global_trace.log"))
        send(10)
    case("model: no simple_trace.log", not (c.out / "simple_trace.log").exists())
    for n in range(3):
        got = counted(f"global_trace.log.{n}")
        case(f"model: 2 traces in .{n}", got == (2, 2), got)
    case("model: no .3", not (c.out / "global_trace.log.3").exists())

    # 3. A model's settings updated, then cleared back to the server's.
    for name in ["global_trace.log"] + [f"global_trace.log.{n}" for n in range(4)]:
        (c.out / name).unlink(missing_ok=True)
    with Server(c.target, c.out, ["simple"], both_args=trace_args("global_trace.log", "TIMESTAMPS", 6)):
        expect("update: model rate 1", setting("simple", {"trace_rate": "1"}),
               **settings("TIMESTAMPS", 1, -1, 0, "global_trace.log"))
        expect("update: model level OFF", setting("simple", {"trace_level": ["OFF"]}),
               **settings("OFF", 1, -1, 0, "global_trace.log"))
        send(10)
        expect("update: model level cleared", setting("simple", {"trace_level": None}),
               **settings("TIMESTAMPS", 1, -1, 0, "global_trace.log"))
        send(5)
    case("update: no update_trace.log", not (c.out / "update_trace.log").exists())
    got = counted("global_trace.log")
    case("update: 20 traces", got == (20, 20), got)

    # 4. trace_count: a numbered file once the count is used up.
    with Server(c.target, c.out, ["simple"], both_args=trace_args("global_count.log", "TIMESTAMPS", 1)):
        send(10)
        expect("count: before", setting("simple"), **settings("TIMESTAMPS", 1, -1, 0, "global_count.log"))
        expect("count: global count 5", setting(body={"trace_count": "5"}),
               **settings("TIMESTAMPS", 1, 5, 0, "global_count.log"))
        send(10)
        expect("count: used up", setting("simple"), **settings("TIMESTAMPS", 1, 0, 0, "global_count.log"))
        case("count: global_count.log.0 written", (c.out / "global_count.log.0").exists())
        for name in ["trace_count", "trace_rate", "log_frequency"]:
            status, got = setting("simple", {name: "10000000000"})
            case(f"count: {name} out of range refused", status != 200, f"{status} {got}")
    got = counted("global_count.log")
    case("count: 40 traces before the count", got == (40, 40), got)
    got = counted("global_count.log.0")
    case("count: 5 counted traces in .0", got == (5, 5), got)

    with Server(c.target, c.out, ["simple"], both_args=trace_args("global_unittest.log", "TIMESTAMPS", 1)):
        rows["L0_trace trace_endpoint_test.py"] += c.unittest(mod, "trace_endpoint_test.py")


TRITON_LINE = re.compile(r"^[IWEV][0-9]{4}.*")  # test.sh's `grep -c ^[IWEV][0-9][0-9][0-9][0-9].*`


def l0_logging(c: Ctx, rows):
    """L0_logging's test.sh: its server runs with the logging flags (--log-file, --log-verbose,
    --log-info, --log-warning, --log-error, --log-format, and --log-warn as test.sh spells it),
    each check judged as test.sh judges it, then logging_endpoint_test.py on a server of `simple`
    with no logging flags, as test.sh runs it last. The Python example clients stand in for
    test.sh's C++ ones, as in L0_trace. test.sh's date checks after --log-format compare with a
    variable it never sets, so they cannot fail; here the first line's layout (ISO8601) and the
    last one's after the change (default) are checked instead. Last, log_format_test.py, as
    test.sh runs it (log_format_run)."""
    row = "L0_logging test.sh server-flag checks"
    log_file = c.out / "log_file.log"

    def case(name, ok, why=""):
        rows[row].append((name, "pass" if ok else "fail", "" if ok else str(why)[:300]))

    def verify(name, file, info, warn, error, verbose, fmt):  # verify_correct_settings
        status, text = http("GET", "/v2/logging")
        text = text.decode(errors="replace")
        try:
            got = json.loads(text)
        except ValueError:
            got = {}
        wanted = dict(log_file=file, log_info=info, log_warning=warn, log_error=error,
                      log_verbose_level=verbose, log_format=fmt)
        case(f"{name}: settings", status == 200 and all(got.get(k) == v for k, v in wanted.items()),
             f"{status} {text}")

    def post(body):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, text = http("POST", "/v2/logging", raw)
        return status, text.decode(errors="replace")

    def clients(name):
        for client in ("simple_http_infer_client.py", "simple_grpc_infer_client.py"):
            rc, text = c.run([c.py, str(c.qa / "clients" / client)], c.qa / "clients")
            case(f"{name}: {client}", rc == 0, text.strip().splitlines()[-1:] if rc else "")

    def lines_of(path):
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def triton_lines(path):
        return sum(1 for line in lines_of(path) if TRITON_LINE.match(line))

    def count(words, path=log_file):
        return sum(1 for line in lines_of(path) if words in line)

    with Server(c.target, c.out, ["simple"]) as server:
        verify("default", "", True, True, True, 0, "default")
        clients("default")
    n = len(lines_of(server.log_path))
    case("default: more than 30 lines on the console", n > 30, f"{n} lines")

    def file_run(name, flags, verbose, at_least, first=lambda: None):
        """A run with the log in the file: the settings, the clients, then how many of Triton's
        lines the file and the console hold."""
        log_file.unlink(missing_ok=True)
        with Server(c.target, c.out, ["simple"], both_args=flags) as server:
            first()
            verify(name, "log_file.log", True, True, True, verbose, "default")
            clients(name)
        n = triton_lines(log_file)
        case(f"{name}: at least {at_least} lines in the file", n >= at_least, f"{n} lines")
        n = triton_lines(server.log_path)
        case(f"{name}: none on the console", n == 0, f"{n} lines")

    def file_refused():
        status, text = post({"log_file": "other_log.log"})
        case("log file (dynamic): refused",
             '"error":"log file location can not be updated through network protocol"' in text,
             f"{status} {text}")

    file_run("log file", ["--log-file=log_file.log"], 0, 19)
    file_run("log file (dynamic)", ["--log-file=log_file.log", "--log-verbose=1"], 1, 75,
             first=file_refused)

    log_file.unlink(missing_ok=True)
    with Server(c.target, c.out, ["simple"],
                both_args=["--log-file=log_file.log", "--log-info=false", "--log-verbose=1"]):
        verify("log info", "log_file.log", False, True, True, 1, "default")
        clients("log info")
        n = count("Started HTTPService at")
        case("log info: no info line", n == 0, f"{n} lines")
        post({"log_info": True})
        verify("log info (dynamic)", "log_file.log", True, True, True, 1, "default")
        clients("log info (dynamic)")
    n = count("Waiting for in-flight requests to complete")
    case("log info (dynamic): the stop's info line", n == 1, f"{n} lines")

    with Server(c.target, c.out, ["simple"], both_args=["--log-warning=false"]):
        verify("log warning", "", True, False, True, 0, "default")
    with Server(c.target, c.out, ["simple"], both_args=["--log-error=false"]):
        verify("log error", "", True, True, False, 0, "default")

    log_file.unlink(missing_ok=True)
    with Server(c.target, c.out, ["simple"],
                both_args=["--log-file=log_file.log", "--log-verbose=1"]):
        http("GET", "/v2/logging")
        verify("log verbose", "log_file.log", True, True, True, 1, "default")
        n = count("/v2/logging")
        case("log verbose: both requests logged", n == 2, f"{n} lines")
        post({"log_verbose_level": 0})
        verify("log verbose (dynamic)", "log_file.log", True, True, True, 0, "default")
        http("GET", "/v2/logging")
        n = count("/v2/logging")
        case("log verbose (dynamic): no more logged", n <= 3, f"{n} lines")

    log_file.unlink(missing_ok=True)
    with Server(c.target, c.out, ["simple"],
                both_args=["--log-file=log_file.log", "--log-verbose=1", "--log-format=ISO8601"]):
        verify("log format", "log_file.log", True, True, True, 1, "ISO8601")
        first = (lines_of(log_file) or [""])[0]
        case("log format: ISO8601 lines", re.match(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z ", first), first)
        post({"log_format": "default"})
        verify("log format (dynamic)", "log_file.log", True, True, True, 1, "default")
        http("GET", "/v2/health/ready")
        last = (lines_of(log_file) or [""])[-1]
        case("log format (dynamic): default lines", TRITON_LINE.match(last), last)

    with Server(c.target, c.out, ["simple"], both_args=['--log-warn=false']):
        for param in ("log_info", "log_warning", "log_error"):
            for label, body in (("integer", f'{{"{param}":1}}'), ("upper-case", f'{{"{param}":False}}'),
                                ("string", f'{{"{param}":"false"}}')):
                status, text = post(body.encode())
                case(f"negative: {param} as {label} refused", status != 200, f"{status} {text}")
            status, text = post({param: True})
            case(f"negative: {param} true taken", status == 200, f"{status} {text}")
        for label, value in (("-1", -1), ('"1"', "1")):
            status, text = post({"log_verbose_level": value})
            case(f"negative: log_verbose_level {label} refused", status != 200, f"{status} {text}")
        status, text = post({"log_verbose_level": 0})
        case("negative: log_verbose_level 0 taken", status == 200, f"{status} {text}")

    with Server(c.target, c.out, ["simple"]):
        rows["L0_logging logging_endpoint_test.py"] += c.unittest(
            "L0_logging", "logging_endpoint_test.py")
    rows["L0_logging log_format_test.py"] += log_format_run(c)


def log_format_run(c: Ctx):
    """log_format_test.py (pytest) starts `tritonserver` itself, with the logging flags and a
    log file, and reads the file as Triton's own parser: each record in the layout asked for,
    its message a JSON string (or not, with TRITON_SERVER_ESCAPE_LOG_MESSAGES=0), tables drawn
    as Triton's table printer draws them; an input name that carries a forged log record must
    not show up as a record when messages are escaped (and must, when they are not). The
    `tritonserver` it finds on PATH here is a stand-in that starts the server under test with
    those flags on 8000/8001/8002, serving `simple`, in place of test.sh's model repository
    (whose `simple` is an INT32 model; the test's requests fail on purpose either way)."""
    shim_dir = c.out / "tritonserver-shim"
    shim_dir.mkdir(exist_ok=True)
    if c.target == "sidecar":
        cfg = shim_dir / "sidecar.yaml"
        cfg.write_text("backend:\n  kind: builtin\n  models: [simple]\n")
        cmd = [os.environ["SIDECAR_BIN"], "--host", "127.0.0.1", "--http-port", str(HTTP),
               "--grpc-port", str(GRPC), "--metrics-port", str(METRICS), "--admin-port", "0",
               "--config", str(cfg)]
        env = {}
    else:
        repo = shim_dir / "repo"
        if not repo.exists():
            shutil.copytree(Path(os.environ["TRITON_REPO"]) / "simple", repo / "simple")
        cmd = [os.environ["TRITON_BIN"], f"--model-repository={repo}",
               f"--backend-directory={os.environ['TRITON_BACKENDS']}",
               "--http-address=127.0.0.1", f"--http-port={HTTP}",
               "--grpc-address=127.0.0.1", f"--grpc-port={GRPC}",
               "--metrics-address=127.0.0.1", f"--metrics-port={METRICS}",
               "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0"]
        env = {"PATH": os.environ["TRITON_PATH"], "LD_LIBRARY_PATH": os.environ["TRITON_LD_PATH"]}
    shim = shim_dir / "tritonserver"
    shim.write_text(f"""#!{sys.executable}
# The `tritonserver` log_format_test.py starts: the server under test, with the test's flags
# (its model repository aside). exec, so that the test's kill() reaches the server itself.
# Its pid (the server's, after exec) is noted, for a run cut short to stop it.
import os, sys
with open({str(shim_dir / "pids")!r}, "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")
cmd = {cmd!r} + [a for a in sys.argv[1:] if not a.startswith("--model-repository")]
os.execve(cmd[0], cmd, dict(os.environ, **{env!r}))
""")
    shim.chmod(0o755)
    (shim_dir / "pids").unlink(missing_ok=True)
    wait_ports_free([HTTP, GRPC, METRICS])
    report = c.out / f"log_format_test-{c.n + 1}.xml"
    rc, text = c.run([c.py, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}",
                      "log_format_test.py"], c.qa / "L0_logging",
                     env={"PATH": f"{shim_dir}:{os.environ['PATH']}"})
    # A run cut short (its timeout) leaves the server it had started: stop it.
    for pid in (shim_dir / "pids").read_text().split() if (shim_dir / "pids").exists() else []:
        try:
            # Only the server itself, not a process that has taken its pid since.
            if cmd[0].encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    if not report.exists():
        return [("log_format_test.py", "fail", f"did not run: {last_line(text)}")]
    return junit_cases(report)


def junit_cases(report: Path):
    """[(test id, status, message)] of a pytest JUnit XML report."""
    import xml.etree.ElementTree as ET

    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if failed is not None:
            found.append((name, "fail", (failed.get("message") or "")[:400]))
        elif skipped is not None:
            found.append((name, "skip", (skipped.get("message") or "")[:400]))
        else:
            found.append((name, "pass", ""))
    return found


def lang_clients() -> Path:
    return Path(os.environ["LANG_CLIENTS"])


def l0_simple_go_client(c: Ctx, rows):
    """grpc_simple_client.go (client repository, grpc_generated/go), stubs generated by protoc
    as test.sh generates them; built once by build-lang-clients.sh, run as test.sh runs it."""
    go = lang_clients() / "go"
    with Server(c.target, c.out, ["simple"]):
        rows["L0_simple_go_client grpc_simple_client.go"] += c.judge(
            "grpc_simple_client.go", [str(go / "grpc_simple_client")], go,
            check=counted_line("Checking Inference Outputs"))


def secure_grpc_certs(out: Path) -> None:
    """The certificates L0_secure_grpc's test.sh makes, with its commands: a CA, a server and a
    client certificate for CN=localhost (X.509 version 1: `x509 -req` without extensions), and
    client2.key/client2.crt, corrupted copies of the client's."""
    steps = [
        "genrsa -passout pass:1234 -des3 -out ca.key 4096",
        "req -passin pass:1234 -new -x509 -days 365 -key ca.key -out ca.crt "
        "-subj '/C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Test/CN=Root CA'",
        "genrsa -passout pass:1234 -des3 -out server.key 4096",
        "req -passin pass:1234 -new -key server.key -out server.csr "
        "-subj /C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Server/CN=localhost",
        "x509 -req -passin pass:1234 -days 365 -in server.csr -CA ca.crt -CAkey ca.key "
        "-set_serial 01 -out server.crt",
        "rsa -passin pass:1234 -in server.key -out server.key",
        "genrsa -passout pass:1234 -des3 -out client.key 4096",
        "req -passin pass:1234 -new -key client.key -out client.csr "
        "-subj /C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Client/CN=localhost",
        "x509 -passin pass:1234 -req -days 365 -in client.csr -CA ca.crt -CAkey ca.key "
        "-set_serial 01 -out client.crt",
        "rsa -passin pass:1234 -in client.key -out client.key",
    ]
    for step in steps:
        subprocess.run(["openssl", *shlex.split(step)], cwd=out, check=True, capture_output=True)
    for name in ("client.key", "client.crt"):
        text = (out / name).read_text()
        # test.sh's sed "s/\b\(.\)/\u\1/g": the first letter of every word upper-cased.
        corrupted = re.sub(r"\b(\w)", lambda m: m.group(1).upper(), text)
        (out / name.replace("client", "client2")).write_text(corrupted)


def l0_secure_grpc(c: Ctx, rows):
    """L0_secure_grpc's test.sh: its certificates, its three server cases (server TLS, mutual
    TLS, both flags), the Python example clients with `--ssl` (test.sh's C++ client is not
    built here), and its expected failures: a client without TLS, and one with a corrupted key
    and certificate. Both servers take Triton's flags as they are."""
    certs = c.out / "certs"
    certs.mkdir()
    secure_grpc_certs(certs)
    base = ["--grpc-use-ssl=1", f"--grpc-server-cert={certs / 'server.crt'}",
            f"--grpc-server-key={certs / 'server.key'}", f"--grpc-root-cert={certs / 'ca.crt'}"]
    cases = {"server": ["--grpc-use-ssl=1"], "mutual": ["--grpc-use-ssl-mutual=1"],
             "both": ["--grpc-use-ssl=1", "--grpc-use-ssl-mutual=1"]}
    clients = ["simple_grpc_infer_client.py", "simple_grpc_aio_infer_client.py"]

    def ssl_args(prefix):
        return ["-v", "--ssl", "--root-certificates", str(certs / "ca.crt"),
                "--private-key", str(certs / f"{prefix}.key"),
                "--certificate-chain", str(certs / f"{prefix}.crt")]

    def must_fail(rc, text):
        return rc != 0, f"rc={rc}: the client was served"

    row = "L0_secure_grpc test.sh (Python clients)"
    for case, flags in cases.items():
        try:
            with Server(c.target, c.out, ["simple"], both_args=base + flags):
                for name in clients:
                    rows[row] += [(f"{case}: {label}", st, msg) for label, st, msg in
                                  c.script(name, ssl_args("client"))]
                if case != "both":
                    for name in clients:
                        rows[row] += [(f"{case}: {label} (must fail)", st, msg)
                                      for label, st, msg in c.script(name, ["-v"], check=must_fail)]
                        rows[row] += [(f"{case}: {label} (must fail)", st, msg)
                                      for label, st, msg in c.script(name, ssl_args("client2"),
                                                                     check=must_fail)]
        except RuntimeError as e:
            rows[row].append((f"{case}: server start", "fail", str(e)[:300]))
    rows[row] += skipped("simple_grpc_infer_client (C++)", "the C++ examples are not built here")


def nginx_https(out: Path, certs: Path):
    """L0_https's nginx.conf: HTTPS on 443 with the server certificate, no client
    verification, proxied over HTTP/1.1 to the server on 8000 (test.sh copies the file into
    /etc/nginx; the same settings are written here with paths under `out`)."""
    conf = out / "nginx-https.conf"
    write_nginx_conf(conf, out, f"""server {{
    listen {HTTPS} ssl;
    server_name localhost;
    ssl_certificate {certs / 'server.crt'};
    ssl_certificate_key {certs / 'server.key'};
    location / {{ proxy_pass http://localhost:{HTTP}; proxy_http_version 1.1; }}
  }}""")
    return start_nginx(conf, HTTPS)


def l0_https(c: Ctx, rows):
    """L0_https's test.sh: its certificates (the commands of L0_secure_grpc's), the Python
    example clients over HTTPS on localhost:443 with the client's key, certificate and the CA,
    then without peer verification (`--insecure`), and its expected failures: a client without
    TLS, and one with a corrupted key. Triton has no HTTPS of its own, so test.sh puts nginx in
    front of it; the sidecar serves HTTPS itself on 443 (`--http-use-ssl=1`, the server
    certificate and key), not mutual, as nginx there verifies no client. test.sh's C++ client
    is not built here.

    Beyond test.sh, on the sidecar only (`--http-use-ssl-mutual=1` with the CA as root, which
    the nginx of test.sh does not do): the same clients with the client certificate pass, and
    without one (`--insecure`) must fail."""
    certs = c.out / "certs"
    certs.mkdir()
    secure_grpc_certs(certs)
    clients = ["simple_http_infer_client.py", "simple_http_aio_infer_client.py"]
    verified = ["-v", "-u", "localhost", "--ssl", "--key-file", str(certs / "client.key"),
                "--cert-file", str(certs / "client.crt"), "--ca-certs", str(certs / "ca.crt")]
    insecure = ["-v", "-u", "localhost", "--ssl", "--insecure"]
    plain = ["-v", "-u", "localhost"]
    wrong_key = ["-v", "-u", "localhost", "--ssl", "--key-file", str(certs / "client2.key"),
                 "--cert-file", str(certs / "client.crt"), "--ca-certs", str(certs / "ca.crt")]

    def must_fail(rc, text):
        return rc != 0, f"rc={rc}: the client was served"

    def cases(row, passing, failing):
        for name in clients:
            for args in passing:
                rows[row] += c.script(name, args)
        for name in clients:
            for args in failing:
                rows[row] += [(f"{label} (must fail)", st, msg)
                              for label, st, msg in c.script(name, args, check=must_fail)]

    row = "L0_https test.sh (Python clients)"
    tls = [f"--http-server-cert={certs / 'server.crt'}",
           f"--http-server-key={certs / 'server.key'}"]
    with Server(c.target, c.out, ["simple"], sidecar_https=["--http-use-ssl=1"] + tls):
        nx = nginx_https(c.out, certs) if c.target == "triton" else None
        try:
            cases(row, [verified, insecure], [plain, wrong_key])
        finally:
            if nx:
                nx.terminate()
                nx.wait()
    rows[row] += skipped("simple_http_infer_client (C++)", "the C++ examples are not built here")
    if c.target == "sidecar":
        mutual = ["--http-use-ssl-mutual=1", f"--http-root-cert={certs / 'ca.crt'}"] + tls
        row = "L0_https mutual TLS (sidecar only, beyond test.sh)"
        client = (str(certs / "client.crt"), str(certs / "client.key"))
        with Server(c.target, c.out, ["simple"], sidecar_https=mutual, https_client=client):
            cases(row, [verified], [insecure])


def l0_simple_nodejs_client(c: Ctx, rows):
    """client.js (grpc_generated/javascript: @grpc/grpc-js with the protos loaded at run time)."""
    js = lang_clients() / "javascript"
    with Server(c.target, c.out, ["simple"]):
        rows["L0_simple_nodejs_client client.js"] += c.judge(
            "client.js", ["node", "client.js"], js,
            check=counted_line("Checking Inference Output"))


def l0_client_java(c: Ctx, rows):
    """test.sh's three clients: the gRPC examples in Java and Scala (grpc_generated/java, run
    with Maven against localhost 8001) and the Java HTTP client's SimpleInferClient; besides
    them, the HTTP client's two other examples (Triton's SDK ships them; no test.sh runs them
    against a server): MemoryGrowthTest (100 inferences of custom_identity_int32, each on a new
    client) and SimpleInferPerf (8 threads × 1000 inferences of simple, JSON and binary)."""
    grpc_dir = lang_clients() / "java-grpc" / "examples"
    jars = lang_clients() / "java-http" / "target" / "examples"
    mvn = ["mvn", "-q", "-B", "exec:java", "-Dexec.args=localhost 8001"]
    with Server(c.target, c.out, ["simple", "custom_identity_int32"]):
        row = "L0_client_java example clients (gRPC Java and Scala, HTTP Java)"
        rows[row] += c.judge("SimpleJavaClient (gRPC)",
                             mvn + ["-Dexec.mainClass=clients.SimpleJavaClient"], grpc_dir)
        rows[row] += c.judge("SimpleClient (gRPC, Scala)",
                             mvn + ["-Dexec.mainClass=clients.SimpleClient"], grpc_dir)
        rows[row] += c.judge("SimpleInferClient.jar (HTTP)",
                             ["java", "-jar", str(jars / "SimpleInferClient.jar")], jars)
        extra = "L0_client_java the HTTP client's other examples (no test.sh)"
        rows[extra] += c.judge("MemoryGrowthTest.jar",
                               ["java", "-jar", str(jars / "MemoryGrowthTest.jar")], jars)

        def all_threads_done(rc, text):
            done = sum(1 for l in text.splitlines() if "[TOTAL]" in l)
            return rc == 0 and done == 8 and "Exception" not in text, f"rc={rc}, {done}/8 threads done"

        rows[extra] += c.judge("SimpleInferPerf.jar",
                               ["java", "-jar", str(jars / "SimpleInferPerf.jar")], jars,
                               check=all_threads_done)


# L0_batcher's test lists, as its test.sh names them.
BATCHER_NO_DELAY = ["test_static_batch_preferred", "test_static_batch_lt_any_preferred",
                    "test_static_batch_not_preferred", "test_static_batch_gt_max_preferred",
                    "test_multi_batch_not_preferred", "test_multi_batch_gt_max_preferred",
                    "test_multi_batch_sum_gt_max_preferred", "test_multi_same_output0",
                    "test_multi_same_output1", "test_multi_different_outputs",
                    "test_multi_different_output_order"]
# test -> the TRITONSERVER_DELAY_SCHEDULER test.sh exports for it.
BATCHER_DELAY = {"test_multi_batch_delayed_sum_gt_max_preferred": 2,
                 "test_multi_batch_use_biggest_preferred": 6,
                 "test_multi_batch_use_best_preferred": 3,
                 "test_multi_batch_delayed_use_max_batch": 3}
BATCHER_DIFFERENT_SHAPE = ["test_multi_batch_not_preferred_different_shape",
                           "test_multi_batch_preferred_different_shape",
                           "test_multi_batch_different_shape_allow_ragged",
                           "test_multi_batch_different_shape"]
BATCHER_PREFERRED_ONLY = {"test_preferred_batch_only_aligned": 4,
                          "test_preferred_batch_only_unaligned": 5,
                          "test_preferred_batch_only_use_biggest_preferred": 7,
                          "test_preferred_batch_only_use_no_preferred_size": 3}
BATCHER_MAX_QUEUE_DELAY = ["test_max_queue_delay_only_default",
                           "test_max_queue_delay_only_non_default"]


def l0_batcher(c: Ctx, rows):
    """L0_batcher's test.sh with its python trial only (`BACKENDS=python`): its other trials'
    models (ONNX, TensorRT, LibTorch, TensorFlow) come from Triton's private QA repository. The
    models are python-backend models with the contracts of test.sh's (batcher_models.py); the
    add/sub model runs Triton's own qa/python_models/add_sub/model.py, as test.sh's does.
    Every test runs on a server of its own, as in test.sh (the statistics must start at zero),
    in test.sh's order, with test.sh's TRITONSERVER_DELAY_SCHEDULER for the server and the test.

    Triton serves the models with their `dynamic_batching`. The sidecar serves them from a
    Triton behind it (8100-8102) whose models have none: the sidecar batches, with the same
    `dynamic_batching` as its `backend.models[].config`, and sends that Triton one request per
    batch. The statistics the tests read are the sidecar's. The Triton behind it gets neither
    TRITONSERVER_DELAY_SCHEDULER (it has no dynamic batcher for it to delay) nor the step's
    server flags."""
    import batcher_models as bm

    mod = "L0_batcher"
    add_sub_dir = c.qa / "python_models" / "add_sub"
    sidecar = c.target == "sidecar"
    durations = c.out / "durations.tsv"

    def served(repo, env=None, both_args=()):
        root = c.out / f"models-{Server.count + 1}"
        dirs = repo.write(root, for_sidecar=sidecar)
        return Server(c.target, c.out, list(dirs), env=env, triton_override=dirs,
                      both_args=both_args, upstream=sidecar,
                      sidecar_config=bm.sidecar_yaml(repo, UPSTREAM_GRPC))

    def timed(row, label, run):
        t0 = time.time()
        cases = run()
        took = time.time() - t0
        with durations.open("a") as f:
            for case, status, _ in cases:
                f.write(f"{row}\t{case}\t{status}\t{took:.1f}\n")
        log(f"{c.target}: {label}: {', '.join(s for _, s, _ in cases)} in {took:.1f} s")
        rows[row] += cases

    def test(row, repo, name, kind="", delay=None, file="batcher_test.py", both_args=(),
             tag=None):
        """One test on a server of its own; its case is named with test.sh's settings."""
        env = {"BACKENDS": "python"}
        server_env = {}
        tags = [kind] if kind else []
        if kind:
            env["BATCHER_TYPE"] = kind
        if tag:
            tags.append(tag)
        if delay is not None:
            server_env = {"TRITONSERVER_DELAY_SCHEDULER": str(delay)}
            env.update(server_env)
            tags.append(f"TRITONSERVER_DELAY_SCHEDULER={delay}")
        suffix = f" [{', '.join(tags)}]" if tags else ""
        names = [f"BatcherTest.{name}"] if name else []
        try:
            with served(repo, server_env, both_args):
                timed(row, f"{name or file}{suffix}", lambda: [
                    (f"{i}{suffix}", s, m) for i, s, m in c.unittest(mod, file, names, env=env)])
        except RuntimeError as e:  # a server that did not start
            rows[row].append((f"{name or file}{suffix}", "fail", str(e)[:300]))

    for kind in ("FIXED", "VARIABLE"):
        repo = bm.fixed_models(add_sub_dir) if kind == "FIXED" else bm.var_models(add_sub_dir)
        row = f"{mod} batcher_test.py, {'fixed' if kind == 'FIXED' else 'variable'}-size models"
        for name in BATCHER_NO_DELAY:
            test(row, repo, name, kind)
        for name, delay in BATCHER_DELAY.items():
            test(row, repo, name, kind, delay)
    row = f"{mod} batcher_test.py, variable-size models, different shapes"
    for name in BATCHER_DIFFERENT_SHAPE:
        test(row, bm.var_models(add_sub_dir), name, "VARIABLE")
    test(row, bm.var_models(add_sub_dir), "test_multi_batch_delayed_preferred_different_shape",
         "VARIABLE", 4)
    row = f"{mod} batcher_test.py, preferred sizes and no delay"
    for name, delay in BATCHER_PREFERRED_ONLY.items():
        test(row, bm.preferred_batch_only_models(add_sub_dir), name, "FIXED", delay)
    row = f"{mod} batcher_test.py, max_queue_delay only"
    for name in BATCHER_MAX_QUEUE_DELAY:
        test(row, bm.max_queue_delay_models(), name, "FIXED")

    # preserve_ordering: the test, then verify_timestamps.py over the trace file the server
    # wrote (at its stop), without and with the option.
    row = f"{mod} test_multi_batch_preserve_ordering + verify_timestamps.py"
    for preserve, trace in ((False, "not_preserve.log"), (True, "preserve.log")):
        (c.out / trace).unlink(missing_ok=True)
        test(row, bm.preserve_ordering_models(preserve), "test_multi_batch_preserve_ordering",
             "FIXED", 12, tag=f"preserve_ordering: {str(preserve).lower()}",
             both_args=[f"--trace-file={trace}", "--trace-level=MIN", "--trace-rate=1"])
        args = ["-p", trace] if preserve else [trace]
        label = f"verify_timestamps.py {' '.join(args)}"
        timed(row, label, lambda: c.judge(label, [c.py, str(c.qa / mod / "verify_timestamps.py"),
                                                  *args], c.out))

    test(f"{mod} queue_timeout_test.py", bm.queue_timeout_models(), None,
         file="queue_timeout_test.py", both_args=["--log-verbose=2"])


MODULES = {
    "L0_http": l0_http,
    "L0_shared_memory": l0_shared_memory,
    "L0_grpc": l0_grpc,
    "L0_client_timeout": l0_client_timeout,
    "L0_decoupled": l0_decoupled,
    "L0_trace": l0_trace,
    "L0_logging": l0_logging,
    "L0_secure_grpc": l0_secure_grpc,
    "L0_https": l0_https,
    "L0_simple_go_client": l0_simple_go_client,
    "L0_simple_nodejs_client": l0_simple_nodejs_client,
    "L0_client_java": l0_client_java,
    "L0_batcher": l0_batcher,
}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--unittest":
        return unittest_main(sys.argv[2:])
    out_root = Path(os.environ["QA_OUT"])
    targets = os.environ.get("QA_TARGETS", "sidecar,triton").split(",")
    wanted = [m for m in os.environ.get("QA_MODULES", ",".join(MODULES)).split(",") if m]
    results_path = out_root / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    for target in targets:
        for module in wanted:
            out = out_root / target / module
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            rows: dict = collections.defaultdict(list)
            for row, by_target in list(results.items()):  # this module's last results
                if row.startswith(module + " "):
                    by_target.pop(target, None)
                    if not by_target:
                        del results[row]
            log(f"{target}: {module}")
            t0 = time.time()
            try:
                MODULES[module](Ctx(target, out), rows)
            except Exception as e:  # a server that did not start, nginx missing, …
                rows[f"{module} (harness)"].append(("harness", "fail", repr(e)[:400]))
            for row, cases in rows.items():
                results.setdefault(row, {})[target] = cases
            log(f"{target}: {module} done in {time.time() - t0:.0f} s")
            results_path.write_text(json.dumps(results, indent=1))
    print_table(results)
    return 0


def print_table(results: dict) -> None:
    targets = sorted({t for r in results.values() for t in r})
    print("| module / test | " + " | ".join(f"{t}: run / pass / fail / skip" for t in targets) + " |")
    print("|---|" + "---|" * len(targets))
    for row, by_target in results.items():
        cells = []
        for t in targets:
            cases = by_target.get(t)
            if cases is None:
                cells.append("—")
                continue
            n = {s: sum(1 for _, st, _ in cases if st == s) for s in ("pass", "fail", "skip")}
            cells.append(f"{n['pass'] + n['fail']} / {n['pass']} / {n['fail']} / {n['skip']}")
        print(f"| {row} | " + " | ".join(cells) + " |")
    print()
    for row, by_target in results.items():
        for t in targets:
            for case, status, msg in by_target.get(t, []):
                if status != "pass":
                    print(f"{t} {status}: {row}: {case}: {msg}")


if __name__ == "__main__":
    sys.exit(main())
