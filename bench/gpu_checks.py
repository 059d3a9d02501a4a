#!/usr/bin/env python3
"""The GPU machine's checks that are not throughput rows (bench/gpu-machine.sh runs them through
bench/offline-run.sh, which sets the environment bench/harness.py needs).

  correctness OUT   Triton's own CUDA shared-memory example clients, unmodified
                    (simple_http_cudashm_client.py and simple_grpc_cudashm_client.py from the
                    client repository, bundled by bench/bundle.sh), then this repository's CUDA
                    tests (tests/conformance/test_cuda_shared_memory.py in mode B, and
                    tests/upstream/test_cuda_forwarding.py), against three servers: the sidecar
                    with its built-in models, the sidecar in front of Triton 2.51 as deployed
                    (staging pool, REST for small calls; the clients' handles passed through),
                    and Triton alone. Writes OUT/correctness.md (one row per case, one column per
                    server) and OUT/junit-*.xml.
  profile OUT       perf (the software clock, sampling with DWARF call stacks) on the sidecar in
                    front of Triton while perf_analyzer sends it 16-element calls at
                    concurrency 1, over gRPC and then HTTP. Writes OUT/profile-<protocol>.folded
                    (one line per call stack and its sample count, the input of a flame graph)
                    and OUT/profile-<protocol>.top.txt (the functions with most samples, self and
                    with callees). Needs PERF (a perf binary; bench/bundle.sh carries Debian's).

Every step has a time limit and its failure is written down; the next step still runs.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (bench/harness.py: servers started as the benchmark starts them)

REPO = harness.REPO
EXAMPLES = ("simple_http_cudashm_client.py", "simple_grpc_cudashm_client.py")
SERVERS = ("sidecar", "triton", "sidecar→triton")


def log(message: str):
    print(f"[gpu-checks {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def start_servers(work: Path, servers: dict[str, harness.System]):
    """The sidecar alone, Triton alone, and the sidecar in front of a Triton of its own (as in
    the benchmark: a client's unregister-all on one server must not drop the other's regions).
    Into `servers`, as each becomes ready: one that fails to start is left out and said."""
    starts = {
        "sidecar": lambda: harness.start_sidecar("sidecar", work, []),
        "triton": lambda: harness.start_triton(work / "triton"),
        "sidecar→triton": lambda: start_front(work),
    }
    for name, start in starts.items():
        try:
            servers[name] = start()
        except Exception as exc:  # a server that does not start: the others are still checked
            log(f"{name} did not start: {exc}")


def start_front(work: Path) -> harness.System:
    upstream = harness.start_triton(work / "upstream")
    try:
        # As the operator deploys it (bench/gpu-machine.sh measures the same front).
        front = harness.start_sidecar("front", work, harness.deployed_front_args(upstream))
    except Exception:
        upstream.stop()
        raise
    front.name = "sidecar→triton"
    front.upstream = upstream.procs
    front.procs = front.procs + upstream.procs
    return front


def run_logged(args: list[str], out: Path, env: dict | None = None, timeout: float = 120.0) -> int:
    """Runs a command with its output in `out`; its exit status, or 124 when it ran too long."""
    with out.open("wb") as sink:
        try:
            return subprocess.run(args, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                  cwd=REPO, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            sink.write(f"\n[gpu-checks] stopped after {timeout:.0f} s\n".encode())
            return 124


def junit_outcomes(path: Path) -> dict[str, str]:
    """test name -> passed, failed, skipped or xfailed, from pytest's JUnit XML."""
    outcomes = {}
    if not path.exists():
        return outcomes
    for case in ET.parse(path).iter("testcase"):
        name = f"{Path(case.get('classname', '').replace('.', '/')).name}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        outcomes[name] = outcome
    return outcomes


