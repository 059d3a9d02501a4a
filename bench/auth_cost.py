"""What authentication costs a call: perf_analyzer over REST on the built-in `identity_fp32`
(16 elements, binary tensor data) at concurrency 1 and 8, against the release sidecar
- `open`: no rule on inference (Triton's default),
- `key`: a restricted-API key on inference (`--http-restricted-api inference:x-api-key=…`; the
  key sent with `-H`, compared in constant time),
- `token`: `server.identity` on inference, a ServiceAccount token checked by the sidecar against
  the issuer's keys (`verify: Jwks`),
- `token+rbac`: the same, and the caller's `infer` verb on the InferenceService asked with a
  LocalSubjectAccessReview (`authorize`).
The token rows are the steady state: perf_analyzer sends the same token every call, so after
the first the sidecar finds it (by its SHA-256), and the review's answer, in its cache
(`cache_seconds` 3600 unless `--cache-seconds` says otherwise, so no window reads a token
afresh). `first call` is the time of one
call with a token the sidecar has not seen, of a ServiceAccount it has not seen (the signature
verified, and the review asked), with a client of Python's standard library: the median over 20
ServiceAccounts, beside the same client's call with a token already seen.

The tokens are real: a Kubernetes control plane (etcd and kube-apiserver from
tests/cluster/build.sh, as the cluster tests start it) issues them (`kubectl create token
--audience=…`) and answers the sidecar's discovery and reviews. Every system runs for the whole
run; each round runs every concurrency's systems back to back, in the opposite order on odd
rounds; the table gives medians over rounds, the throughput ratio to `open` within each round,
and the server's CPU time per call (user + system, from /proc, over perf_analyzer's run).

    .venv/bin/python bench/auth_cost.py [--rounds 3] [--interval-ms 2000] [--concurrency 1,8] \
        [--cache-seconds 3600]

About 5 minutes on 2 cores with the defaults, once the control plane's binaries are built
(tests/cluster/build.sh, cached). Needs the release sidecar (target/release/infergate-sidecar,
or INFERGATE_SIDECAR_BIN) and perf_analyzer (.venv/bin/perf_analyzer, or PERF_ANALYZER).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from perf_tools import REPO, SIDECAR, cpu_seconds, free_ports, perf

sys.path.insert(0, str(REPO / "tests/cluster"))
from controlplane import ControlPlane  # noqa: E402

SYSTEMS = ("open", "key", "token", "token+rbac")
KEY = "x-api-key"
KEY_VALUE = "bench-key-0123456789abcdef"
NAMESPACE, NAME = "bench", "fraud"
AUDIENCE = f"infergate.dev/{NAMESPACE}/{NAME}"
FRESH = 20  # ServiceAccounts whose first call is timed


def log(msg: str) -> None:
    print(f"[auth_cost] {msg}", file=sys.stderr, flush=True)


def control_plane(work: Path) -> ControlPlane:
    bins = subprocess.run([str(REPO / "tests/cluster/build.sh")], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    plane = ControlPlane(Path(bins), work / "cluster")
    plane.start()
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}] + [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": n, "namespace": NAMESPACE}}
        for n in ["sidecar", "caller"] + [f"caller-{i}" for i in range(FRESH)]
    ] + [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": n, "namespace": NAMESPACE}, "rules": [rule]}
        for n, rule in (("reviews", {"apiGroups": ["authorization.k8s.io"],
                                     "resources": ["localsubjectaccessreviews"],
                                     "verbs": ["create"]}),
                        ("infer", {"apiGroups": ["infergate.dev"],
                                   "resources": ["inferenceservices"], "verbs": ["infer"]}))
    ] + [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": role, "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [subject]}
        for role, subject in (
            ("reviews", {"kind": "ServiceAccount", "name": "sidecar", "namespace": NAMESPACE}),
            # Every ServiceAccount of the namespace may infer.
            ("infer", {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                       "name": f"system:serviceaccounts:{NAMESPACE}"}))
    ]
    for doc in docs:  # the namespace first
        plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    return plane


def token(plane: ControlPlane, account: str, audience: str | None = AUDIENCE) -> str:
    args = ["create", "token", account, "-n", NAMESPACE, "--duration=2h"]
    if audience:
        args.append(f"--audience={audience}")
    return plane.kubectl(*args).stdout.strip()


def start(system: str, work: Path, kubeconfig: Path,
          cache_seconds: int) -> tuple[subprocess.Popen, int]:
    http, grpc = free_ports(2)
    args = ["--host", "127.0.0.1", "--http-port", str(http), "--grpc-port", str(grpc)]
    if system == "key":
        args += ["--http-restricted-api", f"inference:{KEY}={KEY_VALUE}"]
    elif system.startswith("token"):
        identity = {"apis": ["inference"], "audience": AUDIENCE, "cache_seconds": cache_seconds}
        if system == "token+rbac":
            identity["authorize"] = {"namespace": NAMESPACE, "name": NAME, "verb": "infer"}
        config = work / f"{system}.yaml"
        config.write_text(json.dumps({"server": {"identity": identity}}))
        args += ["--config", str(config)]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    proc = subprocess.Popen([SIDECAR, "--metrics-port", "0", "--admin-port", "0",
                             "--log-level", "warn", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1):
                return proc, http
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the sidecar ({system}) did not become ready")


def infer_body() -> bytes:
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [16],
                                   "data": [1.0] * 16}]}).encode()


def call_ms(port: int, tokens: list[str]) -> float:
    """The median time of one call with each token."""
    times = []
    for t in tokens:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/models/identity_fp32/infer", data=infer_body(),
            headers={"Authorization": f"Bearer {t}", "Content-Type": "application/json"})
        begin = time.perf_counter()
        with urllib.request.urlopen(request, timeout=10) as r:
            r.read()
        times.append((time.perf_counter() - begin) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8")
    # 60 is the operator's default: with windows longer than it, the rows include the calls
    # that find the token's entry expired and pay the signature check and the review again.
    parser.add_argument("--cache-seconds", type=int, default=3600)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    work = Path(tempfile.mkdtemp(prefix="auth-cost-"))
    plane = control_plane(work)
    procs = {}
    try:
        kubeconfig = plane.token_kubeconfig(work / "sidecar.kubeconfig", token(plane, "sidecar", None))
        caller = token(plane, "caller")
        headers = {"open": [], "key": ["-H", f"{KEY}:{KEY_VALUE}"],
                   "token": ["-H", f"Authorization:Bearer {caller}"],
                   "token+rbac": ["-H", f"Authorization:Bearer {caller}"]}
        for system in SYSTEMS:
            procs[system] = start(system, work, kubeconfig, args.cache_seconds)
        fresh = [token(plane, f"caller-{i}") for i in range(FRESH)]
        first = {s: (call_ms(procs[s][1], fresh), call_ms(procs[s][1], fresh))
                 for s in ("token", "token+rbac")}
        rows = {}
        for r in range(args.rounds):
            for c in levels:
                order = SYSTEMS if r % 2 == 0 else tuple(reversed(SYSTEMS))
                for system in order:
                    proc, port = procs[system]
                    before = cpu_seconds(proc.pid)
                    got = perf(["-m", "identity_fp32", "-u", f"127.0.0.1:{port}", "-i", "http",
                                "--shape", "INPUT0:16", *headers[system]],
                               args.interval_ms, work / "perf.csv", concurrency=c)
                    spent = cpu_seconds(proc.pid) - before
                    # perf_analyzer's calls over its whole run: three windows at the rate seen
                    calls = got["throughput"] * 3 * args.interval_ms / 1000
                    got["cpu_us"] = spent / calls * 1e6 if calls else float("nan")
                    rows.setdefault((system, c), []).append(got)
                    log(f"round {r + 1} c={c} {system}: {got['throughput']:.0f}/s "
                        f"p50 {got['p50_us']:.0f} µs")
        print("| system | c | infer/s | × open | p50 µs | p99 µs | server CPU µs/call |")
        print("|---|---|---|---|---|---|---|")
        for c in levels:
            for system in SYSTEMS:
                got = rows[(system, c)]
                ratio = statistics.median(g["throughput"] / o["throughput"]
                                          for g, o in zip(got, rows[("open", c)]))
                med = {k: statistics.median(g[k] for g in got)
                       for k in ("throughput", "p50_us", "p99_us", "cpu_us")}
                print(f"| {system} | {c} | {med['throughput']:.0f} | {ratio:.2f} | "
                      f"{med['p50_us']:.0f} | {med['p99_us']:.0f} | {med['cpu_us']:.1f} |")
        print()
        for system, (new, seen) in first.items():
            print(f"{system}: first call of a ServiceAccount {new:.2f} ms, the next with the same "
                  f"token {seen:.2f} ms (medians of {FRESH}, a Python client)")
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait()
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
