"""What a forwarded sequence request costs (docs/sequences.md): two release sidecars A and B,
peers of each other, and perf_analyzer at concurrency 1 sending sequences of the built-in
`sequence_accumulator` (length 20) over gRPC and HTTP:

- alone:     a sidecar without peers;
- owner:     A, with peers, for a sequence id A owns (routed to itself);
- forwarded: B, for the same id: every request goes on to A over A's gRPC port.

The id is picked with tests/tools/rendezvous.py, the owner computation written independently of
the sidecar. Rounds alternate the three; medians are printed as a Markdown table, with each row's
ratio to `owner`, and every measurement is written to bench/results/sequence-peers-<time>.json.

    bench/small.sh sequence_peers [--rounds 3] [--interval-ms 3000]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perf_tools import REPO, cpu_seconds, free_ports, perf, start_sidecar
from rendezvous import owner  # tests/tools, on the path perf_tools set

MODEL = "sequence_accumulator"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=3000)
    args = parser.parse_args()
    a_http, a_grpc, b_http, b_grpc, s_http, s_grpc = free_ports(6)
    peers = [f"127.0.0.1:{a_grpc}", f"127.0.0.1:{b_grpc}"]
    seq_id = next(i for i in range(1000, 100_000) if owner(peers, MODEL, i) == 0)
    listed = ["--sequence-peers", ",".join(peers)]
    a = start_sidecar(["--http-port", str(a_http), "--grpc-port", str(a_grpc), *listed], a_http)
    b = start_sidecar(["--http-port", str(b_http), "--grpc-port", str(b_grpc), *listed], b_http)
    alone = start_sidecar(["--http-port", str(s_http), "--grpc-port", str(s_grpc)], s_http)
    time.sleep(1.5)  # the peers' first probes
    targets = {
        "alone": (alone, s_http, s_grpc),
        "owner": (a, a_http, a_grpc),
        "forwarded": (b, b_http, b_grpc),
    }
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(args.rounds):
                for name, (proc, http, grpc) in targets.items():
                    for protocol in ("grpc", "http"):
                        url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
                        busy = [a, b, alone]
                        before = [cpu_seconds(p.pid) for p in busy]
                        started = time.monotonic()
                        # `-x 1`: the forwarding sidecar's statistics do not count the calls (the
                        # owner's do), so perf_analyzer cannot tell the version from them.
                        result = perf(["-m", MODEL, "-x", "1", "-u", url, "-i", protocol,
                                       "--sequence-length", "20",
                                       "--sequence-id-range", f"{seq_id}:{seq_id + 1}"],
                                      args.interval_ms, Path(work) / "pa.csv")
                        elapsed = time.monotonic() - started
                        used = sum(cpu_seconds(p.pid) for p in busy) - sum(before)
                        calls = result["throughput"] * elapsed
                        result.update(variant=name, protocol=protocol, round=round_,
                                      sidecars_cpu_us_per_call=1e6 * used / calls if calls else None)
                        rows.append(result)
                        print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        for proc in (a, b, alone):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = REPO / "bench/results" / f"sequence-peers-{stamp}.json"
    out.write_text(json.dumps({"sequence_id": seq_id, "peers": peers, "rows": rows}, indent=1))

    def median(name, protocol, key):
        return statistics.median(r[key] for r in rows
                                 if r["variant"] == name and r["protocol"] == protocol)

    print("| protocol | call | inferences/s | p50 µs | p99 µs | sidecars' CPU µs/call | "
          "throughput / owner's | p50 / owner's |")
    print("|---|---|---|---|---|---|---|---|")
    for protocol in ("grpc", "http"):
        base_t = median("owner", protocol, "throughput")
        base_p50 = median("owner", protocol, "p50_us")
        for name in targets:
            t = median(name, protocol, "throughput")
            p50 = median(name, protocol, "p50_us")
            print(f"| {protocol} | {name} | {t:.0f} | {p50:.0f} | "
                  f"{median(name, protocol, 'p99_us'):.0f} | "
                  f"{median(name, protocol, 'sidecars_cpu_us_per_call'):.1f} | "
                  f"{t / base_t:.2f} | {p50 / base_p50:.2f} |")
    print(f"\n(medians of {args.rounds} rounds; {out.relative_to(REPO)})")


if __name__ == "__main__":
    main()
