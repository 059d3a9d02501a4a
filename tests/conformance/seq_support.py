"""Helpers for the sequence-extension tests (test_sequence.py).

Expected outputs are computed from the model contracts (the same ones Triton's
example models implement), never hard-coded:

* simple_sequence              OUTPUT = (INPUT + START) * READY
* simple_dyna_sequence         OUTPUT = (INPUT + START + END * CORRID) * READY
* sequence_accumulator         OUTPUT = running sum of INPUT (START resets)
* simple_string_dyna_sequence  running sum of INPUT (START resets); the END
                               request also adds int(correlation id)
"""

from __future__ import annotations

import itertools
import json
import queue
import random
from typing import Iterable

import numpy as np
from tritonclient.grpc import service_pb2

from support import raw_request

SEQUENCE_MODELS = (
    "simple_sequence",
    "simple_dyna_sequence",
    "sequence_accumulator",
    "simple_string_dyna_sequence",
)

# Control inputs each model's config must list (CORRID of the string model is
# checked separately: TYPE_STRING when present).
REQUIRED_CONTROLS = {
    "simple_sequence": {"START", "READY"},
    "simple_dyna_sequence": {"START", "END", "READY", "CORRID"},
    "sequence_accumulator": {"START", "END", "READY", "CORRID"},
    "simple_string_dyna_sequence": {"START", "END", "READY"},
}
CONTROL_KIND = {
    "START": "CONTROL_SEQUENCE_START",
    "END": "CONTROL_SEQUENCE_END",
    "READY": "CONTROL_SEQUENCE_READY",
    "CORRID": "CONTROL_SEQUENCE_CORRID",
}
OLDEST_MODELS = {"simple_dyna_sequence", "simple_string_dyna_sequence"}

# Values of Triton's sequence client examples.
EXAMPLE_VALUES = [11, 7, 5, 3, 2, 0, 1]

_ids = itertools.count(random.randint(2_000_000, 200_000_000) * 4)


def unique_id() -> int:
    """A fresh numeric correlation id (small enough that END*CORRID fits INT32)."""
    return next(_ids)


# --------------------------------------------------------------------------- contracts
def model_step(model: str, state: int, value: int, start: bool, end: bool, seq_id) -> tuple:
    """(output, new_state) of one ready request of a sequence."""
    start_i, end_i = int(bool(start)), int(bool(end))
    if model == "simple_sequence":
        return value + start_i, state
    if model == "simple_dyna_sequence":
        return value + start_i + end_i * int(seq_id), state
    if model == "sequence_accumulator":
        total = (0 if start else state) + value
        return total, total
    if model == "simple_string_dyna_sequence":
        total = (0 if start else state) + value
        return total + (int(seq_id) if end else 0), total
    if model == "simple":  # not a sequence model; handled by callers
        raise ValueError("simple is not a sequence model")
    raise KeyError(model)


def expected_outputs(model: str, steps: Iterable[tuple], seq_id) -> list:
    """Outputs for steps [(value, start, end), ...] of one sequence."""
    state, out = 0, []
    for value, start, end in steps:
        o, state = model_step(model, state, value, start, end, seq_id)
        out.append(o)
    return out


def steps_of(values: list) -> list:
    """[(value, start, end)]: START on the first, END on the last request."""
    n = len(values)
    return [(v, i == 0, i == n - 1) for i, v in enumerate(values)]


# --------------------------------------------------------------------------- messages
def start_error(seq_id, model: str) -> str:
    return (
        f"inference request for sequence {seq_id} to model '{model}' must specify the START flag "
        "on the first request of the sequence"
    )


def no_id_error(model: str) -> str:
    return f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"


def batch_error(model: str) -> str:
    return f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"


def corrid_type_error(model: str, got: str, want: str, request_id: str = "<id_unknown>") -> str:
    return (
        f"[request id: {request_id}] sequence batching control 'CORRID' data-type is '{got}', "
        f"but model '{model}' expects '{want}'"
    )


LONG_ID_ERROR = "string correlation ID cannot be longer than 128 characters"


