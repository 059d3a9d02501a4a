"""Dynamic batching: requests to a model with `dynamic_batching` that arrive together run as one
batch, and each request's answer is what it would have been alone.

Each test loads a built-in model with a configuration laid over its own (explicit model control),
with `preferred_batch_size` equal to the number of requests it sends together and a long
`max_queue_delay_microseconds`: the batch goes as soon as they have all arrived, so the test
needs no timing. The statistics then show one execution of that batch size. The model's own
configuration is restored afterwards. In front of an upstream the models are loaded in the
model container, and those tests are skipped there; the last test runs there instead, on the
model the upstream runs have the sidecar batch (tests/upstream/contracts.py, run-triton.sh).
"""

import json
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import np_to_triton_dtype

from support import IDENTITY_DTYPES, UPSTREAM, local_models

# Long enough that the requests of a test always arrive within it; a batch reaching its
# preferred size does not wait it out.
DELAY_US = 20_000_000


def load(raw_http, model, config):
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    resp = raw_http("POST", f"/v2/repository/models/{model}/load", body)
    assert resp.status == 200, resp


@pytest.fixture
def batching(raw_http):
    """batching(model, together, **config) loads `model` with a dynamic batcher whose preferred
    batch is `together` rows; each model is loaded with its own configuration again after."""
    loaded = []

    def configure(model, together, **config):
        resp = raw_http("GET", f"/v2/models/{model}/config")
        assert resp.status == 200, resp
        own = resp.json()
        loaded.append(model)
        config.setdefault("max_batch_size", 8)
        merged = dict(own)
        merged.update(config)
        merged.setdefault("dynamic_batching", {
            "preferred_batch_size": [together],
            "max_queue_delay_microseconds": DELAY_US,
        })
        load(raw_http, model, merged)

    yield configure
    for model in loaded:
        assert raw_http("POST", f"/v2/repository/models/{model}/unload").status == 200
        deadline = time.monotonic() + 20
        while raw_http("POST", f"/v2/repository/models/{model}/load").status != 200:
            assert time.monotonic() < deadline, f"{model} did not load again"
            time.sleep(0.2)


def together(*calls):
    """Runs the calls at once, each on a thread of its own; their results in order (an exception
    is raised again)."""
    results = [None] * len(calls)

    def run(i, call):
        try:
            results[i] = ("ok", call())
        except Exception as e:  # noqa: BLE001 (handed back to the test)
            results[i] = ("raised", e)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for kind, value in results:
        if kind == "raised":
            raise value
    return [value for _, value in results]


def stats(raw_http, model):
    resp = raw_http("GET", f"/v2/models/{model}/stats")
    assert resp.status == 200, resp
    return resp.json()["model_stats"][0]


def batch_sizes(model_stats):
    return {b["batch_size"]: b["compute_infer"]["count"] for b in model_stats["batch_stats"]}


def values(dtype, rows, width, seed):
    """`rows`×`width` values of `dtype`, different for each `seed`."""
    count = rows * width
    if dtype == "BYTES":
        flat = [f"r{seed}-{i}" + "x" * ((seed + i) % 5) for i in range(count)]
        return np.array([s.encode() for s in flat], dtype=np.object_).reshape(rows, width)
    if dtype == "BOOL":
        return (np.arange(count) % (seed + 2) == 0).reshape(rows, width)
    np_type = ml_dtypes.bfloat16 if dtype == "BF16" else IDENTITY_DTYPES[dtype]
    return (np.arange(count) + seed * 7).astype(np_type).reshape(rows, width)


def http_identity(url, model, dtype, data, binary=True):
    client = httpclient.InferenceServerClient(url)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), dtype)
    tensor.set_data_from_numpy(data, binary_data=binary)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary or dtype == "BF16")
    return client.infer(model, [tensor], outputs=[output]).as_numpy("OUTPUT0")


def grpc_identity(url, model, dtype, data):
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor]).as_numpy("OUTPUT0")


