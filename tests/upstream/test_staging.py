"""The staging pool between the sidecar and a real Triton (run by run-triton.sh after the
conformance suite, against the same two servers).

Proves that tensor bytes travel through shared memory rather than the socket: Triton itself
lists the sidecar's pool among its registered regions, the sidecar's counters grow by the exact
tensor sizes, results are right, and every slot is back in the pool after each request, failed
ones included.

Environment: INFERGATE_HTTP_URL, INFERGATE_GRPC_URL, INFERGATE_METRICS_URL, INFERGATE_ADMIN_URL
(the sidecar) and INFERGATE_TRITON_HTTP_URL (Triton directly).
"""

import os
import re

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

HTTP = os.environ["INFERGATE_HTTP_URL"]
GRPC = os.environ["INFERGATE_GRPC_URL"]
METRICS = os.environ["INFERGATE_METRICS_URL"]
ADMIN = os.environ["INFERGATE_ADMIN_URL"]
TRITON = os.environ["INFERGATE_TRITON_HTTP_URL"]

ELEMENTS = 1 << 20  # 4 MiB of FP32


def admin():
    return requests.get(f"http://{ADMIN}/status", timeout=10).json()


def pool():
    return admin()["shm"]["staging_pool"]


def metric(name, labels=""):
    text = requests.get(f"http://{METRICS}/metrics", timeout=10).text
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\d+)$"
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"{name}{labels} not in the metrics"
    return int(found.group(1))


def staged():
    return (
        metric("infergate_staging_bytes_total", '{direction="input"}'),
        metric("infergate_staging_bytes_total", '{direction="output"}'),
    )


def test_triton_holds_the_sidecars_pool():
    p = pool()
    assert p["state"] == "Active", p
    assert admin()["shm"]["shared_with_upstream"] is True
    regions = requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()
    mine = [r for r in regions if r["name"] == p["key"]]
    assert mine, regions
    assert mine[0]["byte_size"] == p["byte_size"]
    assert mine[0]["key"].lstrip("/") == p["key"]
    assert metric("infergate_staging_pool_active") == 1


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_large_tensor_goes_through_shared_memory_and_comes_back_right(protocol):
    data = np.random.default_rng(7).standard_normal(ELEMENTS).astype(np.float32)
    before = staged()
    if protocol == "http":
        client = httpclient.InferenceServerClient(HTTP)
        inp = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        inp.set_data_from_numpy(data, binary_data=True)
        out = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    else:
        client = grpcclient.InferenceServerClient(GRPC)
        inp = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        inp.set_data_from_numpy(data)
        out = [grpcclient.InferRequestedOutput("OUTPUT0")]
    result = client.infer("identity_fp32", [inp], outputs=out)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    after = staged()
    assert after[0] - before[0] == data.nbytes, (before, after)
    assert after[1] - before[1] == data.nbytes, (before, after)
    assert pool()["in_use_bytes"] == 0


def test_mixed_inputs_and_batched_outputs():
    # simple: two INT32 [1,16] inputs, two outputs sized from the configuration.
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    client = grpcclient.InferenceServerClient(GRPC)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    before = staged()
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    after = staged()
    if pool()["min_tensor_bytes"] <= 64:
        assert after[0] - before[0] == 128 and after[1] - before[1] == 128, (before, after)


def test_slots_are_reclaimed_when_the_upstream_refuses_the_request():
    # The inputs are staged, then Triton's sequence batcher refuses a request without a
    # correlation id: the slots must come back all the same.
    body = {"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}
    before = pool()["in_use_bytes"]
    r = requests.post(f"http://{HTTP}/v2/models/simple_sequence/infer", json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert pool()["in_use_bytes"] == before == 0


def test_many_concurrent_requests_share_the_pool_and_give_it_back():
    from concurrent.futures import ThreadPoolExecutor

    data = np.arange(ELEMENTS // 4, dtype=np.float32)

    def one(i):
        client = httpclient.InferenceServerClient(HTTP)
        inp = httpclient.InferInput("INPUT0", [data.size], "FP32")
        inp.set_data_from_numpy(data + i, binary_data=True)
        got = client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0")
        return bool(np.array_equal(got, data + i))

    with ThreadPoolExecutor(8) as pool_:
        assert all(pool_.map(one, range(32)))
    assert pool()["in_use_bytes"] == 0


def test_an_output_for_a_client_region_is_written_there_by_triton_itself():
    import time

    import tritonclient.utils.shared_memory as shm

    data = np.random.default_rng(11).standard_normal(ELEMENTS).astype(np.float32)
    tag = f"igpass{os.getpid()}"
    in_handle = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", data.nbytes)
    out_handle = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", data.nbytes)
    client = httpclient.InferenceServerClient(HTTP)
    try:
        shm.set_shared_memory_region(in_handle, [data])
        client.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", data.nbytes)
        client.register_system_shared_memory(f"{tag}_out", f"/{tag}_out", data.nbytes)
        inp = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        inp.set_shared_memory(f"{tag}_in", data.nbytes)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        out.set_shared_memory(f"{tag}_out", data.nbytes)
        before = metric("infergate_passthrough_bytes_total", '{direction="output"}')
        staged_before = staged()
        client.infer("identity_fp32", [inp], outputs=[out])
        got = shm.get_contents_as_numpy(out_handle, np.float32, [ELEMENTS])
        np.testing.assert_array_equal(got, data)
        # Triton wrote the output into the client's region: the sidecar copied none of it.
        assert metric("infergate_passthrough_bytes_total", '{direction="output"}') - before == data.nbytes
        after = staged()
        assert after[1] == staged_before[1], "the output did not go through the pool"
        assert after[0] - staged_before[0] == data.nbytes, "the input still goes through the pool"
        regions = requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()
        mine = [r for r in regions if r["key"].lstrip("/") == f"{tag}_out"]
        assert mine and mine[0]["name"].startswith("infergate_client_"), regions
        # The client lets go of it: the sidecar unregisters it from Triton on its next probes.
        client.unregister_system_shared_memory(f"{tag}_out")
        deadline = time.monotonic() + 15
        while any(r["key"].lstrip("/") == f"{tag}_out" for r in
                  requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()):
            assert time.monotonic() < deadline, "Triton still holds the client's region"
            time.sleep(0.2)
    finally:
        client.unregister_system_shared_memory(f"{tag}_in")
        client.unregister_system_shared_memory(f"{tag}_out")
        del got
        shm.destroy_shared_memory_region(in_handle)
        shm.destroy_shared_memory_region(out_handle)
