"""The staging pool between the sidecar and a real Triton (run by run-triton.sh after the
conformance suite, against the same two servers).

Proves that tensor bytes travel through shared memory rather than the socket: Triton itself
lists the sidecar's pool among its registered regions, the sidecar's counters grow by the exact
tensor sizes, results are right, and every slot is back in the pool after each request, failed
ones included.

Environment: INFERGATE_HTTP_URL, INFERGATE_GRPC_URL, INFERGATE_METRICS_URL, INFERGATE_ADMIN_URL
(the sidecar) and INFERGATE_TRITON_HTTP_URL (Triton directly).
"""

import base64
import json
import os
import re
import socket
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

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


def staging_key():
    """The pool's name, as Triton lists it (the sidecar never tells it)."""
    regions = requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()
    mine = [r["name"] for r in regions if r["name"].startswith("infergate_staging_")]
    assert len(mine) == 1, regions
    return mine[0]


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
    key = staging_key()
    regions = requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()
    mine = [r for r in regions if r["name"] == key]
    assert mine[0]["byte_size"] == p["byte_size"]
    assert mine[0]["key"].lstrip("/") == key
    assert metric("infergate_staging_pool_active") == 1


def test_the_pools_name_is_not_told_and_cannot_be_guessed():
    assert "key" not in pool(), pool()
    assert staging_key() not in json.dumps(admin())
    # The pid, then 128 random bits.
    assert re.fullmatch(r"infergate_staging_\d+_[0-9a-f]{32}", staging_key()), staging_key()