def same(got, want, dtype):
    if dtype == "BF16":
        # BF16 keeps the top half of an FP32: the values here are small integers, kept exactly.
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    elif dtype == "BYTES":
        # A JSON answer gives strings, a binary one bytes.
        as_bytes = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])
        np.testing.assert_array_equal(as_bytes(got), want)
    else:
        np.testing.assert_array_equal(got, want)


@local_models
@pytest.mark.parametrize("dtype", sorted(IDENTITY_DTYPES))
def test_requests_of_every_datatype_join_one_batch_and_each_gets_its_own_rows(
        dtype, batching, raw_http, http_url, grpc_url):
    model = f"identity_{dtype.lower()}"
    batching(model, 5)
    before = stats(raw_http, model)
    inputs = [values(dtype, rows, 3, seed) for seed, rows in enumerate([1, 2, 1, 1])]
    # JSON cannot carry FP16 or BF16 (Triton refuses both); every other datatype goes once as
    # JSON too.
    json_ok = dtype not in ("FP16", "BF16")
    calls = [
        lambda: http_identity(http_url, model, dtype, inputs[0]),
        lambda: http_identity(http_url, model, dtype, inputs[1], binary=not json_ok),
        lambda: grpc_identity(grpc_url, model, dtype, inputs[2]),
        lambda: grpc_identity(grpc_url, model, dtype, inputs[3]),
    ]
    for got, want in zip(together(*calls), inputs):
        assert got.shape == want.shape
        same(got, want, dtype)
    after = stats(raw_http, model)
    assert after["execution_count"] - before.get("execution_count", 0) == 1, after
    assert after["inference_count"] - before.get("inference_count", 0) == 5, after
    assert after["inference_stats"]["success"]["count"] == 4, after
    assert batch_sizes(after) == {5: 1}, after


@local_models
def test_requests_that_differ_in_a_non_batch_dimension_do_not_join(batching, raw_http, http_url):
    """Only requests that agree on every non-batch dimension share a batch. As in Triton, a
    batch ends at the first waiting request that does not match its first, so how these four
    (two of width 3, two of width 5, sent together) split depends on the order they arrive in;
    joined rows of different widths would fail the batch, so every answer must be its own."""
    model = "identity_int32"
    batching(model, 2, dynamic_batching={
        "preferred_batch_size": [2], "max_queue_delay_microseconds": 200_000})
    narrow = [values("INT32", 1, 3, s) for s in (1, 2)]
    wide = [values("INT32", 1, 5, s) for s in (3, 4)]
    answers = together(*(lambda d=d: http_identity(http_url, model, "INT32", d) for d in narrow + wide))
    for got, want in zip(answers, narrow + wide):
        np.testing.assert_array_equal(got, want)
    model_stats = stats(raw_http, model)
    sizes = batch_sizes(model_stats)
    assert set(sizes) <= {1, 2} and sum(s * n for s, n in sizes.items()) == 4, model_stats


@local_models
def test_a_batch_never_passes_max_batch_size(batching, raw_http, http_url):
    """Six one-row requests under a `max_batch_size` of 4, held by a slow first request: the
    batches are at most 4 rows."""
    model = "custom_identity_int32"
    batching(model, 4, max_batch_size=4,
             instance_group=[{"count": 1, "kind": "KIND_CPU"}],
             parameters={"execute_delay_ms": {"string_value": "300"}},
             dynamic_batching={})
    inputs = [np.array([[i]], dtype=np.int32) for i in range(7)]

    def call(data, pause):
        time.sleep(pause)
        return http_identity(http_url, model, "INT32", data)

    # The first runs alone; the six sent while it runs wait for it, and form batches of 4 and 2.
    answers = together(lambda: call(inputs[0], 0), *(lambda d=d: call(d, 0.1) for d in inputs[1:]))
    for got, want in zip(answers, inputs):
        np.testing.assert_array_equal(got, want)
    model_stats = stats(raw_http, model)
    sizes = batch_sizes(model_stats)
    assert max(sizes) <= 4, model_stats
    assert sum(size * count for size, count in sizes.items()) == 7, model_stats
    assert model_stats["execution_count"] < 7, "no batch formed"


