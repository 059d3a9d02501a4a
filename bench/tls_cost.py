"""What TLS costs: per call, and per connection (the handshake), measured in one run.

Per call: perf_analyzer on the built-in `identity_fp32` with 16 and 1,048,576 elements
(`--shape INPUT0:16`, `INPUT0:1048576`), over REST (binary tensor data) and gRPC, at concurrency
1 and 8, against
- `sidecar`: the release sidecar in plaintext (built-in models, no upstream),
- `sidecar+tls`: the same with server TLS on both ports (`--http-use-ssl`, `--grpc-use-ssl`),
- `sidecar+mtls`: the same with mutual TLS (`--*-use-ssl-mutual`, a client certificate given),
- `triton` and `triton+tls`: Triton 2.51 serving `identity_fp32` from
  tests/upstream/make_triton_repo.py (python backend), plaintext gRPC and its own gRPC TLS
  (`--grpc-use-ssl`); gRPC only, Triton has no HTTPS.
Every system runs for the whole run; each round runs every (case, protocol, concurrency) group's
systems back to back, in the opposite order on odd rounds. The table gives the medians over
rounds and, for each TLS row, the ratios to its plaintext row taken within each round (medians):
throughput TLS/plain (under 1 is the cost) and p50 TLS/plain, with the p50 difference in µs.
perf_analyzer keeps its connection for the whole measurement, so these rows hold no handshake:
they are the cost of encrypting and decrypting the bytes. "server CPU" is the server process's
CPU time (user + system, from /proc) over perf_analyzer's whole run divided by the calls made in
it; Triton's is tritonserver's own, its python backend stub apart (the same work in both rows).

Per connection: full TLS handshakes a second each TLS port completes, with `openssl s_time -new`
(a new session every time, no resumption; TLS 1.3, X25519, the RSA-2048 certificate made here),
from 1 client and from several in parallel; and the server's CPU time per handshake, read from
/proc (user + system) over the same seconds. Ports: the sidecar's HTTP and gRPC TLS ports, the
mutual-TLS sidecar's (client certificate sent), and Triton's gRPC TLS port. On a small machine
the clients take CPU from the server: read the parallel figures as a floor.

Certificates (a CA, a server certificate for localhost and 127.0.0.1, a client certificate, all
RSA 2048) are made with openssl in a temporary directory by tests/conformance/certs.py, the TLS
tests' own.

    .venv/bin/python bench/tls_cost.py [--rounds 3] [--interval-ms 2000] \
        [--cases 16,1M] [--protocols http,grpc] [--concurrency 1,8] \
        [--systems sidecar,sidecar+tls,sidecar+mtls,triton,triton+tls] \
        [--handshake-seconds 5] [--handshake-clients 1,4]

The defaults take about 14 minutes on 2 cores (32 perf_analyzer rows and 10 handshake rows a
round). A quick look: --rounds 1 --interval-ms 500 --cases 16 --concurrency 1. A row that
perf_analyzer 2.45 cannot settle ("Failed to obtain stable measurement", seen on the fastest
rows with 2 s windows on a loaded machine) is counted as failed and left out of the medians.

Needs the release sidecar (target/release/infergate-sidecar, or INFERGATE_SIDECAR_BIN),
perf_analyzer (.venv/bin/perf_analyzer, or PERF_ANALYZER) and openssl. Triton is found through
TRITON_BIN, TRITON_HOME, TRITON_VENV and TRITON_LD_PATH as bench/run exports them, or else in
.venv-triton (INFERGATE_TRITON_VENV) once tests/upstream/triton-env.sh has installed it (bench/run
does); without it the triton systems are left out. Progress goes to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from perf_tools import PERF_ANALYZER, REPO, SIDECAR, cpu_seconds, free_ports, perf

sys.path.insert(0, str(REPO / "tests/conformance"))
import certs  # noqa: E402  (openssl: a CA and certificates signed by it)

CASES = {"16": 16, "1M": 1048576}
ALL_SYSTEMS = ("sidecar", "sidecar+tls", "sidecar+mtls", "triton", "triton+tls")
HOST = "127.0.0.1"  # the server certificate names it, so TLS and plaintext use the same address


@dataclass
class System:
    name: str
    server: str  # "sidecar" or "triton"
    tls: str  # "", "tls" or "mtls"
    http: int  # a plaintext port on Triton (readiness only)
    grpc: int
    proc: subprocess.Popen
    log: Path | None = None
    protocols: tuple = ("http", "grpc")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_pki(folder: Path) -> dict:
    authority = certs.ca(folder, "ca")
    return {"ca": authority,
            "server": certs.signed(folder, "server", authority, server=True),
            "client": certs.signed(folder, "client", authority, server=False)}


# ----------------------------------------------------------------------------- servers
def client_context(pki: dict, mutual: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if mutual:
        context.load_cert_chain(str(pki["client"].cert), str(pki["client"].key))
    return context


def start_sidecar(name: str, tls: str, pki: dict, work: Path) -> System:
    """The release sidecar; with `tls`, TLS (or mutual TLS) on both its ports. Ready when
    /v2/health/ready answers 200 (over TLS where the port speaks it)."""
    http_port, grpc_port = free_ports(2)
    args = [SIDECAR, "--metrics-port", "0", "--admin-port", "0", "--log-level", "warn",
            "--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    if tls:
        flag = "-use-ssl-mutual" if tls == "mtls" else "-use-ssl"
        for port in ("http", "grpc"):
            args += [f"--{port}{flag}=1", f"--{port}-server-cert={pki['server'].cert}",
                     f"--{port}-server-key={pki['server'].key}",
                     f"--{port}-root-cert={pki['ca'].cert}"]
    log = work / f"{name}.log"
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    context = client_context(pki, tls == "mtls") if tls else None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {log.read_text()[-2000:]}")
        try:
            if context is None:
                conn = http.client.HTTPConnection(HOST, http_port, timeout=2)
            else:
                conn = http.client.HTTPSConnection(HOST, http_port, context=context, timeout=2)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                conn.close()
                return System(name, "sidecar", tls, http_port, grpc_port, proc, log)
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{name} did not become ready: {log.read_text()[-2000:]}")


def triton_env() -> dict | None:
    """TRITON_BIN, TRITON_HOME, TRITON_VENV, TRITON_LD_PATH: from the environment (bench/run),
    else found in .venv-triton as tests/upstream/triton-env.sh finds them. None if absent."""
    keys = ("TRITON_BIN", "TRITON_HOME", "TRITON_VENV", "TRITON_LD_PATH")
    if all(os.environ.get(k) for k in keys):
        return {k: os.environ[k] for k in keys}
    venv = Path(os.environ.get("INFERGATE_TRITON_VENV", REPO / ".venv-triton"))
    python = venv / "bin/python"
    if not python.exists():
        return None
    found = subprocess.run(
        [str(python), "-c", "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); "
         "print(sysconfig.get_config_var('LIBDIR') or ''); print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True)
    if found.returncode != 0:
        return None
    purelib, libdir, version = found.stdout.split("\n")[:3]
    home = Path(purelib) / "pytriton/tritonserver"
    binary = home / "bin/tritonserver"
    if not binary.exists() or not (home / "backends/python/triton_python_backend_stub").exists():
        return None
    ld = [str(Path(purelib) / "nvidia_pytriton.libs")]
    if libdir and (Path(libdir) / f"libpython{version}.so.1.0").exists():
        ld.insert(0, libdir)
    if os.environ.get("LD_LIBRARY_PATH"):
        ld.append(os.environ["LD_LIBRARY_PATH"])
    return {"TRITON_BIN": str(binary), "TRITON_HOME": str(home), "TRITON_VENV": str(venv),
            "TRITON_LD_PATH": ":".join(ld)}


def start_triton(name: str, tls: str, pki: dict, work: Path, found: dict) -> System:
    """Triton 2.51 with identity_fp32 only (explicit model control: one python stub, not one per
    model of the repository); with `tls`, TLS on its gRPC port. Ready when the model is."""
    repo = work / "models"
    if not repo.exists():
        subprocess.run([sys.executable, str(REPO / "tests/upstream/make_triton_repo.py"),
                        str(repo)], check=True, stdout=subprocess.DEVNULL)
    http_port, grpc_port = free_ports(2)
    home = Path(found["TRITON_HOME"])
    env = {**os.environ, "PATH": f"{found['TRITON_VENV']}/bin:{os.environ['PATH']}",
           "LD_LIBRARY_PATH": found["TRITON_LD_PATH"]}
    args = [found["TRITON_BIN"], f"--model-repository={repo}",
            "--model-control-mode=explicit", "--load-model=identity_fp32",
            f"--backend-directory={home / 'backends'}", f"--cache-directory={home / 'caches'}",
            f"--http-address={HOST}", f"--http-port={http_port}",
            f"--grpc-address={HOST}", f"--grpc-port={grpc_port}",
            "--allow-metrics=false", "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0", "--exit-timeout-secs=5", "--log-warning=false"]
    if tls:
        args += ["--grpc-use-ssl=true", f"--grpc-server-cert={pki['server'].cert}",
                 f"--grpc-server-key={pki['server'].key}", f"--grpc-root-cert={pki['ca'].cert}"]
        if tls == "mtls":
            args += ["--grpc-use-ssl-mutual=true"]
    log = work / f"{name}.log"
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
                            cwd=work)
    deadline = time.monotonic() + 120
    url = f"http://{HOST}:{http_port}/v2/models/identity_fp32/ready"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return System(name, "triton", tls, http_port, grpc_port, proc, log,
                                  protocols=("grpc",))
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"{name} did not become ready: {log.read_text()[-2000:]}")


# ----------------------------------------------------------------------------- per call
def pa_target(system: System, protocol: str, elements: int, pki: dict) -> list[str]:
    args = ["-m", "identity_fp32", "--shape", f"INPUT0:{elements}"]
    port = system.http if protocol == "http" else system.grpc
    if protocol == "grpc":
        args += ["-i", "grpc", "-u", f"{HOST}:{port}"]
        if system.tls:
            args += ["--ssl-grpc-use-ssl", f"--ssl-grpc-root-certifications-file={pki['ca'].cert}"]
            if system.tls == "mtls":
                args += [f"--ssl-grpc-private-key-file={pki['client'].key}",
                         f"--ssl-grpc-certificate-chain-file={pki['client'].cert}"]
    elif system.tls:
        args += ["-i", "http", "-u", f"https://{HOST}:{port}",
                 f"--ssl-https-ca-certificates-file={pki['ca'].cert}"]
        if system.tls == "mtls":
            args += [f"--ssl-https-client-certificate-file={pki['client'].cert}",
                     f"--ssl-https-private-key-file={pki['client'].key}"]
    else:
        args += ["-i", "http", "-u", f"{HOST}:{port}"]
    return args


def measure_calls(system: System, case: str, protocol: str, concurrency: int, interval_ms: int,
                  pki: dict, work: Path) -> dict:
    target = pa_target(system, protocol, CASES[case], pki)
    before = cpu_seconds(system.proc.pid)
    started = time.monotonic()
    try:
        r = perf(target, interval_ms, work / "pa.csv", concurrency)
    except (SystemExit, subprocess.TimeoutExpired) as e:
        return {"error": " ".join(str(e).split())[-300:]}
    elapsed = time.monotonic() - started
    if r["throughput"] <= 0:
        return {"error": "no call completed"}
    # The server's CPU per call: its CPU over perf_analyzer's whole run divided by the calls
    # that rate makes over that time (start-up counted as calls: a little low, never high).
    r["server_cpu_us"] = (cpu_seconds(system.proc.pid) - before) / (r["throughput"] * elapsed) * 1e6
    return r


# ----------------------------------------------------------------------------- handshakes
S_TIME = re.compile(r"(\d+) connections in [\d.]+s; ([\d.]+) connections/user sec")


def measure_handshakes(system: System, port: int, seconds: int, clients: int,
                       pki: dict) -> dict:
    """`clients` parallel `openssl s_time -new` for `seconds` on `port`: handshakes a second in
    all (counted over the wall-clock time of the clients), and the server's CPU per handshake."""
    args = ["openssl", "s_time", "-connect", f"{HOST}:{port}", "-new", "-time", str(seconds),
            "-CAfile", str(pki["ca"].cert)]
    if system.tls == "mtls":
        args += ["-cert", str(pki["client"].cert), "-key", str(pki["client"].key)]
    before = cpu_seconds(system.proc.pid)
    started = time.monotonic()
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(clients)]
    outputs = [p.communicate(timeout=seconds + 60) for p in procs]
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(system.proc.pid) - before
    total = 0
    for p, (out, err) in zip(procs, outputs):
        m = S_TIME.search(out)
        if p.returncode != 0 or m is None:
            return {"error": f"s_time: rc {p.returncode}: {' '.join((out + err).split())[-300:]}"}
        total += int(m.group(1))
    if total == 0:
        return {"error": "no handshake completed"}
    return {"rate": total / elapsed, "server_cpu_us": cpu / total * 1e6, "handshakes": total}


