"""A client pod calls each Service over REST and gRPC with the clients users have (tritonclient),
and the client container of examples/triton-shm.yaml uses the pod's /dev/shm."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from rendezvous import owner  # noqa: E402

NS = scenario.NS


def expected_simple():
    a = list(range(16))
    return [[x + 3 for x in a]], [[x - 3 for x in a]]


# The models each example serves: examples/triton.yaml and sequence.yaml list theirs
# (`spec.models` then names every model served), the others serve the whole repository.
@pytest.mark.parametrize("service,model", [("triton", "classifier"), ("triton-shm", "simple"),
                                           ("mlserver", "simple")])
def test_binary_tensor_data(kube, client, service, model):
    """Binary tensor data both ways; MLServer has no binary data of its own: the sidecar adds it."""
    host = scenario.service_ip(kube, service)
    got = scenario.call(kube, "calls.py", "binary", host, "--model", model, "--elements", "4")
    if model == "simple":
        add, sub = expected_simple()
        want = {"OUTPUT0": add, "OUTPUT1": sub}
    else:
        want = {"OUTPUT0": got["input"]}
    for proto in ("rest", "grpc"):
        assert got[proto] == want, (proto, got)
    assert got["rest_binary_outputs"], got


def _top(values, labels, k):
    ranked = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    if labels is None:
        return [f"{values[i]:f}:{i}" for i in ranked]
    return [f"{values[i]:f}:{i}:{labels[i]}" for i in ranked]


@pytest.mark.parametrize("service", ["triton", "mlserver"])
def test_classification(kube, client, service):
    """class_count 3 on the classifier, done by the sidecar: value and index, and for Triton the
    label from the user's label file (examples/triton.yaml's labels ConfigMap; the MLServer
    example names none)."""
    host = scenario.service_ip(kube, service)
    got = scenario.call(kube, "calls.py", "classification", host, "--model", "classifier",
                        "--classes", "3", "--elements", "4")
    labels = None
    if service == "triton":
        labels_file = kube.work / "repositories" / "triton" / "classifier" / "labels.txt"
        labels = labels_file.read_text().splitlines()
    want = _top(got["input"], labels, 3)
    assert got["rest"] == want, got
    assert got["grpc"] == want, got


def test_whole_sequence(kube, client):
    """Sequences of four requests on the sequence example (simple_sequence, Triton's sequence
    batcher, three replicas) through its Service, over REST, unary gRPC and a gRPC stream. Each
    replica's batcher refuses a request without START for a sequence it has not seen, so a whole
    sequence answers only if every request reaches the replica that holds it. The model answers
    (INPUT + START) * READY."""
    host = scenario.service_ip(kube, "sequence")
    for sequence_id in (1000, 2000, 3000):
        got = scenario.call(kube, "calls.py", "sequence", host, "--model", "simple_sequence",
                            "--sequence-id", str(sequence_id))
        want = [[v + (1 if n == 0 else 0)] for n, v in enumerate(got["values"])]
        assert got["rest"] == want, got
        assert got["grpc"] == want, got
        assert got["stream"] == want, got


def sequence_pods(kube) -> list[str]:
    """The addresses of the sequence example's pods whose containers are all ready."""
    pods = kube.running_pods(NS, "app.kubernetes.io/instance=sequence")
    return sorted(p["status"]["podIP"] for p in pods
                  if all(c.get("ready") for c in p["status"].get("containerStatuses", [])))


def running_sums(values):
    out = []
    for seq in values:
        total, sums = 0, []
        for v in seq:
            total += v
            sums.append(total)
        out.append(sums)
    return out


def assert_sums(got, phase_steps=None):
    want = running_sums(got["values"])
    if phase_steps is not None:
        want = [[sums[n] for n in phase_steps] for sums in want]
    for proto in ("rest", "grpc", "stream"):
        assert got[proto] == want, (proto, got)


def peer_states(kube, client, ip) -> dict:
    peers = scenario.admin_status(kube, ip, pod=client)["sequence_peers"]
    return {p["address"]: p["state"] for p in peers["peers"]}


