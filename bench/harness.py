#!/usr/bin/env python3
"""Side-by-side benchmark: the sidecar with its built-in models, Triton, and Triton behind the
sidecar, on the same model contracts, driven by the same clients (perf_analyzer for HTTP binary,
gRPC and system shared memory; wrk posting a fixed JSON body for HTTP JSON), alternating the
systems within one run. Also measures the machine's own limits (memory copy bandwidth, loopback
TCP throughput on one stream) in the same run.

Writes, into --out: results.csv (every measurement), summary.csv (medians per row), summary.md (the
table with ratios), throughput.png (the chart), machine.json (limits, CPU, versions). On the JSON
rows (exactly, wrk counts every request) and the perf_analyzer rows (approximately, from its rate),
it also records the CPU each call cost the system, the model server behind a front, and the client
(a table of its own in summary.md).

Run it through bench/run, which installs and builds what it needs and sets:
  INFERGATE_SIDECAR_BIN PERF_ANALYZER WRK NGINX_BIN NOOP_SERVER TRITON_BIN TRITON_HOME
  TRITON_LD_PATH TRITON_VENV (and KSERVE_PY, MLSERVER_PY, MLSERVER_BIN for those systems)
"""

from __future__ import annotations

import argparse
import csv
import getpass
import json
import multiprocessing
import os
import platform
import random
import re
import resource
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, limit: float = 180.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {limit:.0f} s")


@dataclass
class System:
    name: str
    http: str
    grpc: str
    procs: list = field(default_factory=list)
    # Rows this system can answer, when not every row: (case name, protocol) pairs.
    only: set | None = None
    # perf_analyzer flags it needs (the fixed answers name the model version, see start_fixed).
    pa_extra: list = field(default_factory=list)
    # For a front: the model server's processes behind it. Their CPU is counted apart from the
    # front's; whichever system owns them (in `procs`) stops them.
    upstream: list = field(default_factory=list)

    def own_procs(self) -> list:
        return [p for p in self.procs if p not in self.upstream]

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_by_group() -> dict[int, tuple[int, int]]:
    """User and system CPU time used so far (clock ticks) per process group, summed over every
    process in it: spawn starts each system in a session of its own, so a Triton's python stubs
    and a sidecar's threads are counted with the process that leads the group."""
    groups: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, ..., utime (14th field), stime (15th).
        fields = stat.rsplit(")", 1)[1].split()
        group = int(fields[2])
        user, kernel = groups.get(group, (0, 0))
        groups[group] = (user + int(fields[11]), kernel + int(fields[12]))
    return groups


def cpu_seconds(groups: dict[int, tuple[int, int]], procs: list) -> tuple[float, float]:
    """User and system CPU seconds of the process groups these processes lead, from a
    cpu_by_group snapshot."""
    ticks = [groups.get(pid, (0, 0)) for pid in {p.pid for p in procs}]
    return (sum(u for u, _ in ticks) / _CLOCK_TICKS, sum(k for _, k in ticks) / _CLOCK_TICKS)


