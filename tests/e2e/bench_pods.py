"""Benchmark of the user's path on the real node (bench/pods, tests/e2e/run --bench): what a pod
costs and how long it takes, measured rather than asserted.

1. Time from `kubectl apply` to `Ready` (the InferenceService's condition), per example, applied
   one at a time onto a node that has the images: ROUNDS times each (deleted in between).
2. The sidecar's memory (the container's cgroup: RSS and working set) and CPU while idle (cgroup
   CPU time over IDLE_SECONDS with no client), per pod, beside the model server's.
3. The latency a call gains through the Service and the sidecar, against the model server's own
   port in the same pod (Triton here listens on the pod's address, `model.listen: Pod`, which the
   examples' default, loopback, would refuse): perf_analyzer 2.45 in the client pod, concurrency 1, gRPC and HTTP, the
   `classifier` model of examples/triton.yaml (FP32 identity, 4 elements), the two targets
   alternated over ROUNDS rounds; p50 and p99.
4. The secure settings: `kubectl apply` to `Ready` for examples/triton.yaml with mutual TLS from
   a Secret and inference by Kubernetes identity, ROUNDS times, beside 1's plain rounds; then the
   latency through the Service with mutual TLS (gRPC and HTTPS, the client pod resolving the
   Service's name through hostAliases and verifying it), and over HTTPS with a ServiceAccount
   token as well (perf_analyzer sends headers over HTTP only), beside 3's plain rows.
Only examples/triton.yaml and mlserver.yaml run during 2 and 3 (triton-shm.yaml's own client
keeps perf_analyzer busy in its pod, which would be neither idle nor quiet).

Writes a Markdown table and the raw numbers (JSON) into bench/results/pods-<time>.{md,json}.

Environment: as tests/e2e/run sets it (INFERGATE_CLUSTER_BIN, INFERGATE_HELM,
INFERGATE_E2E_IMAGES); ROUNDS (3), IDLE_SECONDS (30).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kube as cluster  # noqa: E402
import scenario  # noqa: E402

NS = scenario.NS
ROUNDS = int(os.environ.get("ROUNDS", "3"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "30"))
CGROUP = Path("/sys/fs/cgroup")


def apply_to_ready(k, name: str, on_pod_address: bool = False,
                   spec: dict | None = None) -> float:
    doc = scenario.adapt(scenario.example(name))
    doc["spec"].update(spec or {})
    if on_pod_address:
        model = doc["spec"]["model"]
        model["listen"] = "Pod"
        model["args"] = [a for a in model.get("args", []) if not a.endswith("-address=127.0.0.1")]
    started = time.monotonic()
    k.apply(json.dumps(doc), "-n", NS)
    k.wait_condition(f"infsvc/{doc['metadata']['name']}", "Ready", NS, timeout="600s")
    return time.monotonic() - started


def delete(k, name: str):
    k.kubectl("delete", "infsvc", name, "-n", NS, "--wait=true", timeout=300)
    k.wait_until(f"{name}'s pods to go",
                 lambda: not k.pods(NS, f"app.kubernetes.io/instance={name}"), timeout=300)


def container_cgroup(pod: dict, container: str, controller: str) -> Path:
    uid = pod["metadata"]["uid"]
    statuses = pod["status"].get("containerStatuses", []) + pod["status"].get("initContainerStatuses", [])
    (cid,) = [s["containerID"].split("://", 1)[1] for s in statuses if s["name"] == container]
    qos = pod["status"]["qosClass"].lower()
    base = CGROUP / controller / "kubepods"
    found = list(base.rglob(f"pod{uid}/{cid}"))
    if not found:
        raise LookupError(f"no {controller} cgroup for {container} ({qos}) of {pod['metadata']['name']}")
    return found[0]


def memory(pod: dict, container: str) -> dict:
    d = container_cgroup(pod, container, "memory")
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    usage = int((d / "memory.usage_in_bytes").read_text())
    # The processes' own resident sets (VmRSS: also the binary's and libraries' mapped pages).
    vm_rss = 0
    for pid in (d / "cgroup.procs").read_text().split():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        vm_rss += int(m.group(1)) * 1024 if m else 0
    return {"rss_mib": int(stat["total_rss"]) / 2**20,
            "working_set_mib": (usage - int(stat["total_inactive_file"])) / 2**20,
            "process_rss_mib": vm_rss / 2**20}


def cpu_seconds(pod: dict, container: str) -> float:
    return int((container_cgroup(pod, container, "cpuacct") / "cpuacct.usage").read_text()) / 1e9


def perf(k, url: str, protocol: str, extra: tuple = (), pod: str = "client") -> dict:
    argv = ["perf_analyzer", "-m", "classifier", "-u", url, "-i", protocol,
            "--concurrency-range", "1", "-p", "2000", "--max-trials", "10", "-s", "25", *extra]
    out = k.exec(NS, pod, "client", argv, timeout=300, check=False).stdout
    def grab(pattern):
        m = re.search(pattern, out)
        return float(m.group(1)) if m else None
    return {"throughput": grab(r"Throughput: ([0-9.]+) infer/sec"),
            "p50_us": grab(r"p50 latency: ([0-9]+) usec"),
            "p99_us": grab(r"p99 latency: ([0-9]+) usec")}


def main() -> int:
    images = cluster.images_from(Path(os.environ["INFERGATE_E2E_IMAGES"]))
    work = Path(tempfile.mkdtemp(prefix="infergate-e2e-"))
    k = cluster.start(Path(os.environ["INFERGATE_CLUSTER_BIN"]), Path(os.environ["INFERGATE_HELM"]),
                      images, work)
    results: dict = {"rounds": ROUNDS, "idle_seconds": IDLE_SECONDS, "cores": os.cpu_count()}
    try:
        scenario.install_chart(k, replicas=1)
        scenario.restricted_namespace(k, NS)
        claims = scenario.write_repositories(work / "repositories")
        scenario.provide_claims(k, claims, NS)
        labels = (claims["triton-model-repository"] / "classifier" / "labels.txt").read_text()
        k.apply(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": scenario.CLASSIFIER_LABELS, "namespace": NS},
                            "data": {"labels.txt": labels}}))

        # 1. apply -> Ready, one example at a time.
        ready = {}
        for example in ("triton.yaml", "mlserver.yaml"):
            name = scenario.example(example)["metadata"]["name"]
            times = []
            for _ in range(ROUNDS):
                times.append(apply_to_ready(k, example))
                delete(k, name)
            ready[example] = times
            print(f"apply -> Ready {example}: {[round(t, 1) for t in times]}", flush=True)
        results["apply_to_ready_s"] = ready

        # 2. idle cost of each pod's containers.
        for example in ("triton.yaml", "mlserver.yaml"):
            apply_to_ready(k, example, on_pod_address=example == "triton.yaml")
        scenario.start_client(k)
        time.sleep(10)
        pods = [p for name in ("triton", "mlserver")
                for p in k.running_pods(NS, f"app.kubernetes.io/instance={name}")]
        before = {p["metadata"]["name"]: {c: cpu_seconds(p, c) for c in ("infergate", "model")}
                  for p in pods}
        time.sleep(IDLE_SECONDS)
        idle = {}
        for p in pods:
            name = p["metadata"]["name"]
            idle[name] = {c: {**memory(p, c),
                              "idle_cpu_millicores": 1000 * (cpu_seconds(p, c) - before[name][c]) / IDLE_SECONDS}
                          for c in ("infergate", "model")}
        results["idle"] = idle
        print(json.dumps(idle, indent=1), flush=True)

        # 3. added latency: through the Service (sidecar) vs the model server's port in the pod.
        (pod,) = k.running_pods(NS, "app.kubernetes.io/instance=triton")
        ip, svc = pod["status"]["podIP"], scenario.service_ip(k, "triton")
        targets = {("grpc", "service"): f"{svc}:8001", ("grpc", "model"): f"{ip}:9001",
                   ("http", "service"): f"{svc}:8000", ("http", "model"): f"{ip}:9000"}
        latency = {f"{proto}/{where}": [] for proto, where in targets}
        for _ in range(ROUNDS):
            for (proto, where), url in targets.items():
                latency[f"{proto}/{where}"].append(perf(k, url, proto))
        results["latency"] = latency
        print(json.dumps(latency, indent=1), flush=True)

        # 4. the secure settings.
        delete(k, "triton")
        results.update(secure(k, work))
    finally:
        k.dump_logs()
        k.stop()
    write(results)
    return 0


def secure(k, work: Path) -> dict:
    """Step 4: apply -> Ready with mutual TLS and inference by identity, and the latency with TLS
    (and, over HTTPS, a token)."""
    import test_8_tls as tls
    folder = work / "tls"
    ca = tls.certs.ca(folder, "bench-ca")
    server = tls.certs.signed(folder, "server", ca, server=True, serial=1,
                              names=tls.SERVICE_NAMES)
    client = tls.certs.signed(folder, "client", ca, server=False)
    k.apply(tls.serving_secret(ca, server))
    k.apply(tls.secret(tls.CLIENT_SECRET, {"ca.crt": ca.cert, "client.crt": client.cert,
                                           "client.key": client.key}))
    # The caller's account, which a Role grants `infer` on the service.
    k.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "caller", "namespace": NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "infer", "namespace": NS},
         "rules": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                    "resourceNames": ["triton"], "verbs": ["infer"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "infer", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "infer"},
         "subjects": [{"kind": "ServiceAccount", "name": "caller", "namespace": NS}]}]}))
    spec = {"tls": {"secretName": tls.SECRET, "mutual": True},
            "auth": {"inference": {"from": "Identity"}}}
    times = []
    for i in range(ROUNDS):
        times.append(apply_to_ready(k, "triton.yaml", spec=spec))
        if i < ROUNDS - 1:
            delete(k, "triton")
    print(f"apply -> Ready triton.yaml, mutual TLS and identity: {[round(t, 1) for t in times]}",
          flush=True)

    tls.start_tls_client(k, scenario.service_ip(k, "triton"))
    token = k.kubectl("create", "token", "caller", "-n", NS,
                      f"--audience=infergate.dev/{NS}/triton").stdout.strip()
    https = ("--ssl-https-ca-certificates-file", "/certs/ca.crt",
             "--ssl-https-client-certificate-file", "/certs/client.crt",
             "--ssl-https-private-key-file", "/certs/client.key")
    grpcs = ("--ssl-grpc-use-ssl", "true", "--ssl-grpc-root-certifications-file", "/certs/ca.crt",
             "--ssl-grpc-private-key-file", "/certs/client.key",
             "--ssl-grpc-certificate-chain-file", "/certs/client.crt")
    latency = {"http/tls+token": [], "grpc/tls": [], "http/tls": []}
    for _ in range(ROUNDS):
        latency["http/tls+token"].append(perf(
            k, f"https://{tls.HOST}:8000", "http", (*https, "-H", f"Authorization:Bearer {token}"),
            pod=tls.CLIENT_POD))
    # TLS alone: inference open again (one rollout; perf_analyzer's gRPC sends no token).
    k.kubectl("patch", "infsvc", "triton", "-n", NS, "--type=merge",
              "-p", json.dumps({"spec": {"auth": {"inference": {"from": "Anyone"}}}}))
    k.wait_until("triton rolled out with inference open", lambda: (
        len(k.running_pods(NS, "app.kubernetes.io/instance=triton")) == 1
        and k.get("infsvc", "-n", NS, "triton")["status"].get("observedGeneration")
        == k.get("infsvc", "-n", NS, "triton")["metadata"]["generation"]
        and k.condition(k.get("infsvc", "-n", NS, "triton"), "Ready").get("status") == "True"),
        timeout=300, interval=2)
    for _ in range(ROUNDS):
        latency["grpc/tls"].append(perf(k, f"{tls.HOST}:8001", "grpc", grpcs, pod=tls.CLIENT_POD))
        latency["http/tls"].append(perf(k, f"https://{tls.HOST}:8000", "http", https,
                                        pod=tls.CLIENT_POD))
    print(json.dumps(latency, indent=1), flush=True)
    return {"apply_to_ready_secure_s": times, "latency_secure": latency}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def write(results: dict):
    out = Path(__file__).resolve().parents[2] / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"pods-{stamp}.json").write_text(json.dumps(results, indent=1))
    lines = [f"# Pods on the real node ({results['cores']} cores, {results['rounds']} rounds)", "",
             "| example | apply -> Ready, s (each round) |", "|---|---|"]
    for example, times in results["apply_to_ready_s"].items():
        lines.append(f"| {example} | {', '.join(f'{t:.1f}' for t in times)} |")
    lines += ["", "| pod | container | cgroup RSS MiB | working set MiB | processes' VmRSS MiB | idle CPU, millicores |",
              "|---|---|---|---|---|---|"]
    for pod, containers in results["idle"].items():
        for c, v in containers.items():
            lines.append(f"| {pod} | {c} | {v['rss_mib']:.1f} | {v['working_set_mib']:.1f} | "
                         f"{v['process_rss_mib']:.1f} | {v['idle_cpu_millicores']:.2f} |")
    lines += ["", "| protocol | through the Service p50 / p99, us | model server's port p50 / p99, us | added p50 / p99, us |",
              "|---|---|---|---|"]
    for proto in ("grpc", "http"):
        s, m = results["latency"][f"{proto}/service"], results["latency"][f"{proto}/model"]
        sp50, sp99 = median([r["p50_us"] for r in s]), median([r["p99_us"] for r in s])
        mp50, mp99 = median([r["p50_us"] for r in m]), median([r["p99_us"] for r in m])
        lines.append(f"| {proto} | {sp50:.0f} / {sp99:.0f} | {mp50:.0f} / {mp99:.0f} | "
                     f"{sp50 - mp50:.0f} / {sp99 - mp99:.0f} |")
    if "latency_secure" in results:
        lines += ["", "| triton.yaml | apply -> Ready, s (each round) |", "|---|---|",
                  "| plain | " + ", ".join(f"{t:.1f}" for t in results["apply_to_ready_s"]["triton.yaml"]) + " |",
                  "| mutual TLS + identity | " + ", ".join(f"{t:.1f}" for t in results["apply_to_ready_secure_s"]) + " |",
                  "", "| through the Service | p50 / p99, us | added to plain, p50 / p99, us |", "|---|---|---|"]
        plain = {proto: results["latency"][f"{proto}/service"] for proto in ("grpc", "http")}
        for row, runs in [("grpc/tls", "grpc"), ("http/tls", "http"), ("http/tls+token", "http")]:
            p50, p99 = (median([r[q] for r in results["latency_secure"][row]]) for q in ("p50_us", "p99_us"))
            b50, b99 = (median([r[q] for r in plain[runs]]) for q in ("p50_us", "p99_us"))
            lines.append(f"| {row} | {p50:.0f} / {p99:.0f} | {p50 - b50:.0f} / {p99 - b99:.0f} |")
    (out / f"pods-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
