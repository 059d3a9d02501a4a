"""Client load for the fault tests: REST and gRPC callers of an FP32 identity model
through a Service, each answer checked, until a stop file appears (or --seconds pass). Every call ends in one of: an
answer that is right, a wrong answer, or an error the client raised (its message is kept). None
is left unaccounted: a call that hangs past its timeout is an error too.

    load.py HOST [--model NAME] [--threads N] [--protocols rest,grpc] [--seconds S]
        [--stop-file PATH]

Prints one JSON line: calls per protocol, wrong answers, errors grouped by message, and the
times of the first and last error (seconds from the start).
"""

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

def caller(proto, host, model, elements, stop, out, started):
    x = (np.arange(elements, dtype=np.float32) * 0.25 - 2.0).reshape(1, elements)
    ok = wrong = 0
    errors = Counter()
    first_error = last_error = None
    client = None
    while not stop.is_set():
        try:
            if client is None:
                client = (httpclient.InferenceServerClient(f"{host}:8000", network_timeout=30.0)
                          if proto == "rest" else grpcclient.InferenceServerClient(f"{host}:8001"))
            module = httpclient if proto == "rest" else grpcclient
            inputs = [module.InferInput("INPUT0", [1, elements], "FP32")]
            inputs[0].set_data_from_numpy(x)
            kwargs = {"client_timeout": 30.0} if proto == "grpc" else {}
            result = client.infer(model, inputs, **kwargs)
            if np.array_equal(result.as_numpy("OUTPUT0"), x):
                ok += 1
            else:
                wrong += 1
        except Exception as e:  # noqa: BLE001 - every failure is counted with its message
            message = f"{type(e).__name__}: {e}"
            errors[message[:300]] += 1
            now = time.monotonic() - started
            first_error = now if first_error is None else first_error
            last_error = now
            # A client whose connection broke starts afresh, as an application would retry.
            client = None
            time.sleep(0.05)
    out.append({"proto": proto, "ok": ok, "wrong": wrong, "errors": dict(errors),
                "first_error_s": first_error, "last_error_s": last_error})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("--model", default="classifier")
    p.add_argument("--elements", type=int, default=4)
    p.add_argument("--threads", type=int, default=2, help="callers per protocol")
    p.add_argument("--protocols", default="rest,grpc", help="comma separated: rest, grpc")
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--stop-file", default="/tmp/stop-load")
    args = p.parse_args()
    if os.path.exists(args.stop_file):
        os.unlink(args.stop_file)
    stop = threading.Event()
    out = []
    started = time.monotonic()
    threads = [threading.Thread(target=caller, args=(proto, args.host, args.model, args.elements, stop, out, started))
               for proto in args.protocols.split(",") for _ in range(args.threads)]
    for t in threads:
        t.start()
    print("load started", file=sys.stderr, flush=True)
    while time.monotonic() - started < args.seconds and not os.path.exists(args.stop_file):
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    total = {"seconds": round(time.monotonic() - started, 1), "callers": out,
             "hung": sum(t.is_alive() for t in threads)}
    for key in ("ok", "wrong"):
        total[key] = sum(c[key] for c in out)
    total["errors"] = sum(sum(c["errors"].values()) for c in out)
    print(json.dumps(total))


if __name__ == "__main__":
    sys.exit(main())