def wait_for_peers(kube, client, ips):
    """Every sidecar lists every pod as a ready peer (from the EndpointSlices and its probes)."""
    want = {f"{ip}:8001": "ready" for ip in ips}
    kube.wait_until(f"every sidecar to see {len(ips)} ready peers",
                    lambda: all(peer_states(kube, client, ip) == want for ip in ips),
                    timeout=120, interval=2)


def test_sidecar_routing_has_a_headless_service_and_least_access(kube, served):
    """routing: Sidecar gives the pods a headless Service listing them, and a Role with only
    list and watch on EndpointSlices, bound to their service account."""
    svc = kube.get("service", "-n", NS, "sequence-peers")
    assert svc["spec"]["clusterIP"] == "None", svc["spec"]
    role = kube.get("role", "-n", NS, "sequence-sequence-peers")
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["list", "watch"]}], role
    (pod, *_) = kube.running_pods(NS, "app.kubernetes.io/instance=sequence")
    account = pod["spec"]["serviceAccountName"]
    assert account == "sequence-sequence-peers", account
    can = kube.kubectl("auth", "can-i", "watch", "endpointslices.discovery.k8s.io", "-n", NS,
                       f"--as=system:serviceaccount:{NS}:{account}", check=False).stdout.strip()
    assert can == "yes", can
    cannot = kube.kubectl("auth", "can-i", "list", "pods", "-n", NS,
                          f"--as=system:serviceaccount:{NS}:{account}", check=False).stdout.strip()
    assert cannot == "no", cannot


def test_sequences_spread_over_every_pod(kube, served, client):
    """Interleaved sequences of sequence_accumulator (a running sum kept in the Triton process),
    each request sent to the next pod in turn, over REST, unary gRPC and gRPC streams: the sums
    are those one replica would give."""
    ips = sequence_pods(kube)
    assert len(ips) == 3, ips
    wait_for_peers(kube, client, ips)
    got = scenario.call(kube, "calls.py", "spread", ",".join(ips), "--model",
                        "sequence_accumulator", "--sequence-id", "50000")
    assert_sums(got)


ROLLING_HOSTS, ROLLING_STOP = "/tmp/rolling-hosts", "/tmp/rolling-stop"


def set_rolling_hosts(kube, client, ips):
    # Written aside and renamed over: the client never reads a file half written.
    kube.exec(NS, client, "client", ["sh", "-c", f"echo {' '.join(ips)} > {ROLLING_HOSTS}.new "
                                     f"&& mv {ROLLING_HOSTS}.new {ROLLING_HOSTS}"])


def start_rolling(kube, client, ips, *args) -> subprocess.Popen:
    """calls.py rolling on sequence_accumulator over `ips` (tests/e2e/clients/calls.py), in the
    client pod, until `stop_rolling`."""
    kube.exec(NS, client, "client", ["rm", "-f", ROLLING_STOP, ROLLING_STOP + ".rounds"])
    set_rolling_hosts(kube, client, ips)
    argv = kube.kubectl_argv("exec", "-i", "-n", NS, client, "-c", "client", "--", "python3", "-",
                             "rolling", "-", "--model", "sequence_accumulator", "--length", "12",
                             "--hosts-file", ROLLING_HOSTS, "--stop-file", ROLLING_STOP, *args)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write((scenario.CLIENTS / "calls.py").read_text())
    proc.stdin.close()
    proc.stdin = None

    def rounds():
        assert proc.poll() is None, proc.communicate()
        done = kube.exec(NS, client, "client", ["cat", ROLLING_STOP + ".rounds"], check=False)
        return done.returncode == 0 and int(done.stdout or 0) >= 2
    # Every sequence has started (the first round) before anything changes.
    kube.wait_until("the rolling client's first rounds", rounds, timeout=60)
    return proc


