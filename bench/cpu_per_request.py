"""The sidecar's own CPU per request, for two binaries side by side: what `ab_sidecar.py`'s
throughput cannot settle where this machine's scheduling makes windows bimodal (HTTP at
concurrency 8 lands near 17-19k or 22-26k infer/s, for any binary).

For each run it starts a binary with its built-in models, reads the process's utime+stime from
/proc and the `nv_inference_request_success` count of `simple` from its metrics, lets
perf_analyzer send `simple` (16 INT32) in count windows, reads both again, and prints CPU
microseconds per request. The two binaries alternate, each first in every other round; the
medians are printed last.

    .venv/bin/python bench/cpu_per_request.py OLD NEW [--rounds 9] [--protocol http]
        [--concurrency 8] [--requests 20000]
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

PERF_ANALYZER = Path(__file__).resolve().parents[1] / ".venv/bin/perf_analyzer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def successes(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    return sum(float(v) for v in re.findall(
        r'^nv_inference_request_success\{[^}]*model="simple"[^}]*\} (\S+)', text, re.M))


def one_run(binary: str, protocol: str, concurrency: int, requests: int) -> float:
    http, grpc, metrics, admin = (free_port() for _ in range(4))
    proc = subprocess.Popen([binary, f"--http-port={http}", f"--grpc-port={grpc}",
                             f"--metrics-port={metrics}", f"--admin-port={admin}",
                             "--log-info=false", "--log-warning=false", "--log-error=false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready").status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        port = http if protocol == "http" else grpc
        cpu0, n0 = cpu_seconds(proc.pid), successes(metrics)
        subprocess.run([str(PERF_ANALYZER), "-m", "simple", "-u", f"127.0.0.1:{port}",
                        "-i", protocol, "--concurrency-range", str(concurrency),
                        "--measurement-mode", "count_windows",
                        "--measurement-request-count", str(requests), "--max-trials", "3",
                        "--stability-percentage", "999"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                       check=True)
        cpu1, n1 = cpu_seconds(proc.pid), successes(metrics)
        return (cpu1 - cpu0) / (n1 - n0) * 1e6
    finally:
        proc.terminate()
        proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    got = {"old": [], "new": []}
    for r in range(args.rounds):
        for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
            binary = args.old if which == "old" else args.new
            us = one_run(binary, args.protocol, args.concurrency, args.requests)
            got[which].append(round(us, 1))
            print(f"round {r} {which}: {us:.1f} µs of sidecar CPU per request", flush=True)
    for which, values in got.items():
        print(f"{which}: median {statistics.median(values):.1f} µs per request, runs {values}")


if __name__ == "__main__":
    main()