def machine_ticks() -> list[int]:
    """The machine's CPU time so far, from /proc/stat: user, nice, system, idle, iowait, irq,
    softirq, steal (in clock ticks, all cores)."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:9]]


@dataclass
class CpuSnapshot:
    """CPU time so far: per process group, of this harness's children (the client), and of the
    machine, to be subtracted from a later snapshot."""
    groups: dict
    children: resource.struct_rusage
    machine: list

    @staticmethod
    def take() -> "CpuSnapshot":
        return CpuSnapshot(cpu_by_group(), resource.getrusage(resource.RUSAGE_CHILDREN),
                           machine_ticks())


def cpu_per_call(system: System, before: CpuSnapshot, after: CpuSnapshot, calls: float) -> dict:
    """CPU per call, in µs, between two snapshots: the system's own processes (a front's without
    the model server behind it), that model server, and the client; and what the machine's cores
    did (idle and interrupt shares)."""
    if calls <= 0 or not system.procs:
        return {}
    per_call = 1e6 / calls
    server0, server1 = (cpu_seconds(before.groups, system.own_procs()),
                        cpu_seconds(after.groups, system.own_procs()))
    upstream0, upstream1 = (cpu_seconds(before.groups, system.upstream),
                            cpu_seconds(after.groups, system.upstream))
    c0, c1 = before.children, after.children
    machine = [b - a for a, b in zip(before.machine, after.machine)]
    # Interrupt time (the loopback's packet delivery, mostly) is nobody's in /proc/PID/stat.
    return {"machine_idle_pct": 100 * (machine[3] + machine[4]) / max(1, sum(machine)),
            "machine_irq_pct": 100 * (machine[5] + machine[6]) / max(1, sum(machine)),
            "server_cpu_us": (sum(server1) - sum(server0)) * per_call,
            "server_sys_us": (server1[1] - server0[1]) * per_call,
            "upstream_cpu_us": ((sum(upstream1) - sum(upstream0)) * per_call
                                if system.upstream else None),
            "client_cpu_us": (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) * per_call}


def spawn(args: list[str], log: Path, env: dict | None = None, cwd: Path | None = None):
    return subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)


def start_sidecar(name: str, work: Path, extra: list[str]) -> System:
    http, grpc = free_port(), free_port()
    proc = spawn([os.environ["INFERGATE_SIDECAR_BIN"], "--host", "127.0.0.1",
                  "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", "0",
                  "--admin-port", "0", "--allow-client-shm", "--log-level", "warn", *extra],
                 work / f"{name}.log")
    system = System(name, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    return system


# The staging pool of the fronts that have one: room for 8 requests of 4 MiB in and out at once.
POOL_ARGS = ["--staging-shm-bytes", str(256 << 20)]


def deployed_front_args(triton: System) -> list[str]:
    """The sidecar in front of `triton` as the operator deploys it (sidecar→triton+pool+rest):
    gRPC, the staging pool, and calls with at most 64 KiB of tensor data over REST."""
    return ["--upstream", f"grpc://{triton.grpc}", *POOL_ARGS,
            "--upstream-rest", f"http://{triton.http}"]


def start_triton(work: Path) -> System:
    work.mkdir(parents=True, exist_ok=True)
    repo = work / "models"
    subprocess.run([sys.executable, str(REPO / "tests/upstream/make_triton_repo.py"), str(repo)],
                   check=True, stdout=subprocess.DEVNULL)
    http, grpc = free_port(), free_port()
    home = Path(os.environ["TRITON_HOME"])
    env = {**os.environ, "PATH": f"{os.environ['TRITON_VENV']}/bin:{os.environ['PATH']}",
           "LD_LIBRARY_PATH": os.environ["TRITON_LD_PATH"]}
    proc = spawn([os.environ["TRITON_BIN"], f"--model-repository={repo}",
                  f"--backend-directory={home / 'backends'}", f"--cache-directory={home / 'caches'}",
                  "--http-address=127.0.0.1", f"--http-port={http}",
                  "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
                  "--allow-metrics=false", "--allow-gpu-metrics=false",
                  "--pinned-memory-pool-byte-size=0", "--exit-timeout-secs=5", "--log-warning=false"],
                 work / "triton.log", env=env, cwd=work)
    system = System("triton", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    return system


def start_kserve(work: Path) -> tuple[System, Path]:
    """KServe's ModelServer with the contracts' models (tests/upstream/kserve/server.py), and the
    sidecar configuration that fronts it (every model listed, sequences and classification run
    by the sidecar: the ModelServer has neither)."""
    http, grpc = free_port(), free_port()
    kpy = os.environ["KSERVE_PY"]
    home = work / "kserve"
    home.mkdir(exist_ok=True)
    proc = spawn([kpy, str(REPO / "tests/upstream/kserve/server.py"), "--http-port", str(http),
                  "--grpc-port", str(grpc)], work / "kserve.log", cwd=home)
    system = System("kserve", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    config = work / "sidecar-kserve.yaml"
    config.write_bytes(subprocess.run(
        [kpy, str(REPO / "tests/upstream/kserve/make_config.py"), "--grpc-port", str(grpc),
         "--workdir", str(home)], check=True, capture_output=True).stdout)
    return system, config


def start_mlserver(work: Path) -> tuple[System, Path]:
    """MLServer with the contracts' models (tests/upstream/mlserver/make_repo.py), and the
    sidecar configuration that fronts it."""
    http, grpc = free_port(), free_port()
    home = work / "mlserver"
    home.mkdir(exist_ok=True)
    config = work / "sidecar-mlserver.yaml"
    subprocess.run([os.environ["MLSERVER_PY"], str(REPO / "tests/upstream/mlserver/make_repo.py"),
                    str(home / "models"), "--http-port", str(http), "--grpc-port", str(grpc),
                    "--sidecar-config", str(config)], check=True, stdout=subprocess.DEVNULL)
    # Run from its own directory: MLServer writes working files (.metrics, .envs) there.
    proc = spawn([os.environ["MLSERVER_BIN"], "start", str(home / "models")], work / "mlserver.log",
                 cwd=home)
    system = System("mlserver", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    return system, config


FIXED_ROWS = {("identity_fp32[16]", "http"), ("identity_fp32[16]", "json"),
              ("identity_fp32[1M]", "http")}
# JSON only for the small case: its large answer is recorded in binary data.
NOOP_ROWS = {(case, protocol) for case in ("identity_fp32[16]", "identity_fp32[1M]")
             for protocol in ("http", "grpc")} | {("identity_fp32[16]", "json")}
LARGE = 1048576  # elements of the large identity_fp32 case
# glibc's malloc thresholds the sidecar starts itself with (sidecar/src/allocator.rs).
SIDECAR_MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456"


def write_nginx_config(home: Path, http_block: str) -> Path:
    """An nginx configuration in `home` for one run: the harness's common settings (no access
    log, bodies up to 64 MiB, connections kept for the whole run) and `http_block`, the
    servers and upstreams, inside `http`. Returns the file."""
    # Started by root, nginx's workers would run as nobody, who cannot read the work directory.
    user = f"user {getpass.getuser()};" if os.geteuid() == 0 else ""
    path = home / "nginx.conf"
    path.write_text(f"""
{user}
worker_processes auto;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {home}/body;
  client_max_body_size 64m;
  keepalive_requests 100000000;
  keepalive_timeout 600s;
{http_block}
}}
""")
    return path


def start_nginx(config: Path, log: Path) -> subprocess.Popen:
    # Not `NGINX`: nginx reads a variable of that name as listening sockets to inherit.
    return spawn([os.environ["NGINX_BIN"], "-p", str(config.parent), "-c", str(config),
                  "-g", "daemon off;"], log)


def start_fixed(work: Path) -> tuple[System, System]:
    """The round-trip ceiling: nginx answering every request for identity_fp32 with a constant —
    the sidecar's own answers (server and model metadata, configuration, statistics, and the
    response to 16 zeros), captured from a sidecar started for the purpose — and the cheapest
    proxy hop there is, nginx proxying to that over kept-alive connections. No server answers
    faster than the first; no process in front of a model server adds less than the second.
    identity_fp32[16] over HTTP and JSON, identity_fp32[1M] over HTTP (binary data)."""
    probe = start_sidecar("sidecar-for-fixed-answers", work, [])
    answers = {}
    try:
        base = f"http://{probe.http}/v2"
        for key, path in (("server", ""), ("metadata", "/models/identity_fp32"),
                          ("config", "/models/identity_fp32/config"),
                          ("stats", "/models/identity_fp32/stats")):
            with urllib.request.urlopen(base + path, timeout=10) as r:
                answers[key] = r.read().decode()
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32",
                                       "data": [0.0] * 16}]}).encode()
        request = urllib.request.Request(base + "/models/identity_fp32/infer", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            answers["infer"] = r.read().decode()
    finally:
        probe.stop()
    if any("'" in a for a in answers.values()):
        raise RuntimeError("an answer holds a quote; nginx cannot return it inline")
    fixed_port, proxy_port = free_port(), free_port()
    home = work / "nginx"
    home.mkdir(exist_ok=True)
    # The large case's answer: binary tensor data, as the sidecar frames it (JSON header, then
    # the output's bytes), served as a file for requests with a body of a megabyte or more.
    header = json.dumps({"model_name": "identity_fp32", "model_version": "1", "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [LARGE],
         "parameters": {"binary_data_size": 4 * LARGE}}]}, separators=(",", ":")).encode()
    (home / "large").mkdir(exist_ok=True)
    (home / "large" / "infer").write_bytes(header + bytes(4 * LARGE))
    model = "^/v2/models/identity_fp32(/versions/1)?"
    config = write_nginx_config(home, f"""
  client_body_buffer_size 8m;
  default_type application/json;
  server {{
    listen 127.0.0.1:{fixed_port};
    location = /v2 {{ return 200 '{answers["server"]}'; }}
    location ~ ^/v2/health/(ready|live)$ {{ return 200 ''; }}
    location ~ {model}$ {{ return 200 '{answers["metadata"]}'; }}
    location ~ {model}/ready$ {{ return 200 ''; }}
    location ~ {model}/config$ {{ return 200 '{answers["config"]}'; }}
    location ~ {model}/stats$ {{ return 200 '{answers["stats"]}'; }}
    location ~ {model}/infer$ {{
      # An error page is how nginx answers a POST with a file (the redirect makes it a GET).
      error_page 405 =200 /large/infer;
      if ($content_length ~ "^[0-9]{{7,}}$") {{ return 405; }}
      return 200 '{answers["infer"]}';
    }}
    location = /large/infer {{
      internal;
      root {home};
      default_type application/octet-stream;
      add_header Inference-Header-Content-Length {len(header)};
    }}
    location / {{ return 404 '{{"error":"not found"}}'; }}
  }}
  upstream fixed {{ server 127.0.0.1:{fixed_port}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{proxy_port};
    location / {{
      proxy_pass http://fixed;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}""")
    proc = start_nginx(config, work / "nginx.log")
    # Constant statistics do not tell perf_analyzer which version ran: `-x 1` names it.
    fixed = System("fixed", f"127.0.0.1:{fixed_port}", "", [proc], FIXED_ROWS, ["-x", "1"])
    proxy = System("proxy→fixed", f"127.0.0.1:{proxy_port}", "", [], FIXED_ROWS, ["-x", "1"])
    wait_ready(f"http://{fixed.http}/v2/health/ready", proc)
    wait_ready(f"http://{proxy.http}/v2/health/ready", proc)
    return fixed, proxy


def start_nginx_front(work: Path, upstream: System) -> System:
    """The cheapest proxy there is in front of a model server: nginx passing REST (HTTP/1.1) and
    gRPC (HTTP/2) through to it over kept-alive connections, reading nothing of the requests but
    their headers. A target for "through the sidecar versus directly" that nginx misses in the
    same run is out of reach for any front on this machine that also reads what it passes on."""
    home = work / "nginx-front"
    home.mkdir(parents=True, exist_ok=True)
    http, grpc = free_port(), free_port()
    config = write_nginx_config(home, f"""
  upstream rest {{ server {upstream.http}; keepalive 32; keepalive_requests 100000000; }}
  upstream grpc_upstream {{ server {upstream.grpc}; keepalive 32; keepalive_requests 100000000; }}
  server {{
    listen 127.0.0.1:{http};
    location / {{
      proxy_pass http://rest;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
  server {{
    listen 127.0.0.1:{grpc} http2;
    location / {{ grpc_pass grpc://grpc_upstream; }}
  }}""")
    proc = start_nginx(config, work / "nginx-front.log")
    system = System(f"nginx→{upstream.name}", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    wait_grpc_ready(system.grpc, proc)
    return system


def start_relay_front(work: Path, upstream: System) -> System:
    """The floor of any hop in front of a model server: bench/relay copying bytes between each
    client connection and one of its own to the upstream (REST and gRPC alike), parsing nothing.
    A front that also routes or checks calls costs at least this; a "through a front versus
    directly" target this relay misses in the same run is out of reach for any front here."""
    http, grpc = free_port(), free_port()
    proc = spawn([os.environ["RELAY"], f"{http}={upstream.http}", f"{grpc}={upstream.grpc}"],
                 work / "relay.log")
    system = System(f"relay→{upstream.name}", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    wait_grpc_ready(system.grpc, proc)
    return system


def start_h2relay_front(work: Path, upstream: System, server: str = "hyper") -> System:
    """The floor of a gRPC front on the sidecar's own stack: bench/h2-relay terminates HTTP/2 on
    both sides (hyper's server with the sidecar's settings, one h2 connection to the upstream)
    and passes each call's message and trailers through, parsing none. What the sidecar costs
    beyond it is its own work on a call (decoding, checks, routing, translation); what it costs
    beyond bench/relay is HTTP/2 itself. gRPC only: its REST port is bench/relay's. With
    server="h2" the client side is served by the h2 crate without hyper (system h2relay/h2)."""
    http, grpc = free_port(), free_port()
    name = "h2relay" if server == "hyper" else f"h2relay/{server}"
    tag = name.replace("/", "-")
    rest = spawn([os.environ["RELAY"], f"{http}={upstream.http}"], work / f"{tag}-rest.log")
    proc = spawn([os.environ["H2_RELAY"], "--server", server, f"{grpc}={upstream.grpc}"],
                 work / f"{tag}.log")
    system = System(f"{name}→{upstream.name}", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}",
                    [proc, rest])
    wait_ready(f"http://{system.http}/v2/health/ready", rest)
    wait_grpc_ready(system.grpc, proc)
    return system


def start_noop(work: Path) -> System:
    """The ceiling for every protocol and size: bench/noop-server (hyper; HTTP/1.1, and HTTP/2
    with the sidecar's windows for gRPC) reads each request to its end and returns the sidecar's
    own answer for it, recorded from a sidecar started for the purpose. Unlike nginx it also
    answers gRPC, and keeps the large answer in memory."""
    answers = work / "noop-answers"
    probe = start_sidecar("sidecar-for-noop-answers", work, [])
    try:
        record_http_answers(probe.http, answers / "http")
        record_grpc_answers(probe.grpc, answers / "grpc")
    finally:
        probe.stop()
    http, grpc = free_port(), free_port()
    # With the thresholds the sidecar raises for itself (sidecar/src/allocator.rs): the same
    # large buffers come and go in this server, and it would otherwise fault them in again.
    env = {**os.environ, "GLIBC_TUNABLES": SIDECAR_MALLOC_TUNABLES}
    proc = spawn([os.environ["NOOP_SERVER"], str(http), str(grpc), str(answers)],
                 work / "noop-server.log", env=env)
    # Constant statistics do not tell perf_analyzer which version ran: `-x 1` names it.
    system = System("noop", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", [proc], NOOP_ROWS, ["-x", "1"])
    wait_ready(f"http://{system.http}/v2/health/ready", proc)
    wait_grpc_ready(system.grpc, proc)
    return system


# Systems that answer with recorded or constant messages, whatever was asked.
RECORDED_ANSWERS = ("noop", "fixed", "proxy→fixed")


def check_identity(system: System):
    """One JSON call of identity_fp32 whose answer must equal its input. perf_analyzer does not
    read the answers' bytes, so a server that answers wrongly (a Triton whose python backend
    runs with a numpy it was not built for, say) would be measured as if it worked."""
    values = [1.5, -2.0, 3.25, 1e6]
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "FP32",
                                   "data": values}]}).encode()
    request = urllib.request.Request(f"http://{system.http}/v2/models/identity_fp32/infer", body,
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{system.name}: identity_fp32 answered {e.code}: "
                           f"{e.read()[:300].decode(errors='replace')}") from None
    outputs = answer.get("outputs") or [{}]
    if outputs[0].get("data") != values:
        raise RuntimeError(f"{system.name}: identity_fp32 answered {json.dumps(answer)[:300]}, "
                           f"not its input {values}")


def record_http_answers(http_addr: str, into: Path):
    """The sidecar's REST answers for identity_fp32, for bench/noop-server."""
    into.mkdir(parents=True, exist_ok=True)
    base = f"http://{http_addr}/v2"
    for name, path in (("server", ""), ("metadata", "/models/identity_fp32"),
                       ("config", "/models/identity_fp32/config"),
                       ("stats", "/models/identity_fp32/stats")):
        with urllib.request.urlopen(base + path, timeout=10) as r:
            (into / name).write_bytes(r.read())
    small = json.dumps({"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32",
                                    "data": [0.0] * 16}]}).encode()
    request = urllib.request.Request(base + "/models/identity_fp32/infer", data=small,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        (into / "infer").write_bytes(r.read())
    # The large answer in binary tensor data, as perf_analyzer asks for it.
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [LARGE], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4 * LARGE}}],
                         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                        separators=(",", ":")).encode()
    request = urllib.request.Request(base + "/models/identity_fp32/infer",
                                     data=header + bytes(4 * LARGE),
                                     headers={"Content-Type": "application/octet-stream",
                                              "Inference-Header-Content-Length": str(len(header))})
    with urllib.request.urlopen(request, timeout=30) as r:
        (into / "infer.large").write_bytes(r.read())
        (into / "infer.large.header-length").write_text(r.headers["Inference-Header-Content-Length"])


