"""What the small benchmarks (trace_overhead.py, sequence_peers.py) share: starting a release
sidecar, one perf_analyzer measurement at concurrency 1, free ports, a process's CPU time."""

from __future__ import annotations

import csv
import os
import statistics
import sys
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDECAR = os.environ.get("INFERGATE_SIDECAR_BIN", str(REPO / "target/release/infergate-sidecar"))
PERF_ANALYZER = os.environ.get("PERF_ANALYZER", str(REPO / ".venv/bin/perf_analyzer"))
PYTHON = os.environ.get("INFERGATE_PYTHON_BIN", str(REPO / ".venv/bin/python"))
TICKS = os.sysconf("SC_CLK_TCK")

sys.path.insert(0, str(REPO / "tests/tools"))
from ports import free_ports  # noqa: E402,F401 (for the benchmarks)


def cpu_seconds(pid: int) -> float:
    """User and system time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_sidecar(args: list[str], http_port: int, binary: str = SIDECAR) -> subprocess.Popen:
    """The release sidecar (or `binary`) with `args` (its ports among them), once it answers
    ready."""
    proc = subprocess.Popen([binary, "--metrics-port", "0", "--admin-port", "0",
                             "--log-level", "warn", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            url = f"http://127.0.0.1:{http_port}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the sidecar did not become ready with {args}")


def perf(target: list[str], interval_ms: int, out: Path, concurrency: int = 1) -> dict:
    """perf_analyzer at `concurrency` on `target` (its -m, -u, -i and any other flags): three
    windows of `interval_ms`; throughput and p50/p99 latency in microseconds."""
    out.unlink(missing_ok=True)
    args = [PERF_ANALYZER, *target, "--concurrency-range", str(concurrency),
            "--measurement-mode", "time_windows", "--measurement-interval", str(interval_ms),
            "--max-trials", "3", "--stability-percentage", "999", "-f", str(out),
            "--percentile", "99"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"perf_analyzer failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    row = next(csv.DictReader(out.open()))
    return {"throughput": float(row["Inferences/Second"]), "p50_us": float(row["p50 latency"]),
            "p99_us": float(row["p99 latency"])}




def perf_with_cpu(target: list[str], procs: list[subprocess.Popen], interval_ms: int,
                  out: Path) -> dict:
    """`perf` at concurrency 1, with the CPU time `procs` spent per call over its run
    (`sidecars_cpu_us_per_call`, user + system from /proc)."""
    before = [cpu_seconds(p.pid) for p in procs]
    started = time.monotonic()
    result = perf(target, interval_ms, out)
    elapsed = time.monotonic() - started
    used = sum(cpu_seconds(p.pid) for p in procs) - sum(before)
    calls = result["throughput"] * elapsed
    result["sidecars_cpu_us_per_call"] = 1e6 * used / calls if calls else None
    return result


def print_medians(rows: list[dict], names: list[str], base: str, column: str) -> None:
    """A Markdown table of the medians of `rows` by variant (`names`, in order) and protocol,
    with each row's throughput and p50 against `base`'s."""
    def median(name, protocol, key):
        return statistics.median(r[key] for r in rows
                                 if r["variant"] == name and r["protocol"] == protocol)

    print(f"| protocol | {column} | inferences/s | p50 µs | p99 µs | sidecars' CPU µs/call | "
          f"throughput / {base}'s | p50 / {base}'s |")
    print("|---|---|---|---|---|---|---|---|")
    for protocol in ("grpc", "http"):
        base_t = median(base, protocol, "throughput")
        base_p50 = median(base, protocol, "p50_us")
        for name in names:
            t = median(name, protocol, "throughput")
            p50 = median(name, protocol, "p50_us")
            print(f"| {protocol} | {name} | {t:.0f} | {p50:.0f} | "
                  f"{median(name, protocol, 'p99_us'):.0f} | "
                  f"{median(name, protocol, 'sidecars_cpu_us_per_call'):.1f} | "
                  f"{t / base_t:.2f} | {p50 / base_p50:.2f} |")
