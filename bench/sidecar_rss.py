"""What the sidecar's settings cost in resident memory: the release sidecar's VmRSS (and the
anonymous part of it, RssAnon) once started and after some calls, for each of
- `builtin`: the built-in models, plaintext;
- `builtin+tls`: the same with server TLS on the HTTP, gRPC and metrics ports;
- `upstream`: fronting a model server over gRPC on loopback (a second sidecar with the built-in
  models stands in for it), as in a pod;
- `upstream+tls`: the same with TLS on its ports;
- `upstream+tls+admin`: and TLS offered on the admin port with a status client CA
  (`server.status_client_ca`), as the operator renders it.

Each system is started alone, made ready, then given 200 REST inferences of `simple` and 200
readiness calls over its HTTP port (new connections each), and read from /proc after a second's
rest. The median of `--rounds` starts is printed as a Markdown table. VmRSS counts the binary's
pages that were touched as well as the heap; RssAnon is the heap and the stacks alone.

Certificates (RSA 2048, for localhost) are made with openssl by tests/conformance/certs.py.

    .venv/bin/python bench/sidecar_rss.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from perf_tools import REPO, SIDECAR, free_ports

sys.path.insert(0, str(REPO / "tests/conformance"))
import certs  # noqa: E402

SIMPLE = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()


def memory(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def wait_ready(admin: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the sidecar exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the sidecar did not become ready")


def measure(args: list[str], tls: bool, pki: dict, work: Path) -> dict:
    http, grpc, metrics, admin = free_ports(4)
    proc = subprocess.Popen([SIDECAR, "--host", "127.0.0.1", "--http-port", str(http),
                             "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                             "--admin-port", str(admin), "--log-level", "warn", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    try:
        wait_ready(admin, proc)
        started = memory(proc.pid)
        scheme = "https" if tls else "http"
        context = ssl.create_default_context(cafile=str(pki["ca"].cert)) if tls else None
        base = f"{scheme}://localhost:{http}"
        for _ in range(200):
            request = urllib.request.Request(f"{base}/v2/models/simple/infer", data=SIMPLE,
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10, context=context).read()
            urllib.request.urlopen(f"{base}/v2/health/ready", timeout=10, context=context).read()
        time.sleep(1)
        return {"started": started, "served": memory(proc.pid)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="infergate-rss-"))
    ca = certs.ca(work / "pki")
    server = certs.signed(work / "pki", "server", ca, server=True)
    pki = {"ca": ca, "server": server}
    tls_args = []
    for port in ("http", "grpc", "metrics"):
        tls_args += [f"--{port}-use-ssl=true", f"--{port}-server-cert", str(server.cert),
                     f"--{port}-server-key", str(server.key)]
    admin_config = work / "admin.yaml"
    admin_config.write_text(f"server:\n  status_client_ca: {ca.cert}\n")

    model_http, model_grpc = free_ports(2)
    model_server = subprocess.Popen([SIDECAR, "--host", "127.0.0.1", "--http-port",
                                     str(model_http), "--grpc-port", str(model_grpc),
                                     "--metrics-port", "0", "--admin-port", "0",
                                     "--log-level", "warn"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    upstream = [f"--upstream=grpc://127.0.0.1:{model_grpc}"]
    systems = {
        "builtin": ([], False),
        "builtin+tls": (tls_args, True),
        "upstream": (upstream, False),
        "upstream+tls": (upstream + tls_args, True),
        "upstream+tls+admin": (upstream + tls_args + [f"--config={admin_config}"], True),
    }
    try:
        time.sleep(1)
        rows = {name: [] for name in systems}
        for _ in range(options.rounds):
            for name, (args, tls) in systems.items():
                rows[name].append(measure(args, tls, pki, work))
    finally:
        model_server.terminate()
        model_server.wait(timeout=30)

    print(f"sidecar: {SIDECAR}; medians of {options.rounds} starts, MiB")
    print()
    print("| system | VmRSS started | RssAnon started | VmRSS after 400 calls | RssAnon after |")
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        def median(when, key):
            return statistics.median(r[when][key] for r in runs)
        print(f"| {name} | {median('started', 'VmRSS'):.1f} | {median('started', 'RssAnon'):.1f} "
              f"| {median('served', 'VmRSS'):.1f} | {median('served', 'RssAnon'):.1f} |")


if __name__ == "__main__":
    main()
