"""What a canary's split costs a call (docs/sidecar.md, "Canary"): release sidecars with the
built-in models, and perf_analyzer at concurrency 1 on `simple` over gRPC and HTTP:

- plain:        a sidecar with no canary;
- share 0%:     a sidecar given a canary at 0 percent: every call drawn, none sent;
- share 100%:   the same at 100 percent: every call sent on to the canary's sidecar over its
                gRPC port (one more hop on loopback; on a pod network add its round trip);
- the canary:   the canary's sidecar called directly, for the hop's other end.

Rounds alternate the four; medians are printed as a Markdown table, with each row's ratio to
`plain`, and every measurement is written to bench/results/canary-split-<time>.json.

    bench/small.sh canary_split [--rounds 3] [--interval-ms 3000]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from perf_tools import REPO, free_ports, perf_with_cpu, print_medians, start_sidecar

MODEL = "simple"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=3000)
    args = parser.parse_args()
    ports = free_ports(8)
    c_http, c_grpc, p_http, p_grpc, z_http, z_grpc, f_http, f_grpc = ports
    canary = ["--canary-peers", f"127.0.0.1:{c_grpc}"]
    started = {
        "the canary": (start_sidecar(["--http-port", str(c_http), "--grpc-port", str(c_grpc)],
                                     c_http), c_http, c_grpc),
        "plain": (start_sidecar(["--http-port", str(p_http), "--grpc-port", str(p_grpc)],
                                p_http), p_http, p_grpc),
        "share 0%": (start_sidecar(["--http-port", str(z_http), "--grpc-port", str(z_grpc),
                                    *canary, "--canary-traffic-percent", "0"], z_http),
                     z_http, z_grpc),
        "share 100%": (start_sidecar(["--http-port", str(f_http), "--grpc-port", str(f_grpc),
                                      *canary, "--canary-traffic-percent", "100"], f_http),
                       f_http, f_grpc),
    }
    time.sleep(1.5)  # the canary's first probe
    order = ["plain", "share 0%", "share 100%", "the canary"]
    procs = [p for p, _, _ in started.values()]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(args.rounds):
                for name in order if round_ % 2 == 0 else list(reversed(order)):
                    _, http, grpc = started[name]
                    for protocol in ("grpc", "http"):
                        url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
                        # `-x 1`: a forwarding sidecar's statistics do not count the calls (the
                        # canary's do), so perf_analyzer cannot tell the version from them.
                        result = perf_with_cpu(["-m", MODEL, "-x", "1", "-u", url, "-i",
                                                protocol], procs, args.interval_ms,
                                               Path(work) / "pa.csv")
                        result.update(variant=name, protocol=protocol, round=round_)
                        rows.append(result)
                        print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = REPO / "bench/results" / f"canary-split-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1))

    print_medians(rows, order, "plain", "sidecar")
    print(f"\n(medians of {args.rounds} rounds; {out.relative_to(REPO)})")


if __name__ == "__main__":
    main()
