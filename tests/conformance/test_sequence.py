"""Sequence extension (TRITON.md §7) and sequences over ModelStreamInfer (§3.6).

Flows of Triton's client examples simple_http_sequence_sync_infer_client.py,
simple_grpc_sequence_sync_infer_client.py and
simple_grpc_sequence_stream_infer_client.py (ids 1000/1001 plus a string id,
values [0, 11, 7, 5, 3, 2, 0, 1]; ``-d`` = the dyna models), many sequences
beyond the slot count, idle timeout, restart, the §7.2 errors and parameter
type errors, and a perf_analyzer sequence run. Expected outputs come from the
model contracts in seq_support.py.
"""

import json
import queue
import subprocess
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from seq_support import (
    CONTROL_KIND,
    EXAMPLE_VALUES,
    LONG_ID_ERROR,
    OLDEST_MODELS,
    REQUIRED_CONTROLS,
    SEQUENCE_MODELS,
    Stream,
    batch_error,
    corrid_type_error,
    expected_outputs,
    flow_schedule,
    grpc_output,
    grpc_seq_request,
    http_output,
    http_seq,
    idle_timeout_s,
    model_config,
    model_step,
    no_id_error,
    perf_analyzer_or_skip,
    simple_grpc_request,
    slot_count,
    start_error,
    steps_of,
    unique_id,
)
from support import SIMPLE_A, SIMPLE_B, assert_simple_json_response, grpc_error, simple_json_request

NEG_VALUES = [-v for v in EXAMPLE_VALUES]


def example_flow(name: str) -> list:
    """[(model, sequence id, values)] as the example clients run them."""
    if name == "simple":  # no -d: UUID string id on simple_sequence
        return [
            ("simple_sequence", 1000, [0] + EXAMPLE_VALUES),
            ("simple_sequence", 1001, [100] + NEG_VALUES),
            ("simple_sequence", str(uuid.uuid4()), [20] + NEG_VALUES),
        ]
    if name == "dyna":  # -d: CORRID models, string id "1002"
        return [
            ("simple_dyna_sequence", 1000, [0] + EXAMPLE_VALUES),
            ("simple_dyna_sequence", 1001, [100] + NEG_VALUES),
            ("simple_string_dyna_sequence", "1002", [20] + NEG_VALUES),
        ]
    if name == "accumulator":
        return [
            ("sequence_accumulator", 1000, [0] + EXAMPLE_VALUES),
            ("sequence_accumulator", 1001, [100] + NEG_VALUES),
        ]
    raise KeyError(name)


FLOWS = ["simple", "dyna", "accumulator"]
ORDERS = ["sequential", "interleaved"]


def _check_example_expectations(flow_name, flow, results):
    """The examples' own hard-coded checks hold too (sanity for the contracts)."""
    if flow_name not in ("simple", "dyna"):
        return
    dyna = flow_name == "dyna"
    r0, r1, rs = results
    for i in range(len(r0)):
        e0 = 1 if i == 0 else EXAMPLE_VALUES[i - 1]
        e1 = 101 if i == 0 else -EXAMPLE_VALUES[i - 1]
        if i == 0:
            es = 20 if dyna else 21
        elif dyna:
            es = -EXAMPLE_VALUES[i - 1] + rs[i - 1]
        else:
            es = -EXAMPLE_VALUES[i - 1]
        if dyna and i != 0 and EXAMPLE_VALUES[i - 1] == 1:
            e0 += flow[0][1]
            e1 += flow[1][1]
            es += int(flow[2][1])
        assert (r0[i], r1[i], rs[i]) == (e0, e1, es), (i, r0, r1, rs)


# --------------------------------------------------------------------------- example flows
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("flow_name", FLOWS)
def test_http_sequence_sync_flow(http_client, flow_name, order):
    """simple_http_sequence_sync_infer_client.py (± -d); JSON and binary outputs alternate."""
    flow = example_flow(flow_name)
    results = [[] for _ in flow]
    for s, k in flow_schedule([len(v) for _, _, v in flow], order):
        model, sid, values = flow[s]
        data = np.full((1, 1), values[k], np.int32)
        inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(data, binary_data=(k % 2 == 0))
        out = httpclient.InferRequestedOutput("OUTPUT", binary_data=(k % 2 == 1))
        result = http_client.infer(
            model, [inp], outputs=[out], sequence_id=sid,
            sequence_start=(k == 0), sequence_end=(k == len(values) - 1),
        )
        got = result.as_numpy("OUTPUT")
        assert got.shape == (1, 1) and got.dtype == np.int32
        results[s].append(int(got[0][0]))
    for (model, sid, values), got in zip(flow, results):
        assert got == expected_outputs(model, steps_of(values), sid), (model, sid)
    _check_example_expectations(flow_name, flow, results)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("flow_name", FLOWS)