def record_grpc_answers(grpc_addr: str, into: Path):
    """The sidecar's gRPC answers for identity_fp32, one serialized message per method, for
    bench/noop-server to return as they are."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc

    into.mkdir(parents=True, exist_ok=True)
    limit = 64 << 20
    channel = grpc.insecure_channel(grpc_addr, options=[("grpc.max_receive_message_length", limit),
                                                        ("grpc.max_send_message_length", limit)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    model = "identity_fp32"

    def infer(elements: int):
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[elements])
        request.raw_input_contents.append(bytes(4 * elements))
        return stub.ModelInfer(request, timeout=30)

    calls = {
        "ServerLive": lambda: stub.ServerLive(pb.ServerLiveRequest(), timeout=10),
        "ServerReady": lambda: stub.ServerReady(pb.ServerReadyRequest(), timeout=10),
        "ServerMetadata": lambda: stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=10),
        "ModelReady": lambda: stub.ModelReady(pb.ModelReadyRequest(name=model), timeout=10),
        "ModelMetadata": lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name=model), timeout=10),
        "ModelConfig": lambda: stub.ModelConfig(pb.ModelConfigRequest(name=model), timeout=10),
        "ModelStatistics": lambda: stub.ModelStatistics(pb.ModelStatisticsRequest(name=model),
                                                        timeout=10),
        "ModelInfer": lambda: infer(16),
        "ModelInfer.large": lambda: infer(LARGE),
    }
    for name, call in calls.items():
        (into / name).write_bytes(call().SerializeToString())
    channel.close()


def wait_grpc_ready(grpc_addr: str, proc: subprocess.Popen, limit: float = 30.0):
    import grpc
    from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc

    deadline = time.monotonic() + limit
    with grpc.insecure_channel(grpc_addr) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{grpc_addr}: the server exited with {proc.returncode}")
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                    return
            except grpc.RpcError:
                time.sleep(0.2)
    raise RuntimeError(f"{grpc_addr} not ready after {limit:.0f} s")


# Model servers the harness can stand up; each row's ratios are taken against each of them.
UPSTREAMS = ("triton", "kserve", "mlserver")


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    name: str
    model: str
    inputs: tuple  # (name, datatype, shape)
    output_bytes: int  # largest output, for --output-shared-memory-size
    # JSON bodies: "halves" (0.0, 0.5, 1.0, …: short exact decimals) or "random" (uniform in
    # [-10, 10) with 7 significant digits, as FP32 data printed by a client often looks).
    json_values: str = "halves"

    def pa_args(self) -> list[str]:
        args = ["-m", self.model]
        if self.model.startswith("identity"):
            for name, _, shape in self.inputs:
                args += ["--shape", f"{name}:{','.join(map(str, shape))}"]
        return args

    def json_body(self) -> bytes:
        inputs = []
        for i, (name, datatype, shape) in enumerate(self.inputs):
            count = 1
            for d in shape:
                count *= d
            if datatype == "FP32" and self.json_values == "random":
                rng = random.Random(i)
                data = [float(f"{rng.uniform(-10, 10):.7g}") for _ in range(count)]
            elif datatype == "FP32":
                data = [round((j % 1000) * 0.5 + i, 1) for j in range(count)]
            else:
                data = [(j + i) % 100 for j in range(count)]
            inputs.append({"name": name, "shape": list(shape), "datatype": datatype, "data": data})
        return json.dumps({"inputs": inputs}, separators=(",", ":")).encode()


CASES = {
    "identity_fp32[16]": Case("identity_fp32[16]", "identity_fp32", (("INPUT0", "FP32", (16,)),), 64),
    "identity_fp32[1M]": Case("identity_fp32[1M]", "identity_fp32",
                              (("INPUT0", "FP32", (1048576,)),), 4 * 1048576),
    # The same tensor; only its JSON body differs (the binary protocols send the same bytes).
    "identity_fp32[1M] random": Case("identity_fp32[1M] random", "identity_fp32",
                                     (("INPUT0", "FP32", (1048576,)),), 4 * 1048576, "random"),
    # CUDA shared memory's large case (--protocols cuda): 64 MiB each way.
    "identity_fp32[16M]": Case("identity_fp32[16M]", "identity_fp32",
                               (("INPUT0", "FP32", (16 * 1048576,)),), 4 * 16 * 1048576),
    "simple": Case("simple", "simple", (("INPUT0", "INT32", (1, 16)), ("INPUT1", "INT32", (1, 16))), 64),
}
PROTOCOLS = ("http", "grpc", "shm", "json")
# Asked for by name only (a GPU and a CUDA-capable server needed): perf_analyzer's inputs and
# outputs in CUDA shared memory, over gRPC.
EXTRA_PROTOCOLS = ("cuda",)


# ----------------------------------------------------------------------------- drivers
# How long one perf_analyzer row may take before it counts as stalled (PA_STALL_S; bench/gpu-machine.sh,
# with short windows and a time-boxed lease, gives it less).
PA_STALL_S = float(os.environ.get("PA_STALL_S", "60"))


def perf_analyzer(system: System, case: Case, protocol: str, concurrency: int, interval_ms: int,
                  work: Path) -> dict:
    out = work / "pa.csv"
    out.unlink(missing_ok=True)
    url, kind = (system.http, "http") if protocol == "http" else (system.grpc, "grpc")
    args = [os.environ["PERF_ANALYZER"], *case.pa_args(), *system.pa_extra, "-u", url, "-i", kind,
            "--concurrency-range", str(concurrency), "--measurement-mode", "time_windows",
            "--measurement-interval", str(interval_ms), "--max-trials", "3",
            "--stability-percentage", "999", "-f", str(out)]
    if protocol in ("shm", "cuda"):
        memory = "system" if protocol == "shm" else "cuda"
        args += ["--shared-memory", memory, "--output-shared-memory-size", str(case.output_bytes)]
    before = CpuSnapshot.take()
    started = time.monotonic()
    try:
        # Three windows take seconds; perf_analyzer 2.45 sometimes stalls for good at
        # concurrency 8 against constant answers (nginx's, and bench/noop-server's on a 16-core
        # machine: both sides waiting with bytes queued). A minute is far more than any row needs.
        result = subprocess.run(args, capture_output=True, text=True, timeout=PA_STALL_S)
    except subprocess.TimeoutExpired:
        return {"throughput": 0.0, "p50_us": None, "p99_us": None,
                "errors": f"perf_analyzer stalled: no result in {PA_STALL_S:.0f} s"}
    elapsed = time.monotonic() - started
    after = CpuSnapshot.take()
    if result.returncode != 0 or not out.exists():
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        return {"throughput": 0.0, "p50_us": None, "p99_us": None, "errors": " | ".join(tail)}
    row = next(csv.DictReader(out.open()))
    throughput = float(row["Inferences/Second"])
    # perf_analyzer does not say how many calls it made in all: its rate over its whole run
    # stands in (its start-up and the last window's drain are counted as calls, so these
    # figures are somewhat high, never low).
    calls = throughput * elapsed
    return {"throughput": throughput, "p50_us": float(row["p50 latency"]),
            "p99_us": float(row["p99 latency"]), "errors": "",
            **cpu_per_call(system, before, after, calls)}


_WRK_LATENCY = re.compile(r"^\s*(50|99)%\s+([\d.]+)(us|ms|s)\s*$")


def wrk_json(system: System, case: Case, concurrency: int, interval_ms: int, work: Path) -> dict:
    body = work / f"{case.name}.json"
    if not body.exists():
        body.write_bytes(case.json_body())
    script = work / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{body}", "rb")\nwrk.body = f:read("*all")\nf:close()\n'
        "function response(status, headers, body)\n"
        '  if status ~= 200 then io.stderr:write("status " .. status .. "\\n") end\nend\n')
    seconds = max(2, round(3 * interval_ms / 1000))
    args = [os.environ["WRK"], "-t", str(min(concurrency, 2)), "-c", str(concurrency),
            "-d", f"{seconds}s", "--timeout", "30s", "--latency", "-s", str(script),
            f"http://{system.http}/v2/models/{case.model}/infer"]
    before = CpuSnapshot.take()
    result = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
    after = CpuSnapshot.take()
    m = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    latency = {}
    for line in result.stdout.splitlines():
        lm = _WRK_LATENCY.match(line)
        if lm:
            scale = {"us": 1, "ms": 1e3, "s": 1e6}[lm.group(3)]
            latency[lm.group(1)] = float(lm.group(2)) * scale
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", result.stdout)
    errors = f"{bad.group(1)} non-2xx" if bad else ""
    if "status" in result.stderr:
        errors = (errors + " " + result.stderr.strip().splitlines()[0]).strip()
    done = re.search(r"(\d+) requests in", result.stdout)
    # Exact counts: wrk reports its requests.
    cpu = cpu_per_call(system, before, after, int(done.group(1))) if done else {}
    return {"throughput": float(m.group(1)) if m and not errors else 0.0,
            "p50_us": latency.get("50"), "p99_us": latency.get("99"), "errors": errors, **cpu}


# ----------------------------------------------------------------------------- machine limits
def memcpy_gbps() -> float:
    import numpy as np

    src = np.ones(64 * 1024 * 1024, dtype=np.float32)  # 256 MiB
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return src.nbytes / best / 1e9


def _tcp_sink(port_queue, total):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port_queue.put(srv.getsockname()[1])
        conn, _ = srv.accept()
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        got = 0
        while got < total:
            n = conn.recv_into(view)
            if n == 0:
                break
            got += n
        conn.sendall(b"k")
        conn.close()


def loopback_tcp_gbps(total: int = 4 << 30) -> float:
    q = multiprocessing.Queue()
    sink = multiprocessing.Process(target=_tcp_sink, args=(q, total))
    sink.start()
    port = q.get(timeout=10)
    chunk = memoryview(bytearray(4 << 20))
    with socket.create_connection(("127.0.0.1", port)) as s:
        t = time.perf_counter()
        sent = 0
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
        s.recv(1)
        elapsed = time.perf_counter() - t
    sink.join()
    return total / elapsed / 1e9


# ----------------------------------------------------------------------------- report
def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# CPU per call, measured on the wrk (JSON) rows: see wrk_json.
CPU_FIELDS = ["server_cpu_us", "server_sys_us", "upstream_cpu_us", "client_cpu_us",
              "machine_idle_pct", "machine_irq_pct"]


def summarise(rows: list[dict]) -> list[dict]:
    keys = []
    for r in rows:
        k = (r["case"], r["protocol"], r["concurrency"], r["system"])
        if k not in keys:
            keys.append(k)
    out = []
    for k in keys:
        group = [r for r in rows if (r["case"], r["protocol"], r["concurrency"], r["system"]) == k]
        ok = [r for r in group if not r["errors"]]
        out.append({"case": k[0], "protocol": k[1], "concurrency": k[2], "system": k[3],
                    "throughput": median_or_none([r["throughput"] for r in ok]) or 0.0,
                    "p50_us": median_or_none([r["p50_us"] for r in ok]),
                    "p99_us": median_or_none([r["p99_us"] for r in ok]),
                    "runs": len(group), "failed_runs": len(group) - len(ok),
                    "errors": "; ".join(sorted({r["errors"] for r in group if r["errors"]})),
                    **{f: median_or_none([r.get(f) for r in ok]) for f in CPU_FIELDS}})
    return out


def fmt_us(v):
    return "—" if v is None else (f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs")


def ratio_pairs(systems: list[str]) -> list[tuple[str, str]]:
    """The (system, baseline) pairs whose throughput ratios the summary reports."""
    ratios = []
    # The built-in sidecar and its variants (--builtin-variant).
    builtins = ["sidecar", *(s for s in systems if s.startswith("sidecar["))]
    for upstream in UPSTREAMS:
        for builtin in builtins:
            if builtin in systems and upstream in systems:
                ratios.append((builtin, upstream))
    for a in ("sidecar", "proxy→fixed"):
        if a in systems and "fixed" in systems:
            ratios.append((a, "fixed"))
    for builtin in builtins:
        if builtin in systems and "noop" in systems:
            ratios.append((builtin, "noop"))
    if "noop" in systems and "triton" in systems:
        ratios.append(("noop", "triton"))
    for upstream in UPSTREAMS:
        variants = [s for s in systems if s.startswith(f"sidecar→{upstream}[")]
        for front in (f"sidecar→{upstream}", f"sidecar→{upstream}+pool", f"sidecar→{upstream}/rest",
                      f"sidecar→{upstream}+pool+rest", *variants, f"nginx→{upstream}",
                      f"relay→{upstream}", f"h2relay→{upstream}",
                      f"h2relay/h2→{upstream}"):
            if front in systems and upstream in systems:
                ratios.append((front, upstream))
    return ratios


def markdown(summary: list[dict], systems: list[str], machine: dict,
             results: list[dict]) -> str:
    lines = [f"Machine: {machine['cpu']} ({machine['cores']} cores); memcpy "
             f"{machine['memcpy_gbps']:.1f} GB/s; loopback TCP (one stream) "
             f"{machine['loopback_tcp_gbps']:.1f} GB/s. Medians of {machine['rounds']} round(s); "
             "throughput in infer/s.", ""]
    head = ["case", "protocol", "conc."]
    for s in systems:
        head += [f"{s} infer/s", f"{s} p50", f"{s} p99"]
    ratios = ratio_pairs(systems)
    head += [f"{a} / {b}" for a, b in ratios]
    # Latency the sidecar adds in front of each model server (difference of p50s).
    added = [(a, b) for a, b in ratios if a.startswith(("sidecar→", "proxy→", "nginx→", "relay→", "h2relay→", "h2relay/"))]
    head += [f"{a} added p50" for a, _ in added]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = {}
    for r in summary:
        rows.setdefault((r["case"], r["protocol"], r["concurrency"]), {})[r["system"]] = r
    for (case, protocol, conc), by_system in rows.items():
        cells = [case, protocol, str(conc)]
        for s in systems:
            r = by_system.get(s)
            if r is None:
                cells += ["—"] * 3
            elif r["failed_runs"] == r["runs"]:
                cells += ["failed", "—", "—"]
            else:
                cells += [f"{r['throughput']:,.0f}", fmt_us(r["p50_us"]), fmt_us(r["p99_us"])]
        for a, b in ratios:
            ra, rb = by_system.get(a), by_system.get(b)
            if ra and rb and rb["throughput"] > 0 and ra["throughput"] > 0:
                cells.append(f"{ra['throughput'] / rb['throughput']:.2f}×")
            else:
                cells.append("—")
        for a, b in added:
            ra, rb = by_system.get(a), by_system.get(b)
            if ra and rb and ra["p50_us"] is not None and rb["p50_us"] is not None:
                delta = ra["p50_us"] - rb["p50_us"]
                cells.append(("+" if delta >= 0 else "−") + fmt_us(abs(delta)))
            else:
                cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    lines += round_ratio_table(results, ratios)
    lines += cpu_table(summary, systems)
    errors = [r for r in summary if r["errors"]]
    if errors:
        lines += ["", "Failed runs:"]
        lines += [f"- {r['system']} {r['case']} {r['protocol']} c={r['concurrency']}: {r['errors']}"
                  for r in errors]
    return "\n".join(lines) + "\n"


def round_ratio_table(rows: list[dict], ratios: list[tuple[str, str]]) -> list[str]:
    """Each ratio taken within each round (the two systems measured back to back), with its
    median and range over the rounds: on a noisy machine the range says how much one run's ratio
    can be trusted, which the ratio of medians above does not."""
    rates: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if not r["errors"] and r["throughput"] > 0:
            key = (r["case"], r["protocol"], r["concurrency"], r["round"])
            rates.setdefault(key, {})[r["system"]] = r["throughput"]
    table: dict[tuple, list[float]] = {}
    for (case, protocol, conc, _), by_system in rates.items():
        for a, b in ratios:
            if a in by_system and b in by_system:
                table.setdefault((case, protocol, conc, a, b), []).append(
                    by_system[a] / by_system[b])
    if not any(len(v) > 1 for v in table.values()):
        return []
    lines = ["", "Ratios within each round (both systems measured back to back): median over the "
             "rounds, lowest and highest.", "",
             "| case | protocol | conc. | ratio | rounds | median | lowest | highest |",
             "|---|---|---|---|---|---|---|---|"]
    for (case, protocol, conc, a, b), values in table.items():
        lines.append(f"| {case} | {protocol} | {conc} | {a} / {b} | {len(values)} | "
                     f"{statistics.median(values):.2f}× | {min(values):.2f}× | "
                     f"{max(values):.2f}× |")
    return lines


def cpu_table(summary: list[dict], systems: list[str]) -> list[str]:
    """CPU per call on the rows that have it. With the cores full, throughput is the cores
    divided by the CPU every process spends per call, so this says what a front costs."""
    measured = [r for r in summary if r.get("server_cpu_us") is not None and r["system"] in systems
                and r["system"] != "proxy→fixed"]
    if not measured:
        return []
    lines = ["", "CPU per call, µs of user + system time, medians: the system's own "
             "processes (a front's without the model server behind it; system time alone in "
             "brackets), the model server behind a front, and the client (wrk on the json rows, "
             "exact; perf_analyzer on the others, whose call count is its rate times its whole "
             "run, start-up included, so a little high). Cores busy: their sum × "
             "infer/s. Machine-wide (/proc/stat): the share of all cores' time idle, and spent in "
             "interrupts (the loopback's packet delivery, mostly; no process is charged for it).",
             "", "| case | protocol | conc. | system | infer/s | own (kernel) | model server behind "
             "| client | cores busy | idle | interrupts |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {s: i for i, s in enumerate(systems)}
    measured.sort(key=lambda r: (r["case"], r["protocol"], r["concurrency"], order[r["system"]]))
    for r in measured:
        upstream = r["upstream_cpu_us"]
        total = r["server_cpu_us"] + (upstream or 0) + r["client_cpu_us"]
        lines.append(f"| {r['case']} | {r['protocol']} | {r['concurrency']} | {r['system']} | "
                     f"{r['throughput']:,.0f} | {r['server_cpu_us']:.0f} ({r['server_sys_us']:.0f}) "
                     f"| {'—' if upstream is None else f'{upstream:.0f}'} | "
                     f"{r['client_cpu_us']:.0f} | {total * r['throughput'] / 1e6:.2f} | "
                     f"{r['machine_idle_pct']:.0f} % | {r['machine_irq_pct']:.0f} % |")
    return lines


def chart(summary: list[dict], systems: list[str], path: Path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart", file=sys.stderr)
        return
    labels = []
    for r in summary:
        label = f"{r['case']}\n{r['protocol']} c{r['concurrency']}"
        if label not in labels:
            labels.append(label)
    width = 0.8 / max(1, len(systems))
    fig, ax = plt.subplots(figsize=(max(10, len(labels) * 0.9), 6))
    for i, s in enumerate(systems):
        values = []
        for label in labels:
            r = next((r for r in summary if r["system"] == s and
                      f"{r['case']}\n{r['protocol']} c{r['concurrency']}" == label), None)
            values.append(r["throughput"] if r else 0)
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=s)
    ax.set_yscale("log")
    ax.set_ylabel("inferences / second (log)")
    ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(labels))])
    ax.set_xticklabels(labels, fontsize=7, rotation=90)
    ax.legend()
    ax.set_title("Throughput, same client, same machine, one run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer window")
    ap.add_argument("--systems",
                    default="sidecar,triton,nginx→triton,sidecar→triton,sidecar→triton+pool",
                    help="any of: sidecar, triton, sidecar→triton (staging pool off), "
                         "sidecar→triton+pool (pool on), sidecar→triton/rest (pool off, V2 "
                         "REST to Triton instead of gRPC), sidecar→triton+pool+rest (pool on, "
                         "calls of at most 64 KiB of tensor data over REST), kserve, sidecar→kserve, mlserver, "
                         "sidecar→mlserver, fixed (nginx returning constant answers: the "
                         "round-trip ceiling), proxy→fixed (nginx proxying to those: the "
                         "cheapest proxy hop), nginx→triton (nginx passing REST and gRPC "
                         "through to a Triton: the cheapest proxy in front of the real server, "
                         "every row), relay→triton (bench/relay copying bytes between "
                         "paired connections to that Triton: the floor of any hop, every "
                         "row), h2relay→triton (bench/h2-relay terminating HTTP/2 on "
                         "both sides with the sidecar's stack and passing each gRPC call "
                         "through unparsed: the floor of a gRPC front; its REST port is "
                         "bench/relay's), h2relay/h2→triton (the same with its client side "
                         "served by the h2 crate alone, no hyper, each connection's calls "
                         "handled in its own task); the fixed two answer identity_fp32[16] over "
                         "http and json and identity_fp32[1M] over http only; noop "
                         "(bench/noop-server returning recorded answers over http and grpc for "
                         "both identity_fp32 sizes, json for 16 elements: the ceiling)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="an extra system for A/B runs: sidecar→triton+pool+rest started with "
                         "ARGS added (split like a shell would), named sidecar→triton[NAME] in "
                         "the tables; "
                         "repeatable, e.g. --variant 'rest-all=--upstream-rest-max-bytes "
                         "4294967296'")
    ap.add_argument("--builtin-variant", action="append", default=[], metavar="NAME=ARGS",
                    help="an extra built-in sidecar started with ARGS added, named sidecar[NAME], "
                         "e.g. --builtin-variant 'w0=--worker-threads 0'; repeatable")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--concurrency", default="1,8")
    args = ap.parse_args()
    systems_wanted = args.systems.split(",")

    def named_variants(flag: str, specs: list[str], system: str) -> dict[str, list[str]]:
        """NAME=ARGS specs as systems named system[NAME], each added to the systems wanted."""
        found = {}
        for spec in specs:
            short, sep, extra = spec.partition("=")
            name = f"{system}[{short}]"
            if not sep or not short or name in systems_wanted:
                ap.error(f"{flag} {spec!r}: want NAME=ARGS with a NAME of its own")
            found[name] = shlex.split(extra)
            systems_wanted.append(name)
        return found

    variants = named_variants("--variant", args.variant, "sidecar→triton")
    builtin_variants = named_variants("--builtin-variant", args.builtin_variant, "sidecar")
    unknown_cases = [c for c in args.cases.split(",") if c not in CASES]
    if unknown_cases:
        ap.error(f"unknown cases: {', '.join(unknown_cases)} (known: {', '.join(CASES)})")
    cases = [CASES[c] for c in args.cases.split(",")]
    protocols = args.protocols.split(",")
    unknown_protocols = [p for p in protocols if p not in PROTOCOLS + EXTRA_PROTOCOLS]
    if unknown_protocols:
        ap.error(f"unknown protocols: {', '.join(unknown_protocols)}")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="infergate-bench-"))
    # A time limit's SIGTERM unwinds like ^C: the servers are stopped and the rows so far written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                machine["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print("measuring the machine's limits", file=sys.stderr)
    machine["memcpy_gbps"] = memcpy_gbps()
    machine["loopback_tcp_gbps"] = loopback_tcp_gbps()
    print(f"  memcpy {machine['memcpy_gbps']:.1f} GB/s, loopback TCP "
          f"{machine['loopback_tcp_gbps']:.1f} GB/s", file=sys.stderr)

    systems: dict[str, System] = {}
    rows = []
    try:
        if "sidecar" in systems_wanted:
            systems["sidecar"] = start_sidecar("sidecar", work, [])
        for i, (name, extra) in enumerate(builtin_variants.items()):
            systems[name] = start_sidecar(f"sidecar-variant-{i}", work, extra)
            systems[name].name = name
        fronts = {
            # Everything over the loopback socket.
            "sidecar→triton": ["--staging-shm-bytes", "0"],
            # Tensors of 64 KiB and more through the staging pool.
            "sidecar→triton+pool": POOL_ARGS,
            # The same as sidecar→triton, speaking V2 REST to Triton instead of gRPC.
            "sidecar→triton/rest": ["--staging-shm-bytes", "0"],
            # The pool, and calls with at most 64 KiB of tensor data over REST (--upstream-rest).
            "sidecar→triton+pool+rest": POOL_ARGS,
            # A/B variants: the last one with more arguments.
            **{name: [*POOL_ARGS, *extra]
               for name, extra in variants.items()},
        }
        if "triton" in systems_wanted:
            systems["triton"] = start_triton(work)
        for name, start_front in (("nginx→triton", start_nginx_front),
                                  ("relay→triton", start_relay_front),
                                  ("h2relay→triton", start_h2relay_front),
                                  ("h2relay/h2→triton",
                                   lambda work, up: start_h2relay_front(work, up, "h2"))):
            if name not in systems_wanted:
                continue
            # In front of the Triton measured directly: perf_analyzer's regions are its own, and
            # the sidecar fronts' Triton must not see them unregistered.
            if "triton" in systems:
                triton = systems["triton"]
                front = start_front(work, triton)
            else:
                triton = start_triton(work / f"{name.split('→')[0]}-upstream")
                front = start_front(work, triton)
                front.procs += triton.procs
            front.upstream = triton.procs
            systems[name] = front
        if any(f in systems_wanted for f in fronts):
            # The fronts get a Triton of their own: perf_analyzer unregisters every shared-memory
            # region of the server it drives, which, on a shared Triton, would drop the regions
            # the sidecar registered there (its staging pool, clients' regions) at each row.
            triton = start_triton(work / "upstream")
            triton_owned = False
            for name, extra in fronts.items():
                if name not in systems_wanted:
                    continue
                slug = {"sidecar→triton": "sidecar-upstream", "sidecar→triton+pool":
                        "sidecar-upstream-pool", "sidecar→triton/rest": "sidecar-upstream-rest",
                        "sidecar→triton+pool+rest": "sidecar-upstream-pool-rest"}.get(
                            name, f"variant-{len(systems)}")
                upstream_url = (f"http://{triton.http}" if name.endswith("/rest")
                                else f"grpc://{triton.grpc}")
                if name.endswith("+rest") or name in variants:
                    extra = [*extra, "--upstream-rest", f"http://{triton.http}"]
                front = start_sidecar(slug, work, ["--upstream", upstream_url, *extra])
                front.name = name
                front.upstream = triton.procs
                if not triton_owned:
                    # The first front stops Triton with itself.
                    front.procs = front.procs + triton.procs
                    triton_owned = True
                systems[name] = front
        # KServe's ModelServer and MLServer have no system shared memory: the sidecar in front of
        # them emulates it (and classification, sequences, binary data).
        for upstream, start in (("kserve", start_kserve), ("mlserver", start_mlserver)):
            front_name = f"sidecar→{upstream}"
            if upstream not in systems_wanted and front_name not in systems_wanted:
                continue
            server, config = start(work)
            if upstream in systems_wanted:
                systems[upstream] = server
            if front_name in systems_wanted:
                front = start_sidecar(f"sidecar-{upstream}", work, ["--config", str(config)])
                front.name = front_name
                front.upstream = server.procs
                if upstream not in systems_wanted:
                    front.procs = front.procs + server.procs
                systems[front_name] = front
        if "noop" in systems_wanted:
            systems["noop"] = start_noop(work)
        if "fixed" in systems_wanted or "proxy→fixed" in systems_wanted:
            fixed, proxy = start_fixed(work)
            if "proxy→fixed" in systems_wanted:
                systems["proxy→fixed"] = proxy
            if "fixed" in systems_wanted:
                systems["fixed"] = fixed
            else:
                proxy.procs = fixed.procs
        unknown = [s for s in systems_wanted if s not in systems]
        if unknown:
            raise SystemExit(f"unknown systems: {', '.join(unknown)}")
        order = [s for s in systems_wanted if s in systems]
        for name in order:
            if name not in RECORDED_ANSWERS:
                check_identity(systems[name])
        # A case that differs only in its JSON body is measured over JSON only.
        rows_wanted = [(case, protocol) for case in cases for protocol in protocols
                       if protocol == "json" or case.json_values == "halves"]
        total = args.rounds * len(concurrencies) * sum(
            1 for case, protocol in rows_wanted for name in order
            if systems[name].only is None or (case.name, protocol) in systems[name].only)
        done = 0
        for rnd in range(args.rounds):
            for case, protocol in rows_wanted:
                for conc in concurrencies:
                    # Alternate: every system measured back to back on the same row, the
                    # order rotated each round.
                    rotated = order[rnd % len(order):] + order[:rnd % len(order)]
                    for name in rotated:
                        system = systems[name]
                        if system.only is not None and (case.name, protocol) not in system.only:
                            continue
                        if protocol == "json":
                            r = wrk_json(system, case, conc, args.interval_ms, work)
                        else:
                            r = perf_analyzer(system, case, protocol, conc, args.interval_ms, work)
                        row = {"round": rnd + 1, "system": name, "case": case.name,
                               "protocol": protocol, "concurrency": conc, **r}
                        rows.append(row)
                        done += 1
                        print(f"[{done}/{total}] {name:15} {case.name:18} {protocol:5} c={conc}: "
                              f"{r['throughput']:10.1f}/s p50 {fmt_us(r['p50_us'])} "
                              f"p99 {fmt_us(r['p99_us'])} {r['errors']}", file=sys.stderr)
    finally:
        for s in systems.values():
            s.stop()
        # Stopped early (a time limit's SIGTERM, ^C, a server that died): what was measured is
        # still written.
        if rows:
            write_results(args.out, rows, systems_wanted, machine)


def write_results(out: Path, rows: list[dict], systems_wanted: list[str], machine: dict):
    fields = ["round", "system", "case", "protocol", "concurrency", "throughput", "p50_us", "p99_us",
              "errors", *CPU_FIELDS]
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows)
    with (out / "summary.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0].keys()) if summary else fields)
        w.writeheader()
        w.writerows(summary)
    order = [s for s in systems_wanted if any(r["system"] == s for r in summary)]
    (out / "summary.md").write_text(markdown(summary, order, machine, rows))
    (out / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    chart(summary, order, out / "throughput.png")
    print((out / "summary.md").read_text())

if __name__ == "__main__":
    main()
