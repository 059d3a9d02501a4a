#!/usr/bin/env python3
"""Dynamic batching, measured: the sidecar's batcher in front of model servers that have none,
against no batching and against the model servers' own batchers.

The model costs about the same per call whatever the batch, as a GPU model does: `matmul`
multiplies a [batch, 256] FP32 input by a fixed [256, 256] matrix (NumPy), served the same way
by KServe's ModelServer, MLServer and Triton's python backend, one instance each. The built-in
rows use `custom_identity_int32`, which waits `execute_delay_ms` (2 ms) per execution, batch or
not. perf_analyzer (gRPC) drives every row at concurrency 1, 8 and 32.

| system | what runs where |
|---|---|
| builtin off / on / delay | the sidecar's built-in model, one instance: `max_batch_size` 1 (off); 32 (on); 32 with a 2 ms queue delay (delay) |
| sidecar→kserve off / on | the ModelServer behind the sidecar; on: the sidecar batches (`max_batch_size` 32, no delay) |
| sidecar→mlserver off / sidecar / adaptive | MLServer behind the sidecar: nobody batches; the sidecar batches; MLServer's adaptive batching (`max_batch_size` 32, `max_batch_time` 1 ms) |
| triton own | Triton alone, its `dynamic_batching` (`max_batch_size` 32, no delay) |
| sidecar→triton own / sidecar | the sidecar in front: Triton's batcher (forwarded); Triton without one, the sidecar's |

For each: throughput, p50 and p99 latency, and the mean batch size where a server reports it
(the statistics of whoever batches: `inference_count / execution_count` over the run).

Writes --out/batching.csv, batching.md (the table and the targets as ratios) and batching.png.
Needs (bench/run-batching sets them): INFERGATE_SIDECAR_BIN, PERF_ANALYZER, KSERVE_PY,
MLSERVER_BIN, TRITON_BIN, TRITON_HOME, TRITON_VENV, TRITON_LD_PATH.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_tools import PERF_ANALYZER, REPO, free_ports  # noqa: E402

SIDECAR = os.environ.get("INFERGATE_SIDECAR_BIN", str(REPO / "target/release/infergate-sidecar"))
WIDTH = 256
MAX_BATCH = 32
CONCURRENCY = (1, 8, 32)
DELAY_US = 2000

MATMUL_CORE = f'''
import numpy as np
WIDTH = {WIDTH}
WEIGHTS = np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32)
def matmul(x):
    return (np.asarray(x, dtype=np.float32).reshape(-1, WIDTH) @ WEIGHTS).astype(np.float32)
'''

KSERVE_SERVER = MATMUL_CORE + '''
import sys
import kserve
from kserve.protocol.infer_type import InferOutput, InferResponse

class MatMul(kserve.Model):
    def __init__(self):
        super().__init__("matmul")
        self.load()

    def get_input_types(self):
        return [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, WIDTH]}]

    def get_output_types(self):
        return [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, WIDTH]}]

    def predict(self, payload, headers=None):
        y = matmul(payload.inputs[0].as_numpy())
        out = InferOutput(name="OUTPUT0", shape=list(y.shape), datatype="FP32")
        out.set_data_from_numpy(y, binary_data=True)
        return InferResponse(response_id=payload.id or "", model_name=self.name, infer_outputs=[out])

if __name__ == "__main__":
    http, grpc = int(sys.argv[1]), int(sys.argv[2])
    sys.argv = sys.argv[:1]
    kserve.ModelServer(http_port=http, grpc_port=grpc, enable_latency_logging=False).start([MatMul()])
'''

MLSERVER_RUNTIME = MATMUL_CORE + '''
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

class MatMul(MLModel):
    async def load(self):
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = payload.inputs[0]
        y = matmul(x.data.root if hasattr(x.data, "root") else x.data)
        return InferenceResponse(model_name=self.name, outputs=[ResponseOutput(
            name="OUTPUT0", shape=list(y.shape), datatype="FP32", data=y.ravel().tolist())])
'''

TRITON_MODEL = MATMUL_CORE + '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", matmul(x))]))
        return responses
'''


def triton_config(name: str, batching: bool) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {MAX_BATCH}\n'
        + ("dynamic_batching { }\n" if batching else "")
        + f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


class Run:
    """The processes of one system, stopped together."""

    def __init__(self, work: Path):
        self.work = work
        self.procs: list[subprocess.Popen] = []

    def spawn(self, name: str, args: list[str], env=None, cwd=None) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdout=open(self.work / f"{name}.log", "wb"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


def wait_ready(http: str, proc: subprocess.Popen, log: Path, limit: float = 180):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{log.name} exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"not ready: {log}")


def post(url: str, body: dict):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as r:
        return r.status


def counts(http: str, model: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def sidecar(run: Run, name: str, config: dict | None = None) -> tuple[str, str]:
    """A sidecar (its configuration file from `config`, else the built-in models in explicit
    model control); its HTTP and gRPC addresses."""
    http, grpc = free_ports(2)
    args = [SIDECAR, "--host", "127.0.0.1", "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", "0", "--admin-port", "0", "--log-level", "warn"]
    if config is None:
        args += ["--model-control-mode", "explicit"]
    else:
        path = run.work / f"{name}.json"  # JSON is YAML
        config["server"] = {"host": "127.0.0.1", "http_port": http, "grpc_port": grpc,
                            "metrics_port": 0, "admin_port": 0, "log_level": "warn"}
        path.write_text(json.dumps(config))
        args = [SIDECAR, "--config", str(path)]
    proc = run.spawn(name, args)
    wait_ready(f"127.0.0.1:{http}", proc, run.work / f"{name}.log")
    return f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"


def upstream_config(url: str, batching: dict | None) -> dict:
    model = {"name": "matmul", "max_batch_size": MAX_BATCH}
    if batching is not None:
        model["config"] = {"max_batch_size": MAX_BATCH, "dynamic_batching": batching}
    return {"backend": {"kind": "upstream", "url": url, "staging_shm_bytes": 0,
                        "models": [model]}}


# ----------------------------------------------------------------------------- systems
# Each starts its processes in `run` and answers (gRPC address to measure, model, the HTTP
# address whose statistics count the batches, or None).

def builtin(mode: str):
    def start(run: Run):
        http, grpc = sidecar(run, f"builtin-{mode}")
        with urllib.request.urlopen(f"http://{http}/v2/models/custom_identity_int32/config") as r:
            config = json.load(r)
        config.update({
            "max_batch_size": 1 if mode == "off" else MAX_BATCH,
            "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
            "parameters": {"execute_delay_ms": {"string_value": "2"}},
            "dynamic_batching": {"max_queue_delay_microseconds": DELAY_US if mode == "delay" else 0},
        })
        post(f"http://{http}/v2/repository/models/custom_identity_int32/load",
             {"parameters": {"config": json.dumps(config)}})
        return grpc, "custom_identity_int32", http, "INT32"
    return start


def kserve(mode: str):
    def start(run: Run):
        http, grpc = free_ports(2)
        script = run.work / "kserve_matmul.py"
        script.write_text(KSERVE_SERVER)
        proc = run.spawn("kserve", [os.environ["KSERVE_PY"], str(script), str(http), str(grpc)])
        wait_ready(f"127.0.0.1:{http}", proc, run.work / "kserve.log")
        batching = {"max_queue_delay_microseconds": 0} if mode == "on" else None
        s_http, s_grpc = sidecar(run, f"sidecar-kserve-{mode}",
                                 upstream_config(f"grpc://127.0.0.1:{grpc}", batching))
        return s_grpc, "matmul", s_http, "FP32"
    return start


def mlserver(mode: str):
    def start(run: Run):
        http, grpc = free_ports(2)
        repo = run.work / "mlserver"
        shutil.rmtree(repo, ignore_errors=True)
        (repo / "matmul").mkdir(parents=True)
        (repo / "matmul_runtime.py").write_text(MLSERVER_RUNTIME)
        (repo / "settings.json").write_text(json.dumps({
            "host": "127.0.0.1", "http_port": http, "grpc_port": grpc, "metrics_endpoint": None,
            "parallel_workers": 0, "load_models_at_startup": True}))
        settings = {"name": "matmul", "implementation": "matmul_runtime.MatMul",
                    # The sidecar names the version the metadata lists.
                    "versions": ["1"], "parameters": {"version": "1"},
                    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, WIDTH]}],
                    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, WIDTH]}]}
        if mode == "adaptive":
            settings.update({"max_batch_size": MAX_BATCH, "max_batch_time": 0.001})
        (repo / "matmul" / "model-settings.json").write_text(json.dumps(settings))
        proc = run.spawn("mlserver", [os.environ["MLSERVER_BIN"], "start", str(repo)], cwd=repo)
        wait_ready(f"127.0.0.1:{http}", proc, run.work / "mlserver.log")
        batching = {"max_queue_delay_microseconds": 0} if mode == "sidecar" else None
        s_http, s_grpc = sidecar(run, f"sidecar-mlserver-{mode}",
                                 upstream_config(f"grpc://127.0.0.1:{grpc}", batching))
        return s_grpc, "matmul", s_http if mode == "sidecar" else None, "FP32"
    return start


def triton(mode: str):
    """mode: alone (Triton's batcher, measured directly), own (the sidecar forwards to Triton's
    batcher), sidecar (Triton without a batcher, the sidecar's in front)."""
    def start(run: Run):
        http, grpc = free_ports(2)
        repo = run.work / "triton"
        shutil.rmtree(repo, ignore_errors=True)
        for name, batching in (("matmul", True), ("matmul_plain", False)):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(triton_config(name, batching))
            (repo / name / "1" / "model.py").write_text(TRITON_MODEL)
        home = Path(os.environ["TRITON_HOME"])
        env = {**os.environ, "PATH": f"{os.environ['TRITON_VENV']}/bin:{os.environ['PATH']}",
               "LD_LIBRARY_PATH": os.environ["TRITON_LD_PATH"]}
        proc = run.spawn("triton", [
            os.environ["TRITON_BIN"], f"--model-repository={repo}",
            f"--backend-directory={home / 'backends'}", f"--cache-directory={home / 'caches'}",
            "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc}", "--allow-metrics=false", "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0", "--log-warning=false"], env=env, cwd=run.work)
        wait_ready(f"127.0.0.1:{http}", proc, run.work / "triton.log")
        if mode == "alone":
            return f"127.0.0.1:{grpc}", "matmul", f"127.0.0.1:{http}", "FP32"
        config = {"backend": {"kind": "upstream", "url": f"grpc://127.0.0.1:{grpc}",
                              "staging_shm_bytes": 0}}
        if mode == "own":
            config["backend"]["models"] = [{"name": "matmul"}]
            s_http, s_grpc = sidecar(run, "sidecar-triton-own", config)
            return s_grpc, "matmul", f"127.0.0.1:{http}", "FP32"
        config["backend"]["models"] = [{"name": "matmul_plain", "config": {
            "dynamic_batching": {"max_queue_delay_microseconds": 0}}}]
        s_http, s_grpc = sidecar(run, "sidecar-triton-sidecar", config)
        return s_grpc, "matmul_plain", s_http, "FP32"
    return start


SYSTEMS = {
    "builtin off": builtin("off"),
    "builtin on": builtin("on"),
    "builtin delay 2ms": builtin("delay"),
    "sidecar→kserve off": kserve("off"),
    "sidecar→kserve on": kserve("on"),
    "sidecar→mlserver off": mlserver("off"),
    "sidecar→mlserver sidecar": mlserver("sidecar"),
    "sidecar→mlserver adaptive": mlserver("adaptive"),
    "triton own": triton("alone"),
    "sidecar→triton own": triton("own"),
    "sidecar→triton sidecar": triton("sidecar"),
}


def measure(grpc: str, model: str, datatype: str, concurrency: int, interval_ms: int,
            work: Path) -> dict:
    out = work / "pa.csv"
    out.unlink(missing_ok=True)
    args = [PERF_ANALYZER, "-m", model, "-u", grpc, "-i", "grpc", "--shape", f"INPUT0:{WIDTH}",
            "--concurrency-range", str(concurrency), "--measurement-mode", "time_windows",
            "--measurement-interval", str(interval_ms), "--max-trials", "3",
            "--stability-percentage", "999", "-f", str(out), "--percentile", "99"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not out.exists():
        return {"throughput": 0.0, "p50_us": None, "p99_us": None,
                "error": (done.stdout + done.stderr).strip().splitlines()[-1:]}
    row = next(csv.DictReader(out.open()))
    return {"throughput": float(row["Inferences/Second"]), "p50_us": float(row["p50 latency"]),
            "p99_us": float(row["p99 latency"]), "error": ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.systems.split(","):
        work = Path(tempfile.mkdtemp(prefix="batching-"))
        run = Run(work)
        try:
            grpc, model, stats_http, datatype = SYSTEMS[name](run)
            for concurrency in CONCURRENCY:
                before = counts(stats_http, model) if stats_http else None
                result = measure(grpc, model, datatype, concurrency, args.interval_ms, work)
                mean_batch = None
                if before is not None:
                    rows_, executions = (a - b for a, b in zip(counts(stats_http, model), before))
                    mean_batch = rows_ / executions if executions else None
                row = {"system": name, "concurrency": concurrency, **result,
                       "mean_batch": mean_batch}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            run.stop()
            shutil.rmtree(work, ignore_errors=True)
    write(args.out, rows)
    return 0


def value(rows, system, concurrency, key):
    for row in rows:
        if row["system"] == system and row["concurrency"] == concurrency:
            return row[key]
    return None


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"


def write(out: Path, rows: list[dict]):
    with (out / "batching.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| system | concurrency | infer/s | p50 µs | p99 µs | mean batch |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        mean = f"{r['mean_batch']:.1f}" if r["mean_batch"] else "n/a"
        p50 = f"{r['p50_us']:.0f}" if r["p50_us"] else "n/a"
        p99 = f"{r['p99_us']:.0f}" if r["p99_us"] else "n/a"
        lines.append(f"| {r['system']} | {r['concurrency']} | {r['throughput']:.0f} | {p50} | "
                     f"{p99} | {mean} |")
    t = lambda s, c: value(rows, s, c, "throughput")  # noqa: E731
    p50 = lambda s, c: value(rows, s, c, "p50_us")  # noqa: E731
    lines += [
        "", "| target | measured |", "|---|---|",
        f"| sidecar→kserve on / off at c32 ≥ 3 | {ratio(t('sidecar→kserve on', 32), t('sidecar→kserve off', 32))} |",
        f"| sidecar batching / MLServer adaptive at c32 ≥ 1 | {ratio(t('sidecar→mlserver sidecar', 32), t('sidecar→mlserver adaptive', 32))} |",
        f"| sidecar→triton sidecar / sidecar→triton own at c32 ≥ 0.9 | {ratio(t('sidecar→triton sidecar', 32), t('sidecar→triton own', 32))} |",
        f"| sidecar→triton sidecar / triton own at c32 | {ratio(t('sidecar→triton sidecar', 32), t('triton own', 32))} |",
        f"| builtin on / off p50 at c1 ≈ 1 | {ratio(p50('builtin on', 1), p50('builtin off', 1))} |",
        f"| builtin delay − off p50 at c1 ≤ {DELAY_US} + 200 µs | "
        + (f"{p50('builtin delay 2ms', 1) - p50('builtin off', 1):.0f} µs |"
           if p50('builtin delay 2ms', 1) and p50('builtin off', 1) else "n/a |"),
    ]
    (out / "batching.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(CONCURRENCY)
    for i, c in enumerate(CONCURRENCY):
        ax.bar([x + i * width for x in range(len(systems))],
               [value(rows, s, c, "throughput") or 0 for s in systems], width, label=f"c{c}")
    ax.set_xticks([x + width for x in range(len(systems))], systems, rotation=30, ha="right")
    ax.set_ylabel("inferences / s")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Dynamic batching (perf_analyzer, gRPC)")
    fig.tight_layout()
    fig.savefig(out / "batching.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
