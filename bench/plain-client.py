#!/usr/bin/env python3
"""Latency of one V2 binary request sent again and again by a plain keep-alive HTTP/1.1 client
(http.client), one at a time: the percentiles without perf_analyzer's own costs, whose worker
thread spends most of its time having fresh pages zeroed at 1M elements
(docs/performance/archive.md, "The 1M p99 is perf_analyzer's").

    bench/plain-client.py HOST:PORT [--elements 1048576] [--requests 800]

Needs numpy (the conformance venv has it: .venv/bin/python bench/plain-client.py ...).
"""

import argparse
import http.client
import json
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address", help="HOST:PORT of a V2 REST endpoint serving identity_fp32")
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--model", default="identity_fp32")
    args = ap.parse_args()

    n = args.elements
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [n], "datatype": "FP32",
                    "parameters": {"binary_data_size": 4 * n}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }).encode()
    data = np.arange(n, dtype=np.float32)
    body = header + data.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(header)),
               "Content-Type": "application/octet-stream"}
    connection = http.client.HTTPConnection(args.address)
    latencies = []
    for _ in range(args.requests):
        start = time.perf_counter()
        connection.request("POST", f"/v2/models/{args.model}/infer", body, headers)
        response = connection.getresponse()
        answer = response.read()
        latencies.append((time.perf_counter() - start) * 1e3)
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {answer[:200]!r}")
    # The output's bytes are the answer's tail: check them once.
    if answer[-4 * n:] != data.tobytes():
        raise SystemExit("the answer's OUTPUT0 differs from INPUT0")
    ms = np.array(latencies)
    p50, p90, p99, top = np.percentile(ms, [50, 90, 99, 100])
    print(f"{args.address}: {len(ms)} requests, {len(ms) / (ms.sum() / 1e3):.0f}/s; "
          f"p50 {p50:.2f} ms, p90 {p90:.2f} ms, p99 {p99:.2f} ms, max {top:.2f} ms")


if __name__ == "__main__":
    main()
