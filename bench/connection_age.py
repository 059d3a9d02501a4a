"""What a maximum connection age costs (`limits.max_connection_age_seconds`): perf_analyzer over
gRPC (one channel, C++ gRPC client) on the built-in `simple` at concurrency 8, against the
release sidecar with the age off and at a few short values, rounds alternated. A short age makes
every connection reconnect often, so the difference per reconnection can be read off the
throughput; perf_analyzer fails the run on any failed call, so "no call lost" is checked too.

    .venv/bin/python bench/connection_age.py [--rounds 3] [--ages 0,1,5] [--interval-ms 5000]

Prints a table of the medians and the cost of one reconnection, estimated from the shortest age.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from perf_tools import free_ports, perf, start_sidecar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ages", default="0,1,5")
    parser.add_argument("--interval-ms", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    ages = [int(a) for a in args.ages.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            order = ages if round_ % 2 == 0 else ages[::-1]
            for age in order:
                http, grpc = free_ports(2)
                config = Path(work) / f"age{age}.yaml"
                config.write_text(json.dumps({"limits": {"max_connection_age_seconds": age}}))
                proc = start_sidecar(["--config", str(config), "--http-port", str(http),
                                      "--grpc-port", str(grpc)], http)
                try:
                    r = perf(["-m", "simple", "-u", f"127.0.0.1:{grpc}", "-i", "grpc"],
                             args.interval_ms, Path(work) / "pa.csv", args.concurrency)
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
                r.update(age=age, round=round_)
                rows.append(r)
                print(r, file=sys.stderr, flush=True)
    print(f"| max_connection_age_seconds | infer/s | p50 µs | p99 µs |")
    print("|---|---|---|---|")
    medians = {}
    for age in ages:
        mine = [r for r in rows if r["age"] == age]
        med = {k: statistics.median(r[k] for r in mine) for k in ("throughput", "p50_us", "p99_us")}
        medians[age] = med
        label = "0 (never)" if age == 0 else str(age)
        print(f"| {label} | {med['throughput']:.0f} | {med['p50_us']:.0f} | {med['p99_us']:.0f} |")
    shortest = min((a for a in ages if a > 0), default=None)
    if 0 in medians and shortest:
        # One reconnection per `shortest` seconds (perf_analyzer's gRPC client shares one
        # channel); the time lost per reconnection is the throughput lost over that time.
        lost = 1 - medians[shortest]["throughput"] / medians[0]["throughput"]
        print(f"\nthroughput at {shortest} s: {1 - lost:.3f} of never; about "
              f"{lost * shortest * 1000:.1f} ms of serving lost per reconnection "
              f"(medians of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
