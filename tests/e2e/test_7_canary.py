"""A canary on the real node (`spec.canary`): `triton` given a canary whose classifier labels are
its own in upper case, so that every classification answer says which variant gave it.

- 2,000 calls on one gRPC channel and 2,000 on one HTTP connection split within binomial
  tolerance of trafficPercent (a split per connection would put all of a channel's calls on one
  variant).
- Sixty sequences on one channel: every answer exact (Triton's sequence batcher refuses a
  request of a sequence it has not started, so a sequence split between the variants fails),
  and the canary's pod served exactly the requests of the sequences whose percentile
  (tests/tools/rendezvous.py) falls below the share.
- status.canary: the canary's ready pod, and each variant's calls as the sidecars counted them.
- Under REST and gRPC load: the canary rolled back (removed), then added again and promoted
  (its models become the service's, the canary removed): no call fails, none is wrong.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import yaml

import scenario
from test_4_faults import assert_nothing_lost, infsvc, ready, record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from rendezvous import percentile  # noqa: E402

NS = scenario.NS
PERCENT = 30
CALLS = 2000
UPPER_LABELS = "classifier-labels-upper"
CANARY_PODS = "app.kubernetes.io/name=infergate-canary,app.kubernetes.io/instance=triton"
SEQUENCE_BASE = 770_000
SEQUENCES = 60
LENGTH = 4


def models(labels: str) -> list[dict]:
    return [{"name": "classifier",
             "labels": {"configMap": labels, "outputs": {"OUTPUT0": "labels.txt"}}},
            {"name": "sequence_accumulator", "maxBatchSize": 8}]


def canary_spec(kube) -> dict:
    model = infsvc(kube, "triton")["spec"]["model"]
    return {"trafficPercent": PERCENT, "model": model, "models": models(UPPER_LABELS)}


def patch(kube, spec: dict):
    kube.kubectl("patch", "infsvc", "triton", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": spec}))


def settled(kube, canary_pods: int):
    """Ready at its generation, one pod of the service, `canary_pods` ready canary pods (and no
    other canary pod left)."""
    def check():
        if not ready(kube, "triton"):
            return False
        status = infsvc(kube, "triton")["status"]
        if status.get("replicas") != 1:
            return False
        pods = kube.pods(NS, CANARY_PODS)
        if canary_pods == 0:
            return not pods and "canary" not in status and status
        canary = status.get("canary") or {}
        running = kube.running_pods(NS, CANARY_PODS)
        return (canary.get("readyReplicas") == canary_pods and len(pods) == canary_pods
                and len(running) == canary_pods and status)
    return check


def within_binomial(k: int, n: int, percent: int) -> bool:
    """4.5 standard deviations: a false failure about once in 150,000 runs."""
    p = percent / 100
    return abs(k - n * p) <= 4.5 * math.sqrt(n * p * (1 - p))


def test_a_canary_splits_per_call_and_is_rolled_back_and_promoted_losing_no_call(kube, client):
    labels = (kube.work / "repositories" / "triton" / "classifier" / "labels.txt").read_text()
    kube.apply(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": UPPER_LABELS, "namespace": NS},
                               "data": {"labels.txt": labels.upper()}}))
    patch(kube, {"replicas": 1, "sidecar": {"maxConnectionAgeSeconds": None},
                 "models": models(scenario.CLASSIFIER_LABELS), "canary": canary_spec(kube)})
    started = time.monotonic()
    kube.wait_until("the service and its canary ready", settled(kube, 1), timeout=480)
    canary_ready_s = time.monotonic() - started
    host = scenario.service_ip(kube, "triton")

    # The split, per call, on one connection of each protocol.
    got = scenario.call(kube, "calls.py", "variants", host, "--calls", str(CALLS), timeout=900)
    for proto, counts in got.items():
        assert counts["upper"] + counts["lower"] == CALLS, got
        assert within_binomial(counts["upper"], CALLS, PERCENT), (proto, got)

    # Whole sequences, each on the variant of its percentile.
    (canary_pod,) = kube.running_pods(NS, CANARY_PODS)
    canary_ip = canary_pod["status"]["podIP"]
    before = scenario.call(kube, "calls.py", "served", canary_ip,
                           "--model", "sequence_accumulator")[canary_ip]
    answers = scenario.call(kube, "calls.py", "sequences", host, "--sequences", str(SEQUENCES),
                            "--length", str(LENGTH), "--sequence-id", str(SEQUENCE_BASE),
                            timeout=600)
    for sid, got_answers in answers.items():
        inputs = [int(sid) % 7 + step for step in range(LENGTH)]
        assert got_answers == [sum(inputs[:n + 1]) for n in range(LENGTH)], (sid, got_answers)
    on_canary = [sid for sid in range(SEQUENCE_BASE, SEQUENCE_BASE + SEQUENCES)
                 if percentile("sequence_accumulator", sid) < PERCENT]
    after = scenario.call(kube, "calls.py", "served", canary_ip,
                          "--model", "sequence_accumulator")[canary_ip]
    assert after - before == LENGTH * len(on_canary), (after - before, len(on_canary))

    # The status counts each variant's calls (from the sidecars' /status, read by the operator).
    def counted():
        calls = (infsvc(kube, "triton")["status"].get("canary") or {}).get("calls") or {}
        canary_calls = calls.get("canary", {}).get("success", 0)
        return canary_calls >= sum(c["upper"] for c in got.values()) and calls
    # A change of metadata wakes the operator now rather than at its next requeue.
    kube.kubectl("annotate", "--overwrite", "infsvc", "triton", "-n", NS,
                 f"e2e.infergate.dev/poke={time.time()}")
    calls = kube.wait_until("status.canary.calls to count the canary's calls", counted,
                            timeout=150, interval=3)

    # Rolled back, then added again and promoted, under load.
    load = scenario.Load(kube, "triton", threads=1)
    try:
        time.sleep(3)
        patch(kube, {"canary": None})
        kube.wait_until("the canary gone", settled(kube, 0), timeout=480)
        patch(kube, {"canary": canary_spec(kube)})
        kube.wait_until("the canary back", settled(kube, 1), timeout=480)
        time.sleep(3)
        patch(kube, {"models": models(UPPER_LABELS), "canary": None})
        kube.wait_until("the canary promoted", settled(kube, 0), timeout=480)
        time.sleep(3)
    finally:
        summary = load.stop()
    assert_nothing_lost(summary)
    assert summary["errors"] == 0, json.dumps(summary, indent=1)
    # Every answer is now the canary's.
    promoted = scenario.call(kube, "calls.py", "variants", host, "--calls", "50")
    assert all(c == {"upper": 50, "lower": 0} for c in promoted.values()), promoted
    record(kube, "canary", {"canary_ready_s": round(canary_ready_s, 1), "split": got,
                            "sequences_on_canary": len(on_canary), "status_calls": calls,
                            "load": summary})
