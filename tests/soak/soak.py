#!/usr/bin/env python3
"""Bounded soak test of infergate-sidecar (see tests/soak/README.md).

Starts the sidecar binary (ephemeral ports, JSON log, client shared memory
allowed), then for --seconds runs --workers concurrent worker processes that
mix HTTP binary / HTTP JSON / gRPC unary / gRPC streaming / system shared
memory inference with sequences interleaved, checking every answer's values.
Once a second it samples the sidecar's /proc/<pid> (VmRSS, threads, open fds,
mappings of /dev/shm objects) and the soak's own objects in /dev/shm.

At the end every worker finishes its open sequence, unregisters and destroys
its regions; the sidecar is stopped with SIGTERM and must exit 0. A CSV of the
samples and a JSON summary are written to --out. Exit status 0 only when all
gates hold (see README): no unexpected error, RSS flat after warm-up, no fd
growth, no leaked shm objects or mappings, no failure in the sidecar's metrics.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import queue
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "infergate-sidecar"
ADDR_KEYS = ("http_addr", "grpc_addr", "metrics_addr")
MIB = 1024 * 1024

# Operation mix of a worker (weights). Sequence steps are interleaved on top.
OPS = {
    "http_bin_simple": 3,
    "http_bin_fp32_16": 2,
    "http_bin_fp32_64k": 1,
    "http_json_simple": 2,
    "grpc_unary_simple": 2,
    "grpc_unary_fp32_64k": 1,
    "grpc_stream_simple": 2,
    "shm_http": 2,
    "shm_grpc": 2,
}
CHURN_WEIGHT = 2  # extra op "shm_churn" on churn workers
SEQ_PROB = 0.5  # chance of a sequence step after each operation
SEQ_MODELS = ("sequence_accumulator", "simple_sequence")
SEQ_PROTOCOLS = ("http", "grpc", "stream")


# =========================================================================== sidecar
def _walk(obj, found):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ADDR_KEYS and isinstance(v, str):
                found.setdefault(k, v)
            else:
                _walk(v, found)
    elif isinstance(obj, list):
        for v in obj:
            _walk(v, found)


def _connectable(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def start_sidecar(binary: Path, log_path: Path, extra: list, timeout: float = 30.0):
    args = [str(binary), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
            "--admin-port", "0", "--log-format", "json", "--allow-client-shm"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1)
    found: dict = {}
    ready = threading.Event()

    def drain():
        with open(log_path, "w", encoding="utf-8") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if not ready.is_set():
                    start = line.find("{")
                    if start >= 0:
                        try:
                            _walk(json.loads(line[start:]), found)
                        except ValueError:
                            pass
                    if all(k in found for k in ADDR_KEYS):
                        ready.set()

    threading.Thread(target=drain, daemon=True, name="sidecar-log").start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"sidecar did not log its addresses (found {found}); log {log_path}")
    addrs = {k: _connectable(v) for k, v in found.items()}
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{addrs['http_addr']}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return proc, addrs
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"sidecar never became ready; log {log_path}")


def http_get_json(hostport: str, path: str):
    with urllib.request.urlopen(f"http://{hostport}{path}", timeout=10) as r:
        return json.loads(r.read())


def metrics_totals(hostport: str) -> dict:
    """Sums of nv_inference_request_success / _failure over all models."""
    with urllib.request.urlopen(f"http://{hostport}/metrics", timeout=10) as r:
        text = r.read().decode()
    tot = {"success": 0.0, "failure": 0.0}
    for line in text.splitlines():
        m = re.match(r"nv_inference_request_(success|failure)(\{[^}]*\})?\s+([0-9.eE+-]+)$", line)
        if m:
            tot[m.group(1)] += float(m.group(3))
    return tot


# =========================================================================== sampling
def shm_objects(prefix: str) -> list:
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    except OSError:
        return []


def sample(pid: int, prefix: str) -> dict:
    rss_kib = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    maps = 0
    soak_maps = 0
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if "/dev/shm/" in line:
                maps += 1
                if f"/dev/shm/{prefix}" in line:
                    soak_maps += 1
    return {"rss_kib": rss_kib, "threads": threads, "fds": fds, "shm_maps": maps,
            "soak_shm_maps": soak_maps, "soak_shm_objects": len(shm_objects(prefix))}


# =========================================================================== worker
class Mismatch(Exception):
    pass


def worker_main(idx: int, addrs: dict, prefix: str, churn: bool, stop, out_q, seed: int, started):
    """One worker process. Reports {'idx', 'counts', 'errors', 'latency'} on out_q."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    counts: dict = {}
    errors: list = []
    err_count: dict = {}
    lat_sum: dict = {}

    def ok(kind, t0):
        counts[kind] = counts.get(kind, 0) + 1
        lat_sum[kind] = lat_sum.get(kind, 0.0) + (time.monotonic() - t0)

    def fail(kind, exc):
        err_count[kind] = err_count.get(kind, 0) + 1
        if len(errors) < 20:
            errors.append(f"w{idx} {kind} t={time.time():.3f}: {type(exc).__name__}: {exc}"[:600])
            print(errors[-1], file=sys.stderr, flush=True)

    def check(cond, what):
        if not cond:
            raise Mismatch(what)

    hc = httpclient.InferenceServerClient(addrs["http_addr"], connection_timeout=60, network_timeout=60)
    gc = grpcclient.InferenceServerClient(addrs["grpc_addr"])
    stream_q: "queue.Queue" = queue.Queue()
    gc.start_stream(callback=lambda result, error: stream_q.put((result, error)))
    stream_seq = [0]

    def stream_infer(model, inputs, outputs=None, **kw):
        stream_seq[0] += 1
        rid = f"w{idx}-{stream_seq[0]}"
        gc.async_stream_infer(model, inputs, outputs=outputs, request_id=rid, **kw)
        result, error = stream_q.get(timeout=60)
        if error is not None:
            raise error
        check(result.get_response().id == rid, f"stream response id {result.get_response().id} != {rid}")
        return result

    def simple_inputs(mod, a, b, binary=True):
        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        if mod is httpclient:
            ins[0].set_data_from_numpy(a, binary_data=binary)
            ins[1].set_data_from_numpy(b, binary_data=binary)
        else:
            ins[0].set_data_from_numpy(a)
            ins[1].set_data_from_numpy(b)
        return ins

    def rand_i32():
        return nrng.integers(-(2**20), 2**20, size=(1, 16), dtype=np.int32)

    def check_simple(res, a, b):
        check(np.array_equal(res.as_numpy("OUTPUT0"), a + b), "simple OUTPUT0 != a+b")
        check(np.array_equal(res.as_numpy("OUTPUT1"), a - b), "simple OUTPUT1 != a-b")

    def fp32_roundtrip(mod, n, call):
        x = nrng.random(n, dtype=np.float32)
        inp = mod.InferInput("INPUT0", [n], "FP32")
        if mod is httpclient:
            inp.set_data_from_numpy(x, binary_data=True)
            outs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        else:
            inp.set_data_from_numpy(x)
            outs = None
        res = call("identity_fp32", [inp], outs)
        y = res.as_numpy("OUTPUT0")
        check(y is not None and y.shape == (n,) and np.array_equal(y.view(np.int32), x.view(np.int32)),
              f"identity_fp32[{n}] output differs")

    # ---- shared memory: this worker's own regions, registered once and reused
    own = []  # (name, handle)

    def new_region(tag, size):
        key = f"/{prefix}w{idx}_{tag}"
        handle = shm.create_shared_memory_region(key.lstrip("/"), key, size, create_only=True)
        return key, handle

    in_key, in_h = new_region("in", 128)
    out_key, out_h = new_region("out", 128)
    in_name, out_name = f"{prefix}w{idx}_in", f"{prefix}w{idx}_out"
    hc.register_system_shared_memory(in_name, in_key, 128)
    gc.register_system_shared_memory(out_name, out_key, 128)
    own += [(in_name, in_h), (out_name, out_h)]

    def shm_infer(mod, client, in_region, in_handle, out_region, out_handle, kind):
        a, b = rand_i32(), rand_i32()
        shm.set_shared_memory_region(in_handle, [a])
        shm.set_shared_memory_region(in_handle, [b], offset=64)
        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_shared_memory(in_region, 64)
        ins[1].set_shared_memory(in_region, 64, offset=64)
        if mod is httpclient:
            outs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                    httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        else:
            outs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
        outs[0].set_shared_memory(out_region, 64)
        outs[1].set_shared_memory(out_region, 64, offset=64)
        res = client.infer("simple", ins, outputs=outs)
        if mod is httpclient:
            for name in ("OUTPUT0", "OUTPUT1"):
                o = res.get_output(name)
                check(o is not None and "data" not in o
                      and "binary_data_size" not in (o.get("parameters") or {}),
                      f"{kind}: {name} came inline, not in shm: {o}")
        else:
            check(not any(res.get_response().raw_output_contents), f"{kind}: outputs came inline, not in shm")
        o0 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]).copy()
        o1 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=64).copy()
        check(np.array_equal(o0, a + b), f"{kind}: shm OUTPUT0 != a+b")
        check(np.array_equal(o1, a - b), f"{kind}: shm OUTPUT1 != a-b")

    churn_n = [0]

    def shm_churn():
        churn_n[0] += 1
        tag = f"c{churn_n[0]}"
        key, h = new_region(tag, 128)
        name = f"{prefix}w{idx}_{tag}"
        use_grpc = churn_n[0] % 2 == 0
        client, mod = (gc, grpcclient) if use_grpc else (hc, httpclient)
        try:
            client.register_system_shared_memory(name, key, 128)
            try:
                shm_infer(mod, client, name, h, name, h, "shm_churn")
            finally:
                client.unregister_system_shared_memory(name)
        finally:
            shm.destroy_shared_memory_region(h)

    # ---- sequences: one open sequence per worker, steps interleaved with other ops
    seq_base = (seed % 1000 + 1) * 10_000_000 + idx * 100_000
    seq = {"n": 0, "id": None}

    def seq_new():
        seq["n"] += 1
        seq.update(id=seq_base + seq["n"], model=SEQ_MODELS[seq["n"] % 2],
                   proto=SEQ_PROTOCOLS[(seq["n"] // 2) % 3], left=rng.randint(2, 8), pos=0, total=0)

    def seq_step(force_end=False):
        if seq["id"] is None:
            seq_new()
        model, sid = seq["model"], seq["id"]
        start = seq["pos"] == 0
        end = force_end or seq["pos"] + 1 >= seq["left"]
        value = rng.randint(-1000, 1000)
        if model == "sequence_accumulator":
            want = (0 if start else seq["total"]) + value
        else:  # simple_sequence: OUTPUT = (INPUT + START) * READY
            want = value + int(start)
        kind = f"seq_{model}_{seq['proto']}"
        mod = httpclient if seq["proto"] == "http" else grpcclient
        inp = mod.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        kw = dict(sequence_id=sid, sequence_start=start, sequence_end=end)
        t0 = time.monotonic()
        try:
            if seq["proto"] == "http":
                res = hc.infer(model, [inp], **kw)
            elif seq["proto"] == "grpc":
                res = gc.infer(model, [inp], **kw)
            else:
                res = stream_infer(model, [inp], **kw)
            got = int(res.as_numpy("OUTPUT").reshape(-1)[0])
            check(got == want, f"{model} seq {sid} step {seq['pos']}: OUTPUT {got} != {want}")
            ok(kind, t0)
            if end:
                counts["sequences_completed"] = counts.get("sequences_completed", 0) + 1
        except Exception as exc:  # noqa: BLE001 - every failure is recorded
            fail(kind, exc)
            seq["id"] = None  # abandon it; the next step starts a fresh sequence
            return
        seq["pos"] += 1
        seq["total"] = want if model == "sequence_accumulator" else 0
        if end:
            seq["id"] = None

    # ---- operations
    def op(kind):
        if kind == "http_bin_simple":
            a, b = rand_i32(), rand_i32()
            check_simple(hc.infer("simple", simple_inputs(httpclient, a, b)), a, b)
        elif kind == "http_bin_fp32_16":
            fp32_roundtrip(httpclient, 16, lambda m, i, o: hc.infer(m, i, outputs=o))
        elif kind == "http_bin_fp32_64k":
            fp32_roundtrip(httpclient, 65536, lambda m, i, o: hc.infer(m, i, outputs=o))
        elif kind == "http_json_simple":
            a, b = rand_i32(), rand_i32()
            outs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
                    httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
            check_simple(hc.infer("simple", simple_inputs(httpclient, a, b, binary=False), outputs=outs), a, b)
        elif kind == "grpc_unary_simple":
            a, b = rand_i32(), rand_i32()
            check_simple(gc.infer("simple", simple_inputs(grpcclient, a, b)), a, b)
        elif kind == "grpc_unary_fp32_64k":
            fp32_roundtrip(grpcclient, 65536, lambda m, i, o: gc.infer(m, i, outputs=o))
        elif kind == "grpc_stream_simple":
            a, b = rand_i32(), rand_i32()
            check_simple(stream_infer("simple", simple_inputs(grpcclient, a, b)), a, b)
        elif kind == "shm_http":
            shm_infer(httpclient, hc, in_name, in_h, out_name, out_h, kind)
        elif kind == "shm_grpc":
            shm_infer(grpcclient, gc, in_name, in_h, out_name, out_h, kind)
        elif kind == "shm_churn":
            shm_churn()
        else:
            raise KeyError(kind)

    kinds = list(OPS) + (["shm_churn"] if churn else [])
    weights = list(OPS.values()) + ([CHURN_WEIGHT] if churn else [])
    # Set up (imports, clients): the warm-up counts from when every worker is here.
    with started.get_lock():
        started.value += 1
    try:
        while not stop.is_set():
            kind = rng.choices(kinds, weights)[0]
            t0 = time.monotonic()
            try:
                op(kind)
                ok(kind, t0)
            except Exception as exc:  # noqa: BLE001
                fail(kind, exc)
            if rng.random() < SEQ_PROB:
                seq_step()
        if seq["id"] is not None:  # finish the open sequence with END
            seq_step(force_end=True)
    finally:
        for kind, fn in (
            ("cleanup_unregister", lambda: (hc.unregister_system_shared_memory(in_name),
                                            gc.unregister_system_shared_memory(out_name))),
            ("cleanup_destroy", lambda: [shm.destroy_shared_memory_region(h) for _, h in own]),
            ("cleanup_stream", gc.stop_stream),
            ("cleanup_close", lambda: (hc.close(), gc.close())),
        ):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                fail(kind, exc)
        out_q.put({"idx": idx, "counts": counts, "errors": errors, "err_count": err_count,
                   "lat_sum": lat_sum})


def worker_entry(*args):
    try:
        worker_main(*args)
    except Exception:  # setup failure: report it as an error
        out_q = args[5]
        out_q.put({"idx": args[0], "counts": {}, "errors": [traceback.format_exc()[-600:]],
                   "err_count": {"worker_setup": 1}, "lat_sum": {}})


# =========================================================================== main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="load duration (default 120)")
    ap.add_argument("--workers", type=int, default=16, help="concurrent worker processes (default 16)")
    ap.add_argument("--churn-every", type=int, default=4,
                    help="every Nth worker also registers/unregisters a fresh region in a loop (default 4)")
    ap.add_argument("--warmup-fraction", type=float, default=0.2)
    ap.add_argument("--rss-tolerance-pct", type=float, default=10.0)
    ap.add_argument("--rss-tolerance-mib", type=float, default=16.0)
    ap.add_argument("--fd-slack", type=int, default=8)
    ap.add_argument("--binary", default=os.environ.get("INFERGATE_SIDECAR_BIN", str(DEFAULT_BIN)))
    ap.add_argument("--out", default=None, help="directory for samples.csv, summary.json, sidecar.log")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("sidecar_args", nargs="*", help="extra sidecar flags (after --)")
    args = ap.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="infergate-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**6)
    prefix = f"igsoak{os.getpid()}_"
    binary = Path(args.binary)
    if not binary.exists():
        print(f"sidecar binary not found: {binary}", file=sys.stderr)
        return 4

    proc, addrs = start_sidecar(binary, out / "sidecar.log", args.sidecar_args)
    pid = proc.pid
    print(f"sidecar pid {pid} {addrs}; out {out}; seed {seed}; prefix {prefix}", flush=True)

    samples: list = []
    t_start = time.monotonic()
    phase = {"name": "start"}
    sampling = threading.Event()

    def sampler():
        while not sampling.is_set():
            try:
                s = sample(pid, prefix)
            except OSError:
                break
            s["t"] = round(time.monotonic() - t_start, 2)
            s["phase"] = phase["name"]
            samples.append(s)
            sampling.wait(1.0)

    base = sample(pid, prefix)
    threading.Thread(target=sampler, daemon=True, name="sampler").start()

    ctx = mp.get_context("fork")
    stop = ctx.Event()
    out_q = ctx.Queue()
    started = ctx.Value("i", 0)
    workers = []
    for i in range(args.workers):
        churn = args.churn_every > 0 and i % args.churn_every == args.churn_every - 1
        p = ctx.Process(target=worker_entry, args=(i, addrs, prefix, churn, stop, out_q, seed * 1000 + i, started),
                        daemon=True, name=f"soak-w{i}")
        p.start()
        workers.append(p)

    # Importing tritonclient in 16 processes takes seconds on a busy machine: a warm-up timed from
    # the processes' start could end before the load is all there, and the load's own connections
    # and regions would then read as growth.
    setup_deadline = time.monotonic() + 120
    while (started.value < len(workers) and time.monotonic() < setup_deadline
           and any(p.is_alive() for p in workers)):
        time.sleep(0.1)
    phase["name"] = "warmup"
    t_load = time.monotonic()
    warm_end_t = t_load + args.seconds * args.warmup_fraction
    end_t = t_load + args.seconds
    sidecar_died = None
    while time.monotonic() < end_t:
        if time.monotonic() >= warm_end_t:
            phase["name"] = "load"
        if proc.poll() is not None:
            sidecar_died = proc.returncode
            break
        time.sleep(0.25)
    t_stop = time.monotonic()
    stop.set()
    phase["name"] = "drain"

    results = []
    deadline = time.monotonic() + 90
    while len(results) < len(workers) and time.monotonic() < deadline:
        try:
            results.append(out_q.get(timeout=1))
        except queue.Empty:
            pass
    for p in workers:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    load_seconds = t_stop - t_load

    problems: list = []
    if sidecar_died is not None:
        problems.append(f"sidecar exited during the run with status {sidecar_died}")
    if len(results) < len(workers):
        problems.append(f"only {len(results)} of {len(workers)} workers reported")

    # ---- after the load: everything unregistered, nothing of ours mapped
    time.sleep(1.5)
    phase["name"] = "idle"
    time.sleep(1.5)
    after = sample(pid, prefix) if proc.poll() is None else None
    shm_status = metrics = None
    if proc.poll() is None:
        try:
            shm_status = http_get_json(addrs["http_addr"], "/v2/systemsharedmemory/status")
            metrics = metrics_totals(addrs["metrics_addr"])
        except OSError as exc:
            problems.append(f"status/metrics query failed: {exc}")
    sampling.set()

    # ---- SIGTERM must exit 0
    exit_code = None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            exit_code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = "timeout (killed)"
    else:
        exit_code = proc.returncode
    if exit_code != 0:
        problems.append(f"sidecar exit status after SIGTERM: {exit_code}")
    leftover = shm_objects(prefix)

    # ---- aggregate
    counts: dict = {}
    err_count: dict = {}
    lat_sum: dict = {}
    errors: list = []
    for r in results:
        for d, src in ((counts, r["counts"]), (err_count, r["err_count"]), (lat_sum, r["lat_sum"])):
            for k, v in src.items():
                d[k] = d.get(k, 0) + v
        errors += r["errors"]
    requests = {k: v for k, v in counts.items() if k != "sequences_completed"}
    total_ok = sum(requests.values())
    total_err = sum(err_count.values())
    if total_err:
        problems.append(f"{total_err} unexpected errors: {err_count}")

    load = [s for s in samples if s["phase"] in ("warmup", "load")]
    warm = [s for s in load if s["phase"] == "warmup"]
    steady = [s for s in load if s["phase"] == "load"]
    if len(warm) < 3 or len(steady) < 3:
        problems.append("too few samples (run longer)")
        warm = warm or load or samples
        steady = steady or load or samples

    def med(xs):
        return int(statistics.median(xs))

    rss_warm = med([s["rss_kib"] for s in warm[-3:]])
    rss_end = med([s["rss_kib"] for s in steady[-3:]])
    rss_max = max(s["rss_kib"] for s in samples)
    rss_tol = max(rss_warm * args.rss_tolerance_pct / 100.0, args.rss_tolerance_mib * 1024)
    if rss_end - rss_warm > rss_tol:
        problems.append(f"RSS grew {rss_end - rss_warm} KiB after warm-up (tolerance {int(rss_tol)} KiB)")
    # least-squares slope of RSS over the steady phase, for information
    xs, ys = [s["t"] for s in steady], [s["rss_kib"] for s in steady]
    slope = 0.0
    if len(xs) > 1:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0

    fd_warm = warm[-1]["fds"]
    fd_end = after["fds"] if after else None
    fd_end_load = steady[-1]["fds"]
    if fd_end_load > fd_warm + args.fd_slack:
        problems.append(f"fds at end of load {fd_end_load} > warm-up end {fd_warm} + slack {args.fd_slack}")
    if fd_end is None or fd_end > fd_warm + args.fd_slack or fd_end > base["fds"] + args.fd_slack:
        problems.append(f"fds after the load {fd_end} > warm-up end {fd_warm} or start {base['fds']}"
                        f" + slack {args.fd_slack}")
    if after is None or after["soak_shm_maps"] != 0 or after["shm_maps"] > base["shm_maps"]:
        problems.append(f"sidecar still maps shm objects after unregistering: {after} (start {base})")
    if shm_status:
        problems.append(f"regions still registered at the end: {[r.get('name') for r in shm_status]}")
    if leftover:
        problems.append(f"/dev/shm objects of the soak left over: {leftover}")
    if metrics is not None and metrics["failure"] != 0:
        problems.append(f"sidecar metrics count {metrics['failure']} failed requests")
    # every inference the workers saw succeed, and nothing else, is counted by the sidecar
    if metrics is not None and not total_err and metrics["success"] != total_ok:
        problems.append(f"sidecar metrics count {metrics['success']} successes, workers {total_ok}")

    summary = {
        "passed": not problems,
        "problems": problems,
        "binary": str(binary),
        "seconds": args.seconds,
        "load_seconds": round(load_seconds, 1),
        "workers": args.workers,
        "churn_workers": sum(1 for i in range(args.workers)
                             if args.churn_every > 0 and i % args.churn_every == args.churn_every - 1),
        "seed": seed,
        "cpus": os.cpu_count(),
        "requests": dict(sorted(requests.items())),
        "sequences_completed": counts.get("sequences_completed", 0),
        "requests_total": total_ok,
        "throughput_rps": round(total_ok / load_seconds, 1) if load_seconds else 0,
        "mean_latency_ms": {k: round(1000 * lat_sum[k] / requests[k], 2) for k in sorted(requests)},
        "errors_total": total_err,
        "errors_by_kind": err_count,
        "error_samples": errors[:20],
        "rss_kib": {"start": base["rss_kib"], "warmup_end": rss_warm, "end": rss_end, "max": rss_max,
                    "after_load": after["rss_kib"] if after else None,
                    "tolerance": int(rss_tol), "steady_slope_kib_per_min": round(slope * 60, 1)},
        "fds": {"start": base["fds"], "warmup_end": fd_warm, "end_of_load": fd_end_load, "end": fd_end,
                "max": max(s["fds"] for s in samples), "slack": args.fd_slack},
        "threads": {"start": base["threads"], "max": max(s["threads"] for s in samples),
                    "end": after["threads"] if after else None},
        "shm": {"max_sidecar_maps": max(s["shm_maps"] for s in samples),
                "max_soak_objects": max(s["soak_shm_objects"] for s in samples),
                "sidecar_maps_end": after["shm_maps"] if after else None,
                "registered_end": shm_status, "leftover_objects": leftover},
        "metrics": metrics,
        "sidecar_exit": exit_code,
        "samples": len(samples),
        "out": str(out),
    }
    with open(out / "samples.csv", "w", newline="") as f:
        cols = ["t", "phase", "rss_kib", "threads", "fds", "shm_maps", "soak_shm_maps", "soak_shm_objects"]
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for s in samples:
            w.writerow({c: s[c] for c in cols})
    with open(out / "summary.json", "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    print(("PASS" if not problems else "FAIL: " + "; ".join(problems)), flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