def correctness(out: Path, servers: dict[str, harness.System]) -> int:
    examples = Path(os.environ.get("TRITON_CLIENT_EXAMPLES", ""))
    python = sys.executable
    results: dict[str, dict[str, str]] = collections.defaultdict(dict)
    notes = []

    probe = subprocess.run(
        [python, "-c", "import sys; sys.path.insert(0, 'tests/conformance'); "
         "import support, cuda.bindings; "
         "print('cuda.bindings', cuda.bindings.__version__, '|', "
         "support.cuda_unusable_reason() or 'CUDA usable')"],
        capture_output=True, text=True, cwd=REPO)
    said = (probe.stdout.strip() or probe.stderr.strip() or "nothing").splitlines()[-1]
    notes.append(f"client side: {said}")
    log(notes[-1])

    for example in EXAMPLES:
        script = examples / example
        for name, server in servers.items():
            if not script.exists():
                results[f"example {example}"][name] = "missing"
                continue
            url = server.http if "_http_" in example else server.grpc
            output = out / f"example-{example[:-3]}-{slug(name)}.log"
            rc = run_logged([python, str(script), "-u", url], output, timeout=60)
            text = output.read_text(errors="replace")
            # Each example exits 1 on a wrong answer and ends with "PASS: ..." ("PASS: cudashm",
            # "PASS: cuda shared memory").
            verdict = "passed" if rc == 0 and "\nPASS: " in text else f"failed (exit {rc})"
            results[f"example {example}"][name] = verdict
            log(f"{example} against {name}: {verdict}")

    suites = {
        "sidecar": {},
        "triton": {"INFERGATE_ORACLE": "triton251"},
        "sidecar→triton": {"INFERGATE_BACKEND": "upstream-triton"},
    }
    for name, extra in suites.items():
        server = servers.get(name)
        if server is None:
            continue
        junit = out / f"junit-cuda-{slug(name)}.xml"
        env = {**os.environ, **extra, "INFERGATE_HTTP_URL": f"http://{server.http}",
               "INFERGATE_GRPC_URL": server.grpc,
               "INFERGATE_PERF_ANALYZER": os.environ.get("PERF_ANALYZER", "")}
        rc = run_logged([python, "-m", "pytest", "tests/conformance/test_cuda_shared_memory.py",
                         "-p", "no:cacheprovider", "-q", "-rA", f"--junitxml={junit}"],
                        out / f"pytest-cuda-{slug(name)}.log", env=env, timeout=150)
        for test, outcome in junit_outcomes(junit).items():
            results[test][name] = outcome
        log(f"test_cuda_shared_memory.py against {name}: exit {rc}")

    junit = out / "junit-cuda-forwarding.xml"
    rc = run_logged([python, "-m", "pytest", "tests/upstream/test_cuda_forwarding.py",
                     "-p", "no:cacheprovider", "-q", "-rA", f"--junitxml={junit}"],
                    out / "pytest-cuda-forwarding.log", timeout=150)
    for test, outcome in junit_outcomes(junit).items():
        results[test]["sidecar→recording server"] = outcome
    log(f"test_cuda_forwarding.py: exit {rc}")

    columns = [*SERVERS, "sidecar→recording server"]
    lines = ["# CUDA shared memory with Triton's own clients", "", *[f"- {n}" for n in notes], "",
             "| case | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for case, by_server in results.items():
        cells = [by_server.get(c, "—" if c in servers or c not in SERVERS else "not started")
                 for c in columns]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    # The bar: every case Triton passes, the sidecar passes too (alone and in front of Triton).
    short = [case for case, by_server in results.items() if by_server.get("triton") == "passed"
             and any(by_server.get(s) not in ("passed", None) for s in ("sidecar", "sidecar→triton"))]
    lines += ["", f"Cases Triton passes and a sidecar column does not: {len(short)}"]
    lines += [f"- {case}" for case in short]
    (out / "correctness.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [c for c, by in results.items() for v in by.values() if v.startswith("failed")]
    return 1 if failed or short else 0


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name.replace("→", "-to-")).strip("-")


# ----------------------------------------------------------------------------- profile

_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(?P<sym>.+?)\s+\((?P<dso>[^()]*)\)\s*$")
_OFFSET = re.compile(r"\+0x[0-9a-f]+$")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")


def fold(perf_script: str) -> collections.Counter:
    """`perf script` output (leaf frame first) as folded stacks: "thread;root;...;leaf" -> samples."""
    stacks: collections.Counter = collections.Counter()
    thread, frames = None, []

    def flush():
        if thread is not None:
            stacks[";".join([thread, *reversed(frames)])] += 1

    for line in perf_script.splitlines():
        if not line.strip():
            flush()
            thread, frames = None, []
        elif not line[0].isspace():
            flush()
            thread, frames = line.split()[0], []
        else:
            m = _FRAME.match(line)
            if not m:
                continue
            sym = _RUST_HASH.sub("", _OFFSET.sub("", m.group("sym")))
            if sym == "[unknown]":
                dso = Path(m.group("dso")).name or "[unknown]"
                sym = dso if dso.startswith("[") else f"[{dso}]"
            frames.append(sym.replace(";", ":"))
    flush()
    return stacks


def top_functions(stacks: collections.Counter, n: int = 40) -> str:
    total = sum(stacks.values()) or 1
    self_counts: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")[1:]
        if frames:
            self_counts[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples", "", "self %  function"]
    lines += [f"{100 * c / total:6.1f}  {f}" for f, c in self_counts.most_common(n)]
    lines += ["", "with callees %  function"]
    lines += [f"{100 * c / total:6.1f}  {f}" for f, c in inclusive.most_common(n)]
    return "\n".join(lines) + "\n"


def profile(out: Path, servers: dict[str, harness.System], seconds: float, work: Path) -> int:
    perf = os.environ.get("PERF")
    if not perf:
        log("no PERF: no profile")
        return 1
    front = servers.get("sidecar→triton")
    if front is None:
        log("no sidecar in front of Triton: no profile")
        return 1
    pid = front.own_procs()[0].pid
    case = harness.CASES["identity_fp32[16]"]
    rc = 0
    for protocol in ("grpc", "http"):
        data = work / f"perf-{protocol}.data"
        load = threading.Thread(target=lambda: harness.perf_analyzer(
            front, case, protocol, 1, int(seconds * 1000 / 2), work))
        load.start()
        time.sleep(1.0)  # past perf_analyzer's start-up and first calls
        record = run_logged([perf, "record", "-e", "cpu-clock", "-F", "1999", "--call-graph",
                             "dwarf,16384", "-p", str(pid), "-o", str(data), "--", "sleep",
                             str(seconds)], out / f"perf-record-{protocol}.log",
                            timeout=seconds + 60)
        load.join(timeout=120)
        script = subprocess.run([perf, "script", "-i", str(data), "--no-inline"],
                                capture_output=True, text=True, timeout=240)
        stacks = fold(script.stdout)
        if record != 0 or not stacks:
            log(f"profile over {protocol}: perf record exit {record}, {len(stacks)} stacks; "
                f"{script.stderr.strip()[-300:]}")
            rc = 1
            continue
        (out / f"profile-{protocol}.folded").write_text(
            "".join(f"{stack} {count}\n" for stack, count in stacks.most_common()))
        (out / f"profile-{protocol}.top.txt").write_text(top_functions(stacks))
        log(f"profile over {protocol}: {sum(stacks.values())} samples")
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("correctness", "profile", "both"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--profile-seconds", type=float, default=5.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="infergate-gpu-checks-"))
    servers: dict[str, harness.System] = {}
    rc = 0
    try:
        if args.what == "profile":
            servers["sidecar→triton"] = start_front(work)
        else:
            start_servers(work, servers)
        if args.what in ("correctness", "both"):
            rc |= correctness(args.out, servers)
        if args.what in ("profile", "both"):
            rc |= profile(args.out, servers, args.profile_seconds, work)
    finally:
        for server in servers.values():
            server.stop()
        for log_file in work.rglob("*.log"):
            if log_file.stat().st_size:
                target = args.out / f"server-{slug(str(log_file.relative_to(work)))}"
                target.write_bytes(log_file.read_bytes()[-200_000:])
    return rc


if __name__ == "__main__":
    sys.exit(main())
