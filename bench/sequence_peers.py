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
import sys
import tempfile
import time
from pathlib import Path

from perf_tools import REPO, free_ports, perf_with_cpu, print_medians, start_sidecar
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
                        # `-x 1`: the forwarding sidecar's statistics do not count the calls (the
                        # owner's do), so perf_analyzer cannot tell the version from them.
                        result = perf_with_cpu(["-m", MODEL, "-x", "1", "-u", url, "-i", protocol,
                                                "--sequence-length", "20",
                                                "--sequence-id-range", f"{seq_id}:{seq_id + 1}"],
                                               [a, b, alone], args.interval_ms,
                                               Path(work) / "pa.csv")
                        result.update(variant=name, protocol=protocol, round=round_)
                        rows.append(result)
                        print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        for proc in (a, b, alone):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = REPO / "bench/results" / f"sequence-peers-{stamp}.json"
    out.write_text(json.dumps({"sequence_id": seq_id, "peers": peers, "rows": rows}, indent=1))

    print_medians(rows, list(targets), "owner", "call")
    print(f"\n(medians of {args.rounds} rounds; {out.relative_to(REPO)})")


if __name__ == "__main__":
    main()