def negotiated(system: System, port: int, protocol: str, pki: dict) -> str:
    """The TLS version and cipher suite OpenSSL's defaults get from `port` (s_time's, and
    near enough the clients' of perf_analyzer)."""
    context = client_context(pki, system.tls == "mtls")
    context.set_alpn_protocols(["h2"] if protocol == "grpc" else ["http/1.1"])
    try:
        with socket.create_connection((HOST, port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=HOST) as tls:
                return f"{tls.version()} {tls.cipher()[0]}, ALPN {tls.selected_alpn_protocol()}"
    except OSError as e:
        return f"no handshake: {e}"


# ----------------------------------------------------------------------------- tables
def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec=".0f", none="—"):
    return none if value is None else format(value, spec)


def call_table(rows: list[dict], groups: list[tuple], names: list[str]) -> None:
    print("| case | protocol | c | system | infer/s | p50 µs | p99 µs | server CPU µs/call | "
          "infer/s TLS/plain | p50 TLS/plain | p50 +µs | p99 TLS/plain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case, protocol, concurrency in groups:
        mine = [r for r in rows if (r["case"], r["protocol"], r["c"]) == (case, protocol,
                                                                          concurrency)]
        for name in names:
            runs = [r for r in mine if r["system"] == name and "error" not in r]
            failed = [r for r in mine if r["system"] == name and "error" in r]
            if not runs and not failed:
                continue
            if not runs:
                print(f"| {case} | {protocol} | {concurrency} | {name} | failed: "
                      f"{failed[0]['error'][-80:]} |||||||||")
                continue
            m = {k: med(r[k] for r in runs) for k in ("throughput", "p50_us", "p99_us",
                                                      "server_cpu_us")}
            ratios = {"throughput": None, "p50_us": None, "p99_us": None, "p50_diff": None}
            plain = name.split("+")[0]
            if plain != name:
                # Within each round: this TLS row against its server's plaintext row.
                pairs = []
                for r in runs:
                    base = [b for b in mine if b["system"] == plain and b["round"] == r["round"]
                            and "error" not in b]
                    if base:
                        pairs.append((r, base[0]))
                if pairs:
                    for k in ("throughput", "p50_us", "p99_us"):
                        ratios[k] = med(r[k] / b[k] for r, b in pairs)
                    ratios["p50_diff"] = med(r["p50_us"] - b["p50_us"] for r, b in pairs)
            note = f" ({len(failed)} failed)" if failed else ""
            print(f"| {case} | {protocol} | {concurrency} | {name}{note} | "
                  f"{fmt(m['throughput'])} | {fmt(m['p50_us'])} | {fmt(m['p99_us'])} | "
                  f"{fmt(m['server_cpu_us'])} | {fmt(ratios['throughput'], '.2f')} | "
                  f"{fmt(ratios['p50_us'], '.2f')} | {fmt(ratios['p50_diff'], '+.0f')} | "
                  f"{fmt(ratios['p99_us'], '.2f')} |")


def handshake_table(rows: list[dict], ports: list[tuple], client_counts: list[int]) -> None:
    print("| port | clients | handshakes/s | server CPU µs/handshake |")
    print("|---|---|---|---|")
    for label in [label for _, label, _ in ports]:
        for clients in client_counts:
            runs = [r for r in rows if r["port"] == label and r["clients"] == clients]
            good = [r for r in runs if "error" not in r]
            if not good:
                error = runs[0]["error"][:100] if runs else "not run"
                print(f"| {label} | {clients} | failed: {error} | |")
                continue
            print(f"| {label} | {clients} | {fmt(med(r['rate'] for r in good))} | "
                  f"{fmt(med(r['server_cpu_us'] for r in good))} |")


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000,
                        help="perf_analyzer's measurement window (three windows a row)")
    parser.add_argument("--cases", default="16,1M", help="identity_fp32 sizes: 16, 1M")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                        help=f"of {', '.join(ALL_SYSTEMS)} (and triton+mtls)")
    parser.add_argument("--handshake-seconds", type=int, default=5,
                        help="s_time's -time for each handshake row (0: no handshake rows)")
    parser.add_argument("--handshake-clients", default="1,4",
                        help="parallel s_time clients for each handshake row")
    args = parser.parse_args()
    cases = args.cases.split(",")
    protocols = args.protocols.split(",")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    names = args.systems.split(",")
    client_counts = [int(c) for c in args.handshake_clients.split(",")]
    for case in cases:
        if case not in CASES:
            parser.error(f"unknown case {case} (of {', '.join(CASES)})")
    for name in names:
        if name not in (*ALL_SYSTEMS, "triton+mtls"):
            parser.error(f"unknown system {name}")
    for path, what in ((SIDECAR, "the release sidecar"), (PERF_ANALYZER, "perf_analyzer")):
        if not Path(path).exists():
            raise SystemExit(f"{what} is missing: {path}")
    found = None
    if any(n.startswith("triton") for n in names):
        found = triton_env()
        if found is None:
            print("Triton not found (run bench/run once, or source tests/upstream/triton-env.sh):"
                  " the triton systems are left out", file=sys.stderr)
            names = [n for n in names if not n.startswith("triton")]

    machine = f"{os.cpu_count()} CPUs"
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
        machine += f", {model}"
    except (OSError, StopIteration):
        pass
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
        machine += ", AES-NI" if "aes" in flags else ", no AES-NI"
    except (OSError, StopIteration):
        pass
    started = time.monotonic()
    systems: dict[str, System] = {}
    rows: list[dict] = []
    handshakes: list[dict] = []
    sessions: list[str] = []  # what each TLS port negotiates
    with tempfile.TemporaryDirectory(prefix="tls-cost-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        try:
            for name in names:
                server, _, tls = name.partition("+")
                print(f"starting {name}", file=sys.stderr, flush=True)
                systems[name] = (start_sidecar(name, tls, pki, work) if server == "sidecar"
                                 else start_triton(name, tls, pki, work, found))
            groups = [(case, protocol, c) for case in cases for protocol in protocols
                      for c in concurrencies]
            ports = []  # (system, label, port) for the handshake rows
            for name, system in systems.items():
                if system.tls:
                    for protocol in system.protocols:
                        port = system.http if protocol == "http" else system.grpc
                        ports.append((system, f"{name} {protocol}", port))
                        sessions.append(f"{name} {protocol}: "
                                        f"{negotiated(system, port, protocol, pki)}")
            for round_ in range(args.rounds):
                for i, (case, protocol, c) in enumerate(groups):
                    # Alternate the order by round (and by group, so no system always goes first).
                    order = [n for n in systems if protocol in systems[n].protocols]
                    if (round_ + i) % 2:
                        order.reverse()
                    for name in order:
                        r = measure_calls(systems[name], case, protocol, c, args.interval_ms, pki,
                                          work)
                        r.update(system=name, case=case, protocol=protocol, c=c, round=round_)
                        rows.append(r)
                        print(r, file=sys.stderr, flush=True)
                if args.handshake_seconds > 0:
                    order = ports if round_ % 2 == 0 else ports[::-1]
                    for system, label, port in order:
                        for clients in client_counts:
                            h = measure_handshakes(system, port, args.handshake_seconds, clients,
                                                   pki)
                            h.update(port=label, clients=clients, round=round_)
                            handshakes.append(h)
                            print(h, file=sys.stderr, flush=True)
        finally:
            for system in systems.values():
                system.stop()
    minutes = (time.monotonic() - started) / 60
    print(f"Per call: identity_fp32, perf_analyzer, medians of {args.rounds} round(s) of three "
          f"{args.interval_ms} ms windows; ratios taken within each round. {machine}; "
          f"{minutes:.1f} min in all.\n")
    call_table(rows, groups, list(systems))
    if handshakes:
        print(f"\nFull handshakes (openssl s_time -new, {args.handshake_seconds} s a row, "
              f"medians of {args.rounds} round(s)); server CPU from /proc:\n")
        handshake_table(handshakes, ports, client_counts)
    if sessions:
        print("\nNegotiated with OpenSSL's defaults: " + "; ".join(sessions))


if __name__ == "__main__":
    main()