def test_grpc_sequence_sync_flow(grpc_client, flow_name, order):
    """simple_grpc_sequence_sync_infer_client.py (± -d)."""
    flow = example_flow(flow_name)
    results = [[] for _ in flow]
    for s, k in flow_schedule([len(v) for _, _, v in flow], order):
        model, sid, values = flow[s]
        inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.full((1, 1), values[k], np.int32))
        result = grpc_client.infer(
            model, [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT")], sequence_id=sid,
            sequence_start=(k == 0), sequence_end=(k == len(values) - 1),
        )
        got = result.as_numpy("OUTPUT")
        assert got.shape == (1, 1) and got.dtype == np.int32
        results[s].append(int(got[0][0]))
    for (model, sid, values), got in zip(flow, results):
        assert got == expected_outputs(model, steps_of(values), sid), (model, sid)
    _check_example_expectations(flow_name, flow, results)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("flow_name", FLOWS)
def test_grpc_sequence_stream_flow(grpc_client, flow_name, order):
    """simple_grpc_sequence_stream_infer_client.py (± -d): results routed by the echoed id "<seq>_<n>"."""
    flow = example_flow(flow_name)
    results: queue.Queue = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        plan = flow_schedule([len(v) for _, _, v in flow], order)
        for s, k in plan:
            model, sid, values = flow[s]
            inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.full((1, 1), values[k], np.int32))
            grpc_client.async_stream_infer(
                model, [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                request_id=f"{sid}_{k + 1}", sequence_id=sid,
                sequence_start=(k == 0), sequence_end=(k == len(values) - 1),
            )
        by_seq = {str(sid): [] for _, sid, _ in flow}
        for _ in plan:
            result, error = results.get(timeout=60)
            assert error is None, error
            resp = result.get_response()
            this_id, _, n = resp.id.rpartition("_")
            assert this_id in by_seq, resp.id
            assert resp.parameters["triton_final_response"].bool_param is True
            got = result.as_numpy("OUTPUT")
            assert got.shape == (1, 1)
            by_seq[this_id].append((int(n), int(got[0][0])))
    finally:
        grpc_client.stop_stream()
    collected = []
    for model, sid, values in flow:
        got = by_seq[str(sid)]
        # responses of one sequence come back in request order
        assert [n for n, _ in got] == list(range(1, len(values) + 1)), (sid, got)
        outs = [v for _, v in got]
        assert outs == expected_outputs(model, steps_of(values), sid), (model, sid)
        collected.append(outs)
    _check_example_expectations(flow_name, flow, collected)


# --------------------------------------------------------------------------- stream mix
def test_stream_interleaved_sequences_and_plain_requests(grpc_stub):
    """One stream: two sequences on different models, non-sequence `simple`
    requests (one carrying ignored sequence params) and an error in between."""
    acc_id, dyna_id = unique_id(), unique_id()
    acc_vals, dyna_vals = [4, -1, 10, 3], [9, 8, 7]
    acc_exp = expected_outputs("sequence_accumulator", steps_of(acc_vals), acc_id)
    dyna_exp = expected_outputs("simple_dyna_sequence", steps_of(dyna_vals), dyna_id)
    stream = Stream(grpc_stub)
    sent = []  # (request id, kind, expected)
    for k in range(4):
        if k < len(acc_vals):
            rid = f"acc_{k}"
            stream.send(grpc_seq_request("sequence_accumulator", acc_vals[k], acc_id,
                                         k == 0, k == len(acc_vals) - 1, request_id=rid))
            sent.append((rid, "seq", acc_exp[k]))
        rid = f"plain_{k}"
        a = np.full((1, 16), k, np.int32)
        req = simple_grpc_request(a, SIMPLE_B, request_id=rid)
        if k == 1:  # sequence params on a non-sequence model are ignored
            req.parameters["sequence_id"].int64_param = unique_id()
            req.parameters["sequence_start"].bool_param = False
        stream.send(req)
        sent.append((rid, "plain", k))
        if k < len(dyna_vals):
            rid = f"dyna_{k}"
            stream.send(grpc_seq_request("simple_dyna_sequence", dyna_vals[k], dyna_id,
                                         k == 0, k == len(dyna_vals) - 1, request_id=rid))
            sent.append((rid, "seq", dyna_exp[k]))
        if k == 2:  # an in-stream error: non-START request of an unknown sequence
            bad = unique_id()
            stream.send(grpc_seq_request("sequence_accumulator", 1, bad, False, False, request_id="bad"))
            sent.append(("bad", "error", start_error(bad, "sequence_accumulator")))
    got = {}
    order = []
    for _ in sent:
        r = stream.recv()
        order.append(r.infer_response.id)
        got[r.infer_response.id] = r
    assert sorted(order) == sorted(rid for rid, _, _ in sent)
    for prefix in ("acc_", "dyna_", "plain_"):  # per-sequence order preserved
        ids = [i for i in order if i.startswith(prefix)]
        assert ids == sorted(ids, key=lambda x: int(x.split("_")[1])), order
    for rid, kind, expected in sent:
        r = got[rid]
        if kind == "error":
            assert r.error_message == expected
            assert len(r.infer_response.outputs) == 0
            continue
        assert r.error_message == "", (rid, r.error_message)
        assert r.infer_response.parameters["triton_final_response"].bool_param is True
        if kind == "seq":
            assert grpc_output(r.infer_response) == expected, rid
        else:
            resp = r.infer_response
            assert resp.model_name == "simple"
            outs = {o.name: np.frombuffer(raw, np.int32).tolist()
                    for o, raw in zip(resp.outputs, resp.raw_output_contents)}
            assert outs["OUTPUT0"] == [expected + 3] * 16
            assert outs["OUTPUT1"] == [expected - 3] * 16
    assert stream.close() == []


# --------------------------------------------------------------------------- concurrency
def _run_sequences(n, run_one):
    errors, done = [], []
    barrier = threading.Barrier(n)

    def worker(i):
        try:
            barrier.wait(timeout=60)
            run_one(i)
            done.append(i)
        except Exception as e:  # reported below
            errors.append(f"sequence {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 180
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"{sum(t.is_alive() for t in threads)} sequences hung"
    assert not errors, errors[:5]
    assert sorted(done) == list(range(n))


@pytest.mark.parametrize(
    "model,transport",
    [("sequence_accumulator", "http"), ("sequence_accumulator", "grpc"),
     ("simple_sequence", "grpc"), ("simple_dyna_sequence", "grpc")],
)
def test_many_sequences_beyond_slots(http_url, grpc_client, model, transport):
    """3x the slot count of sequences at once (the rest wait in the backlog);
    each of ~5 requests gets its own sequence's result."""
    config = model_config(http_url, model)
    n = 3 * slot_count(config)
    base = [unique_id() for _ in range(n)]
    rng = np.random.default_rng(7)
    plans = [steps_of([int(v) for v in rng.integers(-50, 50, size=5)]) for _ in range(n)]

    def run_one(i):
        sid = base[i]
        expected = expected_outputs(model, plans[i], sid)
        for (value, start, end), want in zip(plans[i], expected):
            if transport == "http":
                got = http_output(http_seq(http_url, model, value, sid, start, end))
            else:
                inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                inp.set_data_from_numpy(np.full((1, 1), value, np.int32))
                res = grpc_client.infer(model, [inp], sequence_id=sid, sequence_start=start,
                                        sequence_end=end, client_timeout=120)
                got = int(res.as_numpy("OUTPUT")[0][0])
            assert got == want, (sid, value, got, want)

    _run_sequences(n, run_one)


# --------------------------------------------------------------------------- lifecycle
def test_idle_timeout_then_start_required(http_url, grpc_stub):
    """A sequence idle longer than max_sequence_idle_microseconds is released;
    its next non-START request gets the START error, a new START works. A
    sequence that keeps sending within the timeout stays alive."""
    timeouts = {m: idle_timeout_s(model_config(http_url, m)) for m in SEQUENCE_MODELS}
    usable = {m: t for m, t in timeouts.items() if t <= 10}
    if not usable:
        pytest.skip(f"no sequence model with an idle timeout <= 10 s: {timeouts}")
    wait = max(usable.values())
    ids = {m: (str(unique_id()) if m == "simple_string_dyna_sequence" else unique_id()) for m in usable}
    for m, sid in ids.items():  # START over HTTP
        assert http_output(http_seq(http_url, m, 3, sid, True, False)) == model_step(m, 0, 3, True, False, sid)[0]
    live = unique_id() if "sequence_accumulator" in usable else None
    if live is not None:
        assert http_output(http_seq(http_url, "sequence_accumulator", 1, live, True, False)) == 1
    live_sum = 1
    deadline = time.monotonic() + wait + 1.5
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(wait / 3, remaining))
        if live is not None:  # keep-alive: never idle for more than wait/3
            resp = grpc_stub.ModelInfer(grpc_seq_request("sequence_accumulator", 2, live, False, False))
            live_sum += 2
            assert grpc_output(resp) == live_sum
    for m, sid in ids.items():
        if m in ("sequence_accumulator", "simple_sequence"):
            resp = http_seq(http_url, m, 4, sid, False, True)
            assert (resp.status, resp.error) == (400, start_error(sid, m)), resp
        else:
            with pytest.raises(Exception) as info:
                grpc_stub.ModelInfer(grpc_seq_request(m, 4, sid, False, True))
            assert grpc_error(info.value) == ("INVALID_ARGUMENT", start_error(sid, m))
    if live is not None:  # still the same running sum
        assert http_output(http_seq(http_url, "sequence_accumulator", 4, live, False, True)) == live_sum + 4
    for m, sid in ids.items():  # a new START is accepted and starts afresh
        steps = [(5, True, False), (6, False, True)]
        outs = [http_output(http_seq(http_url, m, v, sid, s, e)) for v, s, e in steps]
        assert outs == expected_outputs(m, steps, sid), m


RESTART_STEPS = [(5, True, False), (6, False, False), (2, True, False), (3, False, False), (4, False, True)]


@pytest.mark.parametrize("model", ["sequence_accumulator", "simple_dyna_sequence", "simple_string_dyna_sequence"])
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_second_start_restarts_sequence(http_url, grpc_stub, model, transport):
    """A new START for an active sequence is not an error: the model sees START again (state reset)."""
    sid = str(unique_id()) if model == "simple_string_dyna_sequence" else unique_id()
    got = []
    for value, start, end in RESTART_STEPS:
        if transport == "http":
            got.append(http_output(http_seq(http_url, model, value, sid, start, end)))
        else:
            got.append(grpc_output(grpc_stub.ModelInfer(grpc_seq_request(model, value, sid, start, end))))
    assert got == expected_outputs(model, RESTART_STEPS, sid)
    if model == "sequence_accumulator":
        assert got == [5, 11, 2, 5, 9]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_request_after_end_needs_start(http_url, grpc_stub, transport):
    model = "sequence_accumulator"
    sid = unique_id()
    if transport == "http":
        assert http_output(http_seq(http_url, model, 7, sid, True, False)) == 7
        assert http_output(http_seq(http_url, model, 1, sid, False, True)) == 8
        resp = http_seq(http_url, model, 1, sid, False, False)
        assert (resp.status, resp.error) == (400, start_error(sid, model)), resp
        resp = http_seq(http_url, model, 1, sid, False, True)  # END alone is not a START either
        assert (resp.status, resp.error) == (400, start_error(sid, model)), resp
        assert http_output(http_seq(http_url, model, 2, sid, True, True)) == 2
    else:
        assert grpc_output(grpc_stub.ModelInfer(grpc_seq_request(model, 7, sid, True, False))) == 7
        assert grpc_output(grpc_stub.ModelInfer(grpc_seq_request(model, 1, sid, False, True))) == 8
        with pytest.raises(Exception) as info:
            grpc_stub.ModelInfer(grpc_seq_request(model, 1, sid, False, False))
        assert grpc_error(info.value) == ("INVALID_ARGUMENT", start_error(sid, model))
        assert grpc_output(grpc_stub.ModelInfer(grpc_seq_request(model, 2, sid, True, True))) == 2


def test_single_request_sequence(http_url):
    """START+END in one request: all of START, END and READY are true."""
    sid = unique_id()
    assert http_output(http_seq(http_url, "simple_dyna_sequence", 9, sid, True, True)) == 9 + 1 + sid
    assert http_output(http_seq(http_url, "sequence_accumulator", 9, sid, True, True)) == 9


def test_string_and_numeric_ids_are_different_sequences(http_url):
    """"77" and 77 are distinct sequences (type, then value)."""
    n = unique_id()
    model = "simple_sequence"  # no CORRID control: accepts both id types
    assert http_output(http_seq(http_url, model, 1, n, True, False)) == 2
    resp = http_seq(http_url, model, 1, str(n), False, True)
    assert (resp.status, resp.error) == (400, start_error(n, model)), resp
    assert http_output(http_seq(http_url, model, 1, n, False, True)) == 1


def test_grpc_negative_int64_id_is_uint64(grpc_stub):
    """gRPC int64_param ids are reinterpreted as uint64 (-2 -> 18446744073709551614)."""
    req = grpc_seq_request("sequence_accumulator", 1, None, False, False)
    req.parameters["sequence_id"].int64_param = -2
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT", start_error(18446744073709551614, "sequence_accumulator"))


# --------------------------------------------------------------------------- §7.2 errors
def _http_and_grpc(http_url, grpc_stub, model, value, sid, start, end, batch, status, code, message):
    resp = http_seq(http_url, model, value, sid, start, end, batch=batch)
    assert (resp.status, resp.error) == (status, message), resp
    assert resp.headers.get("content-type", "").startswith("application/json")
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(grpc_seq_request(model, value, sid, start, end, batch=batch))
    assert grpc_error(info.value) == (code, message)


def _corrid_type(http_url, model):
    for c in model_config(http_url, model)["sequence_batching"]["control_input"]:
        if c["control"][0]["kind"] == "CONTROL_SEQUENCE_CORRID":
            return c["control"][0]["data_type"]
    return None


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_missing_correlation_id(http_url, grpc_stub, model):
    """No id at all. A request without an id carries the numeric id 0, so a
    model whose CORRID control is TYPE_STRING reports the id type mismatch
    first (core validates the CORRID type before the scheduler checks the id)."""
    if _corrid_type(http_url, model) == "TYPE_STRING":
        message = corrid_type_error(model, "UINT64", "BYTES")
    else:
        message = no_id_error(model)
    _http_and_grpc(http_url, grpc_stub, model, 1, None, None, None, 1, 400, "INVALID_ARGUMENT", message)


@pytest.mark.parametrize("sid", [0, ""], ids=["zero", "empty-string"])
def test_zero_or_empty_correlation_id_with_start(http_url, grpc_stub, sid):
    model = "sequence_accumulator" if sid == 0 else "simple_sequence"
    _http_and_grpc(http_url, grpc_stub, model, 1, sid, True, True, 1, 400, "INVALID_ARGUMENT", no_id_error(model))


def test_client_omits_zero_id(http_client, grpc_client):
    """tritonclient drops all sequence params for id 0, so the id error comes back."""
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException) as info:
        http_client.infer("simple_sequence", [inp], sequence_id=0, sequence_start=True)
    assert info.value.status() == "400"
    assert info.value.message() == no_id_error("simple_sequence")
    ginp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    ginp.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("simple_sequence", [ginp], sequence_id=0, sequence_start=True)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == no_id_error("simple_sequence")


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_batch_size_above_one(http_url, grpc_stub, model):
    sid = str(unique_id()) if model == "simple_string_dyna_sequence" else unique_id()
    _http_and_grpc(http_url, grpc_stub, model, 1, sid, True, True, 2, 400, "INVALID_ARGUMENT", batch_error(model))
    # nothing was started by the rejected request
    resp = http_seq(http_url, model, 1, sid, False, True)
    assert (resp.status, resp.error) == (400, start_error(sid, model)), resp


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_non_start_for_unknown_sequence(http_url, grpc_stub, model):
    sid = str(unique_id()) if model == "simple_string_dyna_sequence" else unique_id()
    _http_and_grpc(http_url, grpc_stub, model, 1, sid, False, False, 1, 400, "INVALID_ARGUMENT", start_error(sid, model))


