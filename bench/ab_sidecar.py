"""Two sidecar binaries side by side, for a change that should not move performance: the
built-in `simple` (16 INT32 elements) and `identity_fp32` with 1M elements, perf_analyzer over
gRPC and HTTP at concurrency 1 and 8, the two binaries alternated round by round (each first
in every other round). Prints the medians and the ratio of the second binary to the first.

    .venv/bin/python bench/ab_sidecar.py OLD_BINARY NEW_BINARY [--rounds 3] [--interval-ms 2000]
        [--case simple[16]] [--protocol grpc] [--concurrency 1]

The last three keep one case, protocol or concurrency, for a closer look at one row.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from perf_tools import free_ports, perf, start_sidecar

CASES = {
    "simple[16]": ["-m", "simple"],
    "identity_fp32[1M]": ["-m", "identity_fp32", "--shape", "INPUT0:1048576"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--protocol", choices=["grpc", "http"])
    parser.add_argument("--concurrency", type=int, choices=[1, 8])
    args = parser.parse_args()
    cases = [c for c in CASES if args.case in (None, c)]
    protocols = [p for p in ("grpc", "http") if args.protocol in (None, p)]
    concurrencies = [c for c in (1, 8) if args.concurrency in (None, c)]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            # Each binary goes first in every other round: whatever favours the first (or the
            # second) run of a round weighs on both alike.
            pair = [("old", args.old), ("new", args.new)]
            for which, binary in (pair if round_ % 2 == 0 else pair[::-1]):
                http, grpc = free_ports(2)
                proc = start_sidecar(["--http-port", str(http), "--grpc-port", str(grpc)], http,
                                     binary)
                try:
                    for case in cases:
                        flags = CASES[case]
                        for protocol in protocols:
                            for concurrency in concurrencies:
                                url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
                                r = perf([*flags, "-u", url, "-i", protocol], args.interval_ms,
                                         Path(work) / "pa.csv", concurrency)
                                r.update(which=which, case=case, protocol=protocol,
                                         concurrency=concurrency, round=round_)
                                rows.append(r)
                                print(r, file=sys.stderr, flush=True)
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
    print("| case | protocol | c | old inf/s | new inf/s | new/old | old p50 µs | new p50 µs |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        for protocol in protocols:
            for concurrency in concurrencies:
                def med(which, key):
                    return statistics.median(
                        r[key] for r in rows if r["which"] == which and r["case"] == case
                        and r["protocol"] == protocol and r["concurrency"] == concurrency)
                old_t, new_t = med("old", "throughput"), med("new", "throughput")
                print(f"| {case} | {protocol} | {concurrency} | {old_t:.0f} | {new_t:.0f} | "
                      f"{new_t / old_t:.2f} | {med('old', 'p50_us'):.0f} | "
                      f"{med('new', 'p50_us'):.0f} |")
    print(f"\n(medians of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