@local_models
def test_each_request_keeps_its_outputs_classification_and_shared_memory(
        batching, raw_http, http_url, grpc_url):
    """A batch of the classifier whose requests each ask differently: the tensor as binary, the
    tensor as JSON, its top 2 classes with labels, and the tensor written into a region of
    system shared memory. Each answer equals the same request's answer alone."""
    model = "classifier"
    rows = [np.array([[0.1 * i, 0.5, -1.0 * i, 2.0]], dtype=np.float32) for i in range(4)]

    def ask(i):
        client = httpclient.InferenceServerClient(http_url)
        tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(rows[i], binary_data=i != 1)
        if i == 2:
            output = httpclient.InferRequestedOutput("OUTPUT0", class_count=2)
        else:
            output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=i != 1)
        if i == 3:
            output.set_shared_memory(region, 16)
        result = client.infer(model, [tensor], outputs=[output])
        if i == 3:
            assert "data" not in result.get_output("OUTPUT0"), "the output is in the region"
            return shm.get_contents_as_numpy(handle, np.float32, [1, 4])
        return result.as_numpy("OUTPUT0")

    region = "batching_output"
    key = f"/conformance_batching_{threading.get_ident()}"
    handle = shm.create_shared_memory_region(region, key, 16)
    client = httpclient.InferenceServerClient(http_url)
    try:
        client.unregister_system_shared_memory(region)
        client.register_system_shared_memory(region, key, 16)
        alone = [ask(i) for i in range(3)]
        batching(model, 4)
        answers = together(*(lambda i=i: ask(i) for i in range(4)))
        for i in range(3):
            np.testing.assert_array_equal(answers[i], alone[i])
        np.testing.assert_array_equal(answers[3], rows[3])
        assert [c.decode() for c in answers[2].ravel()][0].count(":") == 2, answers[2]
        assert batch_sizes(stats(raw_http, model)) == {4: 1}
    finally:
        client.unregister_system_shared_memory(region)
        shm.destroy_shared_memory_region(handle)


@local_models
def test_statistics_count_requests_rows_and_executions_as_triton_does(batching, raw_http, grpc_url):
    """`inference_count` counts rows, `execution_count` batches, `success` requests; each
    request's queue and compute durations are its own."""
    model = "identity_fp32"
    batching(model, 6)
    inputs = [values("FP32", rows, 2, seed) for seed, rows in enumerate([3, 1, 2])]
    together(*(lambda d=d: grpc_identity(grpc_url, model, "FP32", d) for d in inputs))
    model_stats = stats(raw_http, model)
    inference = model_stats["inference_stats"]
    assert (model_stats["inference_count"], model_stats["execution_count"]) == (6, 1), model_stats
    for part in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[part]["count"] == 3, (part, inference)
    assert batch_sizes(model_stats) == {6: 1}


@pytest.mark.skipif(not UPSTREAM, reason="in front of a model server only")
def test_the_sidecar_batches_for_a_model_server_without_a_batcher(raw_http, grpc_url):
    """In the upstream runs `simple` has `dynamic_batching` (no delay) in the sidecar's
    `backend.models[].config` and none in the model server's own configuration: the sidecar
    batches it. Requests sent together while the model is busy go as batches of at most
    `max_batch_size` rows, and each answer is its own request's sum and difference."""
    model = "simple"

    def call(seed):
        client = grpcclient.InferenceServerClient(grpc_url)
        a = (np.arange(16, dtype=np.int32) + seed).reshape(1, 16)
        b = np.full((1, 16), seed, dtype=np.int32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(model, inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

    # Whether requests overlap is up to the machine: a few bursts make a batch all but certain.
    for _ in range(10):
        before = stats(raw_http, model)
        together(*(lambda s=s: call(s) for s in range(24)))
        after = stats(raw_http, model)
        executions = after["execution_count"] - before["execution_count"]
        requests = after["inference_stats"]["success"]["count"] - \
            before["inference_stats"]["success"]["count"]
        assert requests == 24
        if executions < requests:
            break
    assert executions < requests, "no two requests ever shared a batch"
    assert max(batch_sizes(after)) <= 8, after