def test_non_start_for_unknown_string_sequence(http_url, grpc_stub):
    sid = f"no-such-seq-{uuid.uuid4()}"
    model = "simple_sequence"
    _http_and_grpc(http_url, grpc_stub, model, 1, sid, False, True, 1, 400, "INVALID_ARGUMENT", start_error(sid, model))


@pytest.mark.triton251_differs(
    "2.51 crashes (the process dies) on a string sequence_id for a model with a UINT64 CORRID control",
    run=False,
)
@pytest.mark.parametrize("model", ["sequence_accumulator", "simple_dyna_sequence"])
def test_string_id_for_uint64_corrid_model(http_url, grpc_stub, model):
    msg = corrid_type_error(model, "BYTES", "UINT64")
    _http_and_grpc(http_url, grpc_stub, model, 1, str(unique_id()), True, True, 1, 400, "INVALID_ARGUMENT", msg)
    # the server keeps serving the model
    sid = unique_id()
    assert http_output(http_seq(http_url, model, 2, sid, True, True)) == model_step(model, 0, 2, True, True, sid)[0]


@pytest.mark.triton251_differs(
    "2.51 cannot serve a TYPE_STRING CORRID control (it rejects its own padded tensor), so the lab's "
    "simple_string_dyna_sequence has no CORRID control and accepts numeric ids"
)
def test_numeric_id_for_string_corrid_model(http_url, grpc_stub):
    model = "simple_string_dyna_sequence"
    msg = corrid_type_error(model, "UINT64", "BYTES")
    _http_and_grpc(http_url, grpc_stub, model, 1, unique_id(), True, True, 1, 400, "INVALID_ARGUMENT", msg)


