"""What tracing costs the sidecar: the built-in `simple` model driven by perf_analyzer over gRPC
and HTTP at concurrency 1, with tracing off, configured but at level OFF, sampling one request in
1000 (Triton's default rate), and tracing every request, the variants alternated round by round.

Spans go to the project's OTLP receiver (tests/tools/otlp_receiver.py) in a process of its own,
which shares this machine's CPUs: next to throughput and latency, the sidecar's own CPU time per
request (from /proc) is the figure that does not depend on where the collector runs.

    bench/small.sh trace_overhead [--rounds 3] [--interval-ms 3000]

Prints a Markdown table; writes every measurement to bench/results/trace-overhead-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf_tools import PYTHON, REPO, cpu_seconds, free_ports, perf, start_sidecar


def variants(otlp_port: int) -> dict[str, list[str]]:
    otel = ["--trace-config", "mode=opentelemetry",
            "--trace-config", f"opentelemetry,url=127.0.0.1:{otlp_port}/v1/traces",
            "--trace-config", "opentelemetry,bsp_schedule_delay=500"]
    return {
        "off": [],
        "otel, level OFF": otel,
        "1 in 1000": otel + ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1000"],
        "every request": otel + ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=3000)
    args = parser.parse_args()
    http, grpc, otlp = free_ports(3)
    receiver = subprocess.Popen([PYTHON, str(REPO / "tests/tools/otlp_receiver.py"), "--http-port",
                                 str(otlp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        time.sleep(1)
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(args.rounds):
                for name, flags in variants(otlp).items():
                    for protocol in ("grpc", "http"):
                        proc = start_sidecar(["--http-port", str(http), "--grpc-port", str(grpc),
                                              *flags], http)
                        try:
                            before, started = cpu_seconds(proc.pid), time.monotonic()
                            url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
                            result = perf(["-m", "simple", "-u", url, "-i", protocol],
                                          args.interval_ms, Path(work) / "pa.csv")
                            elapsed = time.monotonic() - started
                            used = cpu_seconds(proc.pid) - before
                        finally:
                            proc.send_signal(signal.SIGTERM)
                            proc.wait(timeout=30)
                        # perf_analyzer's whole run, at its measured rate, stands in for the
                        # calls the CPU time was spent on.
                        calls = result["throughput"] * elapsed
                        result.update(variant=name, protocol=protocol, round=round_,
                                      cpu_us_per_call=1e6 * used / calls if calls else None)
                        rows.append(result)
                        print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = REPO / "bench/results" / f"trace-overhead-{stamp}.json"
    out.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))
    print(f"| variant | protocol | inferences/s | p50 µs | p99 µs | sidecar CPU µs/call |")
    print("|---|---|---|---|---|---|")
    for name in variants(otlp):
        for protocol in ("grpc", "http"):
            mine = [r for r in rows if r["variant"] == name and r["protocol"] == protocol]
            med = lambda key: statistics.median(r[key] for r in mine)  # noqa: E731
            print(f"| {name} | {protocol} | {med('throughput'):.0f} | {med('p50_us'):.0f} | "
                  f"{med('p99_us'):.0f} | {med('cpu_us_per_call'):.1f} |")
    print(f"\n(medians of {args.rounds} rounds; {out.relative_to(REPO)})")


if __name__ == "__main__":
    main()