def test_no_client_registers_the_pool_by_its_name_or_by_another():
    key = staging_key()
    register = f"http://{HTTP}/v2/systemsharedmemory/region/stolen/register"
    r = requests.post(register, json={"key": f"/{key}", "offset": 0, "byte_size": 4096}, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == (f"cannot register shared memory region 'stolen' with key '/{key}' "
                                 "as the key contains the reserved prefix 'infergate_'")
    # Another name for the same object (a hard link in /dev/shm) is the same object.
    alias = f"alias_of_the_pool_{os.getpid()}"
    os.link(f"/dev/shm/{key}", f"/dev/shm/{alias}")
    try:
        r = requests.post(register, json={"key": f"/{alias}", "offset": 0, "byte_size": 4096},
                          timeout=10)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == (f"cannot register shared memory region 'stolen' with key "
                                     f"'/{alias}' as the key names an object reserved by the server")
    finally:
        os.unlink(f"/dev/shm/{alias}")
    status = requests.get(f"http://{HTTP}/v2/systemsharedmemory/status", timeout=10).json()
    assert not [r for r in status if r["name"] == "stolen"], status


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


def test_requests_the_sidecar_batches_reach_triton_through_the_pool_as_one():
    """`simple` is batched by the sidecar in this run (run-triton.sh): requests that join a batch
    are one request to Triton, whose joined inputs travel through the pool like any other
    tensor. With every tensor staged, the pool's input bytes grow by every request's bytes
    although fewer calls than requests reached Triton."""
    from concurrent.futures import ThreadPoolExecutor

    if pool()["min_tensor_bytes"] > 64:
        pytest.skip("this run stages only larger tensors")

    def one(seed):
        client = grpcclient.InferenceServerClient(GRPC)
        a = (np.arange(16, dtype=np.int32) + seed).reshape(1, 16)
        b = np.full((1, 16), seed, dtype=np.int32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("simple", inputs)
        return (np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                and np.array_equal(result.as_numpy("OUTPUT1"), a - b))

    # Whether requests overlap is up to the machine: a few bursts make a batch all but certain.
    for _ in range(10):
        before_bytes, before_calls = staged(), triton_successes("simple")
        with ThreadPoolExecutor(24) as threads:
            assert all(threads.map(one, range(24)))
        after_bytes, after_calls = staged(), triton_successes("simple")
        if after_calls - before_calls < 24:
            break
    assert after_calls - before_calls < 24, "no two requests ever shared a batch"
    # Two [1,16] INT32 inputs and two such outputs a request, all through the pool.
    assert after_bytes[0] - before_bytes[0] == 24 * 128, (before_bytes, after_bytes)
    assert after_bytes[1] - before_bytes[1] == 24 * 128, (before_bytes, after_bytes)
    assert pool()["in_use_bytes"] == 0


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


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def triton_successes(model):
    stats = requests.get(f"http://{TRITON}/v2/models/{model}/stats", timeout=10).json()
    return stats["model_stats"][0]["inference_stats"]["success"]["count"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_that_goes_away_leaves_its_slots_held_until_triton_answers(protocol):
    # slow_identity answers after 2 s. The client goes away long before: its slots must stay out
    # of the pool until Triton has answered (Triton may read and write them until then), and the
    # call must run to its end in Triton rather than be cancelled there.
    data = np.ones((1, ELEMENTS), dtype=np.float32)
    assert pool()["in_use_bytes"] == 0
    successes = triton_successes("slow_identity")
    if protocol == "http":
        header = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(data.shape),
                              "parameters": {"binary_data_size": data.nbytes}}],
                  "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
        head = json.dumps(header).encode()
        body = head + data.tobytes()
        host, _, port = HTTP.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                (f"POST /v2/models/slow_identity/infer HTTP/1.1\r\nHost: test\r\n"
                 f"Inference-Header-Content-Length: {len(head)}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
            assert wait_for(lambda: pool()["in_use_bytes"] > 0, 5), "the request was not staged"
    else:
        client = grpcclient.InferenceServerClient(GRPC)
        inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException, match="Deadline|Timeout expired"):
            client.infer("slow_identity", [inp], client_timeout=0.5)
    # Gone: the slots are still held while Triton works, and come back once it has answered.
    time.sleep(0.3)
    assert pool()["in_use_bytes"] > 0, "slots went back to the pool while Triton held them"
    assert wait_for(lambda: triton_successes("slow_identity") == successes + 1, 10)
    assert wait_for(lambda: pool()["in_use_bytes"] == 0, 5), pool()


def triton_regions():
    return requests.get(f"http://{TRITON}/v2/systemsharedmemory/status", timeout=10).json()


def held_by_triton(key):
    """The name Triton knows the client's object `key` by, or None."""
    mine = [r for r in triton_regions() if r["key"].lstrip("/") == key]
    return mine[0]["name"] if mine else None


def passed():
    return (
        metric("infergate_passthrough_bytes_total", '{direction="input"}'),
        metric("infergate_passthrough_bytes_total", '{direction="output"}'),
    )


def infer_in_regions(lib, client, tag, nbytes):
    """identity_fp32 with its input in the client's region `<tag>_in` and its output in `<tag>_out`:
    Triton reads and writes them itself, so the sidecar passes every byte through and copies none,
    not even into its pool."""
    inp = lib.InferInput("INPUT0", [ELEMENTS], "FP32")
    inp.set_shared_memory(f"{tag}_in", nbytes)
    out = lib.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(f"{tag}_out", nbytes)
    passed_before, staged_before = passed(), staged()
    client.infer("identity_fp32", [inp], outputs=[out])
    passed_after, staged_after = passed(), staged()
    assert passed_after[0] - passed_before[0] == nbytes, (passed_before, passed_after)
    assert passed_after[1] - passed_before[1] == nbytes, (passed_before, passed_after)
    assert staged_after == staged_before, (staged_before, staged_after)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_client_regions_are_read_and_written_by_triton_itself(protocol):
    import tritonclient.utils.shared_memory as shm

    data = np.random.default_rng(11).standard_normal(ELEMENTS).astype(np.float32)
    tag = f"igpass{os.getpid()}{protocol}"
    in_handle = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", data.nbytes)
    out_handle = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", data.nbytes)
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(HTTP if protocol == "http" else GRPC)
    got = None
    try:
        shm.set_shared_memory_region(in_handle, [data])
        client.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", data.nbytes)
        client.register_system_shared_memory(f"{tag}_out", f"/{tag}_out", data.nbytes)
        infer_in_regions(lib, client, tag, data.nbytes)
        got = shm.get_contents_as_numpy(out_handle, np.float32, [ELEMENTS])
        np.testing.assert_array_equal(got, data)
        for key in (f"{tag}_in", f"{tag}_out"):
            name = held_by_triton(key)
            assert name and name.startswith("infergate_client_"), triton_regions()
        # The client changes its input in place: the next answer is from the new bytes.
        shm.set_shared_memory_region(in_handle, [data * 2])
        infer_in_regions(lib, client, tag, data.nbytes)
        got = shm.get_contents_as_numpy(out_handle, np.float32, [ELEMENTS])
        np.testing.assert_array_equal(got, data * 2)
        # The client lets go of its regions: the sidecar unregisters them from Triton on its
        # next probes.
        client.unregister_system_shared_memory(f"{tag}_in")
        client.unregister_system_shared_memory(f"{tag}_out")
        released = wait_for(lambda: not held_by_triton(f"{tag}_in") and not held_by_triton(f"{tag}_out"), 15)
        assert released, f"Triton still holds the client's regions: {triton_regions()}"
    finally:
        client.unregister_system_shared_memory(f"{tag}_in")
        client.unregister_system_shared_memory(f"{tag}_out")
        del got
        shm.destroy_shared_memory_region(in_handle)
        shm.destroy_shared_memory_region(out_handle)


def client_cuda_regions_held_by_triton():
    """The CUDA regions the sidecar registered with Triton for its clients."""
    regions = requests.get(f"http://{TRITON}/v2/cudasharedmemory/status", timeout=10).json()
    return [r for r in regions if r["name"].startswith("infergate_client_")]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_clients_cuda_buffers_are_opened_by_triton_itself(protocol):
    """On a GPU machine: Triton opens the client's CUDA IPC handles, reads the input from the
    device and writes the output there; the sidecar moves none of those bytes."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "conformance"))
    from support import cuda_unusable_reason

    reason = cuda_unusable_reason()
    if reason:
        pytest.skip(reason)
    if "cuda_shared_memory" not in requests.get(f"http://{TRITON}/v2", timeout=10).json()["extensions"]:
        pytest.skip("this Triton does not offer cuda_shared_memory")
    import tritonclient.utils.cuda_shared_memory as cudashm

    data = np.random.default_rng(13).standard_normal(ELEMENTS).astype(np.float32)
    tag = f"igcudapass{os.getpid()}{protocol}"
    in_handle = cudashm.create_shared_memory_region(f"{tag}_in", data.nbytes, 0)
    out_handle = cudashm.create_shared_memory_region(f"{tag}_out", data.nbytes, 0)
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(HTTP if protocol == "http" else GRPC)
    try:
        cudashm.set_shared_memory_region(in_handle, [data])
        for name, handle in ((f"{tag}_in", in_handle), (f"{tag}_out", out_handle)):
            client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, data.nbytes)
        infer_in_regions(lib, client, tag, data.nbytes)
        got = cudashm.get_contents_as_numpy(out_handle, np.float32, [ELEMENTS])
        np.testing.assert_array_equal(got, data)
        held = client_cuda_regions_held_by_triton()
        assert len(held) == 2 and all(r["byte_size"] == data.nbytes for r in held), held
        # The client changes its input on the device: the next answer is from the new values.
        cudashm.set_shared_memory_region(in_handle, [data * 2])
        infer_in_regions(lib, client, tag, data.nbytes)
        got = cudashm.get_contents_as_numpy(out_handle, np.float32, [ELEMENTS])
        np.testing.assert_array_equal(got, data * 2)
        client.unregister_cuda_shared_memory(f"{tag}_in")
        client.unregister_cuda_shared_memory(f"{tag}_out")
        assert wait_for(lambda: not client_cuda_regions_held_by_triton(), 15), client_cuda_regions_held_by_triton()
    finally:
        client.unregister_cuda_shared_memory(f"{tag}_in")
        client.unregister_cuda_shared_memory(f"{tag}_out")
        cudashm.destroy_shared_memory_region(in_handle)
        cudashm.destroy_shared_memory_region(out_handle)


def test_a_key_registered_again_at_once_and_used_by_many_requests_is_still_passed_through():
    """perf_analyzer's pattern: each run creates the same keys, registers them, drives many
    requests at once and lets go; the next run does the same right away. The sidecar's old
    registration of the key with Triton (Triton refuses one key under two names) and eight
    requests asking for the new one at the same moment must not send the bytes the slow way."""
    from concurrent.futures import ThreadPoolExecutor

    import tritonclient.utils.shared_memory as shm

    data = np.random.default_rng(12).standard_normal(ELEMENTS).astype(np.float32)
    tag = f"igagain{os.getpid()}"
    keys = {f"{tag}_in": f"/{tag}_in", f"{tag}_out": f"/{tag}_out"}

    def run(scale, requests_at_once):
        handles = [shm.create_shared_memory_region(name, key, data.nbytes)
                   for name, key in keys.items()]
        client = grpcclient.InferenceServerClient(GRPC)
        try:
            shm.set_shared_memory_region(handles[0], [data * scale])
            for name, key in keys.items():
                client.register_system_shared_memory(name, key, data.nbytes)

            def one(_):
                inp = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
                inp.set_shared_memory(f"{tag}_in", data.nbytes)
                out = grpcclient.InferRequestedOutput("OUTPUT0")
                out.set_shared_memory(f"{tag}_out", data.nbytes)
                grpcclient.InferenceServerClient(GRPC).infer("identity_fp32", [inp], outputs=[out])

            with ThreadPoolExecutor(requests_at_once) as pool_:
                list(pool_.map(one, range(requests_at_once)))
            got = shm.get_contents_as_numpy(handles[1], np.float32, [ELEMENTS])
            np.testing.assert_array_equal(got, data * scale)
            del got
        finally:
            for name in keys:
                client.unregister_system_shared_memory(name)
            for handle in handles:
                shm.destroy_shared_memory_region(handle)

    run(1, 1)
    passed_before, staged_before = passed(), staged()
    run(3, 8)
    passed_after, staged_after = passed(), staged()
    assert passed_after[0] - passed_before[0] == 8 * data.nbytes, (passed_before, passed_after)
    assert passed_after[1] - passed_before[1] == 8 * data.nbytes, (passed_before, passed_after)
    assert staged_after == staged_before, (staged_before, staged_after)


def test_a_region_input_beside_an_inline_one_and_a_window_inside_a_region():
    # simple (INT32 [1,16] x2): INPUT0 from the middle of a client's region, INPUT1 in the
    # request; outputs in the response.
    import tritonclient.utils.shared_memory as shm

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    tag = f"igwin{os.getpid()}"
    handle = shm.create_shared_memory_region(tag, f"/{tag}", 3 * a.nbytes)
    client = grpcclient.InferenceServerClient(GRPC)
    try:
        shm.set_shared_memory_region(handle, [np.full((1, 16), -1, dtype=np.int32), a,
                                              np.full((1, 16), -2, dtype=np.int32)])
        client.register_system_shared_memory(tag, f"/{tag}", 3 * a.nbytes)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(tag, a.nbytes, offset=a.nbytes)
        inputs[1].set_data_from_numpy(b)
        before = passed()[0]
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert passed()[0] - before == a.nbytes
        # A window that does not hold what the shape needs is the sidecar's to refuse, with
        # Triton's words, before anything reaches Triton.
        inputs[0].set_shared_memory(tag, a.nbytes - 4, offset=a.nbytes)
        with pytest.raises(Exception, match="input byte size mismatch for input 'INPUT0'"):
            client.infer("simple", inputs)
    finally:
        client.unregister_system_shared_memory(tag)
        shm.destroy_shared_memory_region(handle)


def test_cuda_registrations_are_answered_by_triton():
    """Triton lists cuda_shared_memory, so the sidecar lists it too and hands clients' CUDA handles
    to Triton (this container has no GPU, or Triton is preferred): a handle Triton cannot open
    gets Triton's own answer, through either protocol, and nothing stays registered anywhere.
    (What the sidecar sends Triton, and its use in inference: test_cuda_forwarding.py.)"""
    triton_v2 = requests.get(f"http://{TRITON}/v2", timeout=10).json()
    if "cuda_shared_memory" not in triton_v2["extensions"]:
        pytest.skip("this Triton does not offer cuda_shared_memory")
    assert "cuda_shared_memory" in requests.get(f"http://{HTTP}/v2", timeout=10).json()["extensions"]
    cuda = next(e for e in admin()["extensions"] if e["name"] == "cuda_shared_memory")
    assert (cuda["state"], cuda["implementation"]) == ("Active", "upstream"), cuda

    body = {"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": 0, "byte_size": 64}
    direct = requests.post(f"http://{TRITON}/v2/cudasharedmemory/region/zero/register", json=body, timeout=30)
    assert direct.status_code == 400, direct.text
    through = requests.post(f"http://{HTTP}/v2/cudasharedmemory/region/zero/register", json=body, timeout=30)
    assert (through.status_code, through.json()) == (direct.status_code, direct.json())
    client = grpcclient.InferenceServerClient(GRPC)
    with pytest.raises(InferenceServerException) as refused:
        client.register_cuda_shared_memory("zero", base64.b64encode(bytes(64)), 0, 64)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == direct.json()["error"]
    # A handle of 10 bytes over gRPC: Triton does not check the length there (it opens 64 bytes read
    # from whatever it was sent, and the failed open answers); the sidecar checks it and gives the
    # same answer without reaching Triton. (Over REST both check it: test_hostile_input.py.)
    short = {}
    for name, address in (("triton", os.environ["INFERGATE_TRITON_GRPC_URL"]), ("sidecar", GRPC)):
        with grpcclient.InferenceServerClient(address) as each:
            with pytest.raises(InferenceServerException) as refused:
                each.register_cuda_shared_memory("short", base64.b64encode(bytes(10)), 0, 64)
            short[name] = (refused.value.status(), refused.value.message())
    assert short["sidecar"] == short["triton"] == (
        "StatusCode.INVALID_ARGUMENT", "failed to register shared memory region: invalid args")
    client.close()
    assert requests.get(f"http://{HTTP}/v2/cudasharedmemory/status", timeout=10).json() == []
    assert requests.get(f"http://{TRITON}/v2/cudasharedmemory/status", timeout=10).json() == []


@pytest.mark.parametrize("lost", ["the pool", "every region"])
def test_client_regions_keep_passing_through_when_triton_loses_regions_under_load(lost):
    """Another client of the same Triton unregisters regions there while calls with a client's
    regions are in flight (perf_analyzer unregisters them all when it starts and ends): the
    sidecar registers its pool again and keeps the client regions Triton still holds. Telling
    Triton to let go of those would fail for a region a call is using, Triton would keep the
    name and refuse the key under a new one, and the bytes would go the slow way for good."""
    import threading

    import tritonclient.utils.shared_memory as shm

    data = np.random.default_rng(13).standard_normal(ELEMENTS).astype(np.float32)
    tag = f"iglost{os.getpid()}{len(lost)}"
    keys = {f"{tag}_in": f"/{tag}_in", f"{tag}_out": f"/{tag}_out"}
    handles = [shm.create_shared_memory_region(name, key, data.nbytes) for name, key in keys.items()]
    client = grpcclient.InferenceServerClient(GRPC)

    def call():
        inp = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        inp.set_shared_memory(f"{tag}_in", data.nbytes)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(f"{tag}_out", data.nbytes)
        client.infer("identity_fp32", [inp], outputs=[out])

    stop, errors, calls = threading.Event(), [], [0]

    def load():
        while not stop.is_set():
            try:
                call()
                calls[0] += 1
            except InferenceServerException as e:
                errors.append(str(e))

    try:
        for name, key in keys.items():
            client.register_system_shared_memory(name, key, data.nbytes)
        shm.set_shared_memory_region(handles[0], [data])
        call()
        assert held_by_triton(f"{tag}_in"), triton_regions()
        pool_key = staging_key()
        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        # Three times, so that at least once a call is using the regions at that moment.
        for _ in range(3):
            assert wait_for(lambda: any(r["name"] == pool_key for r in triton_regions()), 60), \
                "the sidecar did not register its pool again"
            before = calls[0]
            assert wait_for(lambda: calls[0] >= before + 3, 30), "no calls in flight"
            # What another client of Triton's does; the sidecar's own names are not touched.
            url = (f"http://{TRITON}/v2/systemsharedmemory/region/{pool_key}/unregister"
                   if lost == "the pool" else f"http://{TRITON}/v2/systemsharedmemory/unregister")
            requests.post(url, timeout=10)
            assert wait_for(lambda: any(r["name"] == pool_key for r in triton_regions()), 60), \
                "the sidecar did not register its pool again"
            time.sleep(1.5)  # a probe after the registration
        stop.set()
        loader.join(30)
        assert not errors, errors[:3]
        passed_before, staged_before = passed(), staged()
        for _ in range(3):
            call()
        passed_after, staged_after = passed(), staged()
        assert passed_after[0] - passed_before[0] == 3 * data.nbytes, (passed_before, passed_after)
        assert passed_after[1] - passed_before[1] == 3 * data.nbytes, (passed_before, passed_after)
        assert staged_after == staged_before, (staged_before, staged_after)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handles[1], np.float32, [ELEMENTS]), data)
        for key in keys:
            held = [r["name"] for r in triton_regions() if r["key"].lstrip("/") == key]
            assert len(held) == 1, triton_regions()
    finally:
        stop.set()
        for name in keys:
            client.unregister_system_shared_memory(name)
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