# --------------------------------------------------------------------------- HTTP
def seq_json(value: int, seq_id=None, start=None, end=None, batch: int = 1, request_id=None, params=None) -> dict:
    """JSON infer body for a sequence model (INPUT INT32 [batch, 1])."""
    body = {"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [batch, 1], "data": [value] * batch}]}
    p = dict(params or {})
    if seq_id is not None:
        p["sequence_id"] = seq_id
    if start is not None:
        p["sequence_start"] = start
    if end is not None:
        p["sequence_end"] = end
    if p:
        body["parameters"] = p
    if request_id is not None:
        body["id"] = request_id
    return body


def http_seq(hostport: str, model: str, value: int, seq_id=None, start=None, end=None, **kw):
    """POST one sequence request as JSON; returns the RawResponse."""
    body = json.dumps(seq_json(value, seq_id, start, end, **kw))
    return raw_request(hostport, "POST", f"/v2/models/{model}/infer", body)


def http_output(resp) -> int:
    """The single OUTPUT value of a 200 JSON response (asserts its form)."""
    assert resp.status == 200, resp
    doc = resp.json()
    (out,) = doc["outputs"]
    assert out["name"] == "OUTPUT" and out["datatype"] == "INT32" and out["shape"] == [1, 1], doc
    return out["data"][0]


def model_config(hostport: str, model: str) -> dict:
    resp = raw_request(hostport, "GET", f"/v2/models/{model}/config")
    assert resp.status == 200, resp
    return resp.json()


def idle_timeout_s(config: dict) -> float:
    us = config["sequence_batching"].get("max_sequence_idle_microseconds", 1_000_000)
    us = int(us) or 1_000_000  # protobuf JSON may print uint64 as a string; 0 = default 1 s
    return us / 1e6


def slot_count(config: dict) -> int:
    """Concurrently active sequences: instances x slots per instance (§7.4)."""
    sb = config["sequence_batching"]
    mbs = int(config.get("max_batch_size", 0))
    per_instance = max(1, mbs)
    oldest = sb.get("oldest")
    if oldest and int(oldest.get("max_candidate_sequences", 0)) > 0:
        per_instance = int(oldest["max_candidate_sequences"])
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
    return instances * per_instance


# --------------------------------------------------------------------------- gRPC
def grpc_seq_request(model: str, value: int, seq_id=None, start=None, end=None, batch: int = 1,
                     request_id: str = "") -> service_pb2.ModelInferRequest:
    """Raw ModelInferRequest; seq_id int -> int64_param (as the clients send), str -> string_param."""
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    req.inputs.add(name="INPUT", datatype="INT32", shape=[batch, 1])
    req.raw_input_contents.append(np.full((batch, 1), value, np.int32).tobytes())
    if seq_id is not None:
        if isinstance(seq_id, str):
            req.parameters["sequence_id"].string_param = seq_id
        else:
            # int64_param carries the id bit pattern (uint64 ids above 2**63 wrap).
            req.parameters["sequence_id"].int64_param = int(np.uint64(seq_id).astype(np.int64))
    if start is not None:
        req.parameters["sequence_start"].bool_param = bool(start)
    if end is not None:
        req.parameters["sequence_end"].bool_param = bool(end)
    return req


def grpc_output(resp) -> int:
    (out,) = resp.outputs
    assert out.name == "OUTPUT" and out.datatype == "INT32" and list(out.shape) == [1, 1], resp
    return int(np.frombuffer(resp.raw_output_contents[0], np.int32)[0])


def simple_grpc_request(a: np.ndarray, b: np.ndarray, request_id: str = "") -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name="simple", id=request_id)
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        req.inputs.add(name=name, datatype="INT32", shape=list(x.shape))
        req.raw_input_contents.append(x.tobytes())
    return req


_END = object()


class Stream:
    """Bidirectional ModelStreamInfer driven step by step (send, then read)."""

    def __init__(self, stub, timeout: float = 60):
        self._q: queue.Queue = queue.Queue()
        self._responses = stub.ModelStreamInfer(iter(self._q.get, _END), timeout=timeout)

    def send(self, req) -> None:
        self._q.put(req)

    def recv(self):
        return next(self._responses)

    def close(self) -> list:
        self._q.put(_END)
        return list(self._responses)


def flow_schedule(lengths: list, order: str) -> list:
    """Sending order [(sequence index, step index)]: one sequence after the
    other (as Triton's sync examples do) or round-robin interleaved."""
    if order == "sequential":
        return [(s, k) for s, n in enumerate(lengths) for k in range(n)]
    if order == "interleaved":
        out = []
        for k in range(max(lengths)):
            out += [(s, k) for s, n in enumerate(lengths) if k < n]
        return out
    raise ValueError(order)


from support import perf_analyzer_or_skip  # noqa: E402,F401  (re-exported for test_sequence)