def stop_rolling(kube, client, proc) -> dict:
    """Lets the rolling client end its sequences; what it sent and got."""
    assert proc.poll() is None, proc.communicate()
    kube.exec(NS, client, "client", ["touch", ROLLING_STOP])
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_sequences_in_flight_survive_a_new_replica(kube, served, client):
    """Eight sequences kept going round-robin over the three pods; a fourth replica is added;
    once every sidecar lists it, the same sequences go on round-robin over all four pods, then
    end. Every answer is the running sum one replica would give, and the new pod took its
    share of the requests."""
    ips = sequence_pods(kube)
    assert len(ips) == 3, ips
    proc = start_rolling(kube, client, ips, "--sequence-id", "60000", "--sequences", "8")
    try:
        kube.kubectl("patch", "infsvc", "sequence", "-n", NS, "--type=merge",
                     "-p", '{"spec":{"replicas":4}}')
        kube.wait_until("a fourth sequence pod, ready",
                        lambda: len(sequence_pods(kube)) == 4 or None, timeout=300, interval=3)
        ips = sequence_pods(kube)
        wait_for_peers(kube, client, ips)
        set_rolling_hosts(kube, client, ips)
        got = stop_rolling(kube, client, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert got["answers"] == running_sums(got["values"]), got
    counts = {ip: sum(seq.count(ip) for seq in got["pods"]) for ip in ips}
    assert all(n > 0 for n in counts.values()), counts


def terminating_sequence_pods(kube) -> list[dict]:
    return [p for p in kube.pods(NS, "app.kubernetes.io/instance=sequence")
            if p["metadata"].get("deletionTimestamp")]


def test_sequences_in_flight_survive_a_replica_removed(kube, served, client):
    """Eight sequences, two held by each of the four pods (their ids chosen by the owner
    computation, tests/tools/rendezvous.py), kept going round-robin; the InferenceService is
    scaled to three. The leaving pod's preStop hook drains it: clients stop sending it anything
    (as the Service would), yet it stays, past its preStop sleep, because the other sidecars
    still send it the requests of its two sequences; once every sequence has ended it goes.
    Every answer is the running sum one replica would give."""
    ips = sequence_pods(kube)
    assert len(ips) == 4, ips
    wait_for_peers(kube, client, ips)
    peers = [f"{ip}:8001" for ip in ips]
    by_pod = {ip: [] for ip in ips}
    sequence_id = 70000
    while min(len(ids) for ids in by_pod.values()) < 2:
        sequence_id += 1
        ids = by_pod[ips[owner(peers, "sequence_accumulator", sequence_id)]]
        if len(ids) < 2:
            ids.append(sequence_id)
    ids = [i for pod_ids in by_pod.values() for i in pod_ids]
    proc = start_rolling(kube, client, ips, "--sequence-ids", ",".join(map(str, ids)))
    try:
        kube.kubectl("patch", "infsvc", "sequence", "-n", NS, "--type=merge",
                     "-p", '{"spec":{"replicas":3}}')
        leaving = kube.wait_until("a sequence pod terminating",
                                  lambda: terminating_sequence_pods(kube), timeout=60)[0]
        name, gone_ip = leaving["metadata"]["name"], leaving["status"]["podIP"]
        set_rolling_hosts(kube, client, [ip for ip in ips if ip != gone_ip])
        # What the leaving pod's sidecar says while it drains, for the failures below.
        sidecar_log = subprocess.Popen(
            kube.kubectl_argv("logs", "-f", "-n", NS, name, "-c", "infergate", "--since=60s"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        hooks = [(c["name"], c.get("lifecycle", {}).get("preStop"))
                 for c in leaving["spec"]["containers"]]

        log = []

        def said():
            if not log:
                if sidecar_log.poll() is None:
                    sidecar_log.terminate()
                log.append(sidecar_log.communicate()[0])
            return f"preStop hooks {hooks}; the leaving sidecar's log:\n{log[0][-6000:]}"
        # Past the preStop sleep (5 s) the pod is still there: its sequences are running.
        time.sleep(12)
        if proc.poll() is not None:
            pytest.fail(f"the client failed: {proc.communicate()[1][-3000:]}\n{said()}")
        assert terminating_sequence_pods(kube), f"the leaving pod went with its sequences running; {said()}"
        got = stop_rolling(kube, client, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    ended = time.monotonic()
    assert got["answers"] == running_sums(got["values"]), got
    # Its own sequences ended, it goes, well before its wait (75 s) runs out.
    kube.wait_until(f"{name} gone", lambda: not terminating_sequence_pods(kube) or None,
                    timeout=120, interval=1)
    took = time.monotonic() - ended
    assert took < 40, f"the leaving pod waited {took:.0f} s past the end of its sequences; {said()}"
    # Its drain waited for its two sequences, and they ended.
    said()
    waited = [json.loads(line) for line in log[0].splitlines()
              if "the sequences held here" in line]
    assert [(w["message"], w.get("held")) for w in waited] == [
        ("waiting for the sequences held here to end", 2),
        ("the sequences held here have ended", None)], said()
    assert sorted(sequence_pods(kube)) == sorted(ip for ip in ips if ip != gone_ip)


def shm_pod(kube) -> str:
    (pod,) = kube.running_pods(NS, "app.kubernetes.io/instance=triton-shm")
    return pod["metadata"]["name"]


def test_system_shared_memory_from_a_container_of_the_pod(kube, served):
    """The documented way: a client container in the pod, sharing its /dev/shm, registers its
    regions with the sidecar on localhost, over REST and gRPC."""
    pod = shm_pod(kube)
    got = scenario.call(kube, "calls.py", "shm", "localhost", "--model", "simple",
                        pod=pod, container="client")
    add, sub = expected_simple()
    for proto in ("rest", "grpc"):
        assert got[proto]["OUTPUT0"] == add and got[proto]["OUTPUT1"] == sub, got
        assert got[proto]["registered"] == 2, got


def test_examples_own_client_runs_perf_analyzer_over_shared_memory(kube, served):
    """examples/triton-shm.yaml's client container runs perf_analyzer --shared-memory=system in
    a loop. Its first run starts with the pod, before the sidecar has found the models (an error
    in its log: the client does not wait for readiness); the next, a minute later, must report."""
    pod = shm_pod(kube)

    def reported():
        log = kube.kubectl("logs", "-n", NS, pod, "-c", "client").stdout
        return log if re.search(r"Concurrency: 4, throughput: [0-9.]+ infer/sec", log) else None

    try:
        log = kube.wait_until("a perf_analyzer report in the client's log", reported,
                              timeout=300, interval=3)
    except TimeoutError as e:
        tail = kube.kubectl("logs", "-n", NS, pod, "-c", "client").stdout[-3000:]
        raise AssertionError(f"{e}; the client's log ends:\n{tail}") from None
    # The last complete report: the loop may be in the middle of the next one.
    end = list(re.finditer(r"Concurrency: 4, throughput: [0-9.]+ infer/sec", log))[-1].end()
    report = log[log.rindex("*** Measurement Settings ***", 0, end):end]
    assert "error" not in report.lower(), report
    for concurrency in (1, 2, 3, 4):
        assert re.search(rf"Concurrency: {concurrency}, throughput: [0-9.]+ infer/sec", report), report


def test_large_tensor_goes_through_the_staging_pool(kube, client):
    """identity_fp32 with 1M elements through the triton-shm Service: the answers are exact, and
    the sidecar's own metrics show the tensor bytes went through its staging pool in /dev/shm."""
    (pod,) = kube.running_pods(NS, "app.kubernetes.io/instance=triton-shm")
    ip = pod["status"]["podIP"]
    before = scenario.call(kube, "calls.py", "metrics", ip)
    assert before.get("infergate_staging_pool_active") == 1.0, before
    host = scenario.service_ip(kube, "triton-shm")
    got = scenario.call(kube, "calls.py", "large", host, "--model", "identity_fp32",
                        "--elements", str(1 << 20))
    assert got["rest_equal"] and got["grpc_equal"], got
    after = scenario.call(kube, "calls.py", "metrics", ip)

    # Two calls, each with 4 MiB in and 4 MiB out.
    for direction in ("input", "output"):
        key = f'infergate_staging_bytes_total{{direction="{direction}"}}'
        assert after[key] - before[key] >= 2 * got["bytes"], (direction, before, after)