def test_string_id_length_limit(http_url, grpc_stub):
    model = "simple_sequence"
    ok = "s" * 127 + "1"
    assert http_output(http_seq(http_url, model, 5, ok, True, True)) == 6
    assert grpc_output(grpc_stub.ModelInfer(grpc_seq_request(model, 5, ok, True, True))) == 6
    too_long = "s" * 128 + "1"
    _http_and_grpc(http_url, grpc_stub, model, 5, too_long, True, True, 1, 501, "UNIMPLEMENTED", LONG_ID_ERROR)


# --------------------------------------------------------------------------- parameter types
@pytest.mark.parametrize(
    "params,message",
    [
        ({"sequence_id": 5, "sequence_start": "true"},
         "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"),
        ({"sequence_id": 5, "sequence_start": 1},
         "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"),
        ({"sequence_id": 5, "sequence_start": True, "sequence_end": "yes"},
         "Unable to parse 'sequence_end': attempt to access JSON non-boolean as boolean"),
        ({"sequence_id": -5, "sequence_start": True},
         "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
        ({"sequence_id": 1.5, "sequence_start": True},
         "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
        ({"sequence_id": True, "sequence_start": True},
         "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
    ],
    ids=["start-string", "start-int", "end-string", "id-negative", "id-float", "id-bool"],
)
def test_http_sequence_param_wrong_type(raw_http, params, message):
    """JSON type errors in request parameters are 500 (§0.3, §2.2)."""
    body = {"parameters": params, "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}
    resp = raw_http("POST", "/v2/models/sequence_accumulator/infer", json.dumps(body))
    assert (resp.status, resp.error) == (500, message), resp


def _set(param, kind, value):
    setattr(param, kind, value)


@pytest.mark.parametrize(
    "key,kind,value,message",
    [
        ("sequence_id", "uint64_param", 9,
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_id", "bool_param", True,
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_id", "double_param", 3.0,
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_start", "int64_param", 1,
         "invalid value type for 'sequence_start' parameter, expected bool_param."),
        ("sequence_end", "string_param", "x",
         "invalid value type for 'sequence_end' parameter, expected bool_param."),
    ],
    ids=["id-uint64", "id-bool", "id-double", "start-int64", "end-string"],
)
def test_grpc_sequence_param_wrong_type(grpc_stub, key, kind, value, message):
    req = grpc_seq_request("sequence_accumulator", 1, unique_id(), True, True)
    _set(req.parameters[key], kind, value)
    with pytest.raises(Exception) as info:
        grpc_stub.ModelInfer(req)
    assert grpc_error(info.value) == ("INVALID_ARGUMENT", message)


# --------------------------------------------------------------------------- non-sequence models
def test_sequence_params_ignored_by_non_sequence_model(http_client, grpc_client, raw_http):
    for params in ({"sequence_id": 5, "sequence_start": True},
                   {"sequence_id": unique_id(), "sequence_start": False, "sequence_end": False},
                   {"sequence_id": "abc", "sequence_end": True},
                   {"sequence_id": 0, "sequence_start": True}):
        resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(simple_json_request(parameters=params)))
        assert resp.status == 200, (params, resp)
        assert_simple_json_response(resp.json())
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(SIMPLE_A)
    inputs[1].set_data_from_numpy(SIMPLE_B)
    for sid, start in ((unique_id(), False), ("xyz", True)):
        res = grpc_client.infer("simple", inputs, sequence_id=sid, sequence_start=start, sequence_end=False)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    hin = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    hin[0].set_data_from_numpy(SIMPLE_A)
    hin[1].set_data_from_numpy(SIMPLE_B)
    res = http_client.infer("simple", hin, sequence_id=unique_id(), sequence_start=False, sequence_end=True)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)


# --------------------------------------------------------------------------- metadata / config
def test_server_metadata_lists_sequence(raw_http, grpc_client):
    resp = raw_http("GET", "/v2")
    assert resp.status == 200, resp
    assert "sequence" in resp.json()["extensions"]
    assert "sequence" in grpc_client.get_server_metadata().extensions


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_model_config_shows_sequence_batching(http_url, grpc_client, model):
    config = model_config(http_url, model)
    sb = config.get("sequence_batching")
    assert isinstance(sb, dict), config
    assert idle_timeout_s(config) > 0
    controls = {c["name"]: c["control"] for c in sb["control_input"]}
    assert REQUIRED_CONTROLS[model] <= set(controls), controls
    for name, entries in controls.items():
        assert len(entries) == 1, entries
        (c,) = entries
        assert c["kind"] == CONTROL_KIND[name], c
        if name == "CORRID":
            want = "TYPE_STRING" if model == "simple_string_dyna_sequence" else "TYPE_UINT64"
            assert c["data_type"] == want, c
        else:
            assert [int(x) for x in c["int32_false_true"]] == [0, 1], c
    if model in OLDEST_MODELS:
        assert int(sb["oldest"]["max_candidate_sequences"]) > 0, sb
    else:
        assert "oldest" not in sb, sb
    assert int(config["max_batch_size"]) == 8
    assert config["input"][0]["name"] == "INPUT" and config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["output"][0]["name"] == "OUTPUT" and config["output"][0]["data_type"] == "TYPE_INT32"
    # gRPC ModelConfig carries the same controls
    gsb = grpc_client.get_model_config(model).config.sequence_batching
    assert {c.name for c in gsb.control_input} == set(controls)
    assert gsb.max_sequence_idle_microseconds == int(sb["max_sequence_idle_microseconds"])


# --------------------------------------------------------------------------- perf_analyzer
@pytest.mark.perf_analyzer
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_sequence_mode(http_url, grpc_url, protocol):
    pa = perf_analyzer_or_skip()
    cmd = [
        pa, "-m", "sequence_accumulator", "-u", http_url if protocol == "http" else grpc_url, "-i", protocol,
        "--sequence-length", "5", "--concurrency-range", "4",
        # Synchronous calls: each client thread has one request of a sequence in flight at a
        # time. In asynchronous mode perf_analyzer can have a sequence's last requests in flight
        # together, and their order on arrival is not guaranteed by the protocol (TRITON.md §7.4).
        "--sync",
        "--measurement-mode", "time_windows", "--measurement-interval", "1000",
        "--max-trials", "4", "--stability-percentage", "999",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)}\nexit {proc.returncode}\n{out[-4000:]}"
    lowered = out.lower()
    assert "error" not in lowered and "failed" not in lowered, out[-4000:]
    assert "Sequence count:" in out and "Throughput:" in out, out[-4000:]
    assert "Server:" in out and "Inference count:" in out, out[-4000:]
