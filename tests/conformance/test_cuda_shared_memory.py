"""CUDA shared memory with a GPU (TRITON.md §6), through tritonclient.utils.cuda_shared_memory.

These tests need a CUDA device and `cuda-python` (which the client utilities use);
they are skipped where either is missing. Without a GPU, test_shared_memory.py checks
the "GPUs not supported" answers and that `/v2` does not list `cuda_shared_memory`.

The layout follows Triton's simple_{http,grpc}_cudashm_client.py examples: one 64-byte
region per tensor of `simple`, registered by IPC handle, outputs read back from the
device. The sidecar copies inputs from the device and outputs to it.
"""

from __future__ import annotations

import base64
import itertools
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import SIMPLE_A, SIMPLE_B, cuda_unusable_reason, grpc_error


REASON = cuda_unusable_reason()
pytestmark = [
    pytest.mark.skipif(bool(REASON), reason=REASON or "GPU present"),
    pytest.mark.gpu,
]

SUM = SIMPLE_A + SIMPLE_B
DIFF = SIMPLE_A - SIMPLE_B
_COUNTER = itertools.count()


@pytest.fixture
def cudashm():
    """The client module, and every region it created destroyed afterwards."""
    import tritonclient.utils.cuda_shared_memory as cudashm

    created = []

    class Regions:
        module = cudashm

        def create(self, label: str, byte_size: int = 64, device_id: int = 0):
            name = f"igcuda{os.getpid()}_{label}_{next(_COUNTER)}"
            handle = cudashm.create_shared_memory_region(name, byte_size, device_id)
            created.append(handle)
            return name, handle

    yield Regions()
    for handle in created:
        cudashm.destroy_shared_memory_region(handle)


@pytest.fixture(params=["http", "grpc"])
def client(request, http_client, grpc_client):
    c = http_client if request.param == "http" else grpc_client
    c.unregister_cuda_shared_memory()
    yield request.param, c
    c.unregister_cuda_shared_memory()


def _module(proto):
    return httpclient if proto == "http" else grpcclient


def test_extension_is_listed(raw_http):
    assert "cuda_shared_memory" in raw_http("GET", "/v2").json()["extensions"]


def test_simple_cudashm_client(client, cudashm):
    """simple_{http,grpc}_cudashm_client.py: four 64-byte device regions."""
    proto, c = client
    mod = _module(proto)
    in0, h_in0 = cudashm.create("input0_data")
    in1, h_in1 = cudashm.create("input1_data")
    out0, h_out0 = cudashm.create("output0_data")
    out1, h_out1 = cudashm.create("output1_data")
    cudashm.module.set_shared_memory_region(h_in0, [SIMPLE_A])
    cudashm.module.set_shared_memory_region(h_in1, [SIMPLE_B])
    for name, handle in ((in0, h_in0), (in1, h_in1), (out0, h_out0), (out1, h_out1)):
        c.register_cuda_shared_memory(name, cudashm.module.get_raw_handle(handle), 0, 64)

    inputs = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(in0, 64)
    inputs[1].set_shared_memory(in1, 64)
    outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(out0, 64)
    outputs[1].set_shared_memory(out1, 64)
    result = c.infer("simple", inputs, outputs=outputs)

    # The bytes are on the device, not in the reply: as Triton answers for system shm, HTTP
    # lists name, datatype and shape only, gRPC an empty raw_output_contents entry per output.
    if proto == "http":
        for out in ("OUTPUT0", "OUTPUT1"):
            assert result.get_output(out) == {"name": out, "datatype": "INT32", "shape": [1, 16]}
    else:
        assert list(result.get_response().raw_output_contents) == [b"", b""]
    got0 = cudashm.module.get_contents_as_numpy(h_out0, np.int32, [1, 16])
    got1 = cudashm.module.get_contents_as_numpy(h_out1, np.int32, [1, 16])
    np.testing.assert_array_equal(got0, SUM)
    np.testing.assert_array_equal(got1, DIFF)

    status = c.get_cuda_shared_memory_status()
    if proto == "http":
        listed = {r["name"]: (r["device_id"], r["byte_size"]) for r in status}
    else:
        listed = {n: (r.device_id, r.byte_size) for n, r in status.regions.items()}
    assert listed == {n: (0, 64) for n in (in0, in1, out0, out1)}
    c.unregister_cuda_shared_memory(in0)
    c.unregister_cuda_shared_memory()
    empty = c.get_cuda_shared_memory_status()
    assert (empty if proto == "http" else dict(empty.regions)) in ([], {})


def test_offsets_and_mixed_inputs(client, cudashm):
    """One 128-byte device region holds both inputs; outputs go to a larger region at an
    offset and to the reply, mixed in one request."""
    proto, c = client
    mod = _module(proto)
    ins, h_ins = cudashm.create("inputs", 128)
    outs, h_outs = cudashm.create("outputs", 256)
    cudashm.module.set_shared_memory_region(h_ins, [SIMPLE_A, SIMPLE_B])
    c.register_cuda_shared_memory(ins, cudashm.module.get_raw_handle(h_ins), 0, 128)
    c.register_cuda_shared_memory(outs, cudashm.module.get_raw_handle(h_outs), 0, 256)
    inputs = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(ins, 64)
    inputs[1].set_data_from_numpy(SIMPLE_B)
    outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(outs, 100, offset=128)  # more room than needed
    result = c.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DIFF)
    whole = cudashm.module.get_contents_as_numpy(h_outs, np.int32, [64])
    np.testing.assert_array_equal(whole[32:48], SUM[0])


def _error(exc: InferenceServerException, proto: str):
    if proto == "http":
        return exc.message()
    return grpc_error(exc)[1]


def test_registration_errors(client, cudashm):
    proto, c = client
    name, handle = cudashm.create("small", 64)
    raw = cudashm.module.get_raw_handle(handle)
    with pytest.raises(InferenceServerException) as exc:
        c.register_cuda_shared_memory(name, raw, 0, 1 << 20)  # larger than the allocation
    assert _error(exc.value, proto) == f"failed to register shared memory region '{name}': invalid args"
    c.register_cuda_shared_memory(name, raw, 0, 64)
    with pytest.raises(InferenceServerException) as exc:
        c.register_cuda_shared_memory(name, raw, 0, 64)
    assert _error(exc.value, proto) == f"shared memory region '{name}' already in manager"


def test_a_device_that_does_not_exist_is_refused(client, cudashm, oracle):
    """Triton calls cudaSetDevice(device_id) without looking at its result and opens the handle on
    whatever device is current, so it registers a valid handle under any device id (seen against
    Triton 2.51 on a GPU; the same code on its main branch). The sidecar refuses an id with no
    device: its copies run on the device the id names. A documented difference
    (docs/compatibility.md, "Which error, and in which words")."""
    if oracle:
        pytest.skip("Triton registers a valid handle under a device id that does not exist")
    proto, c = client
    name, handle = cudashm.create("nodevice", 64)
    with pytest.raises(InferenceServerException) as exc:
        c.register_cuda_shared_memory(name, cudashm.module.get_raw_handle(handle), 4096, 64)
    assert _error(exc.value, proto) == "failed to register shared memory region: invalid args"
    status = c.get_cuda_shared_memory_status()
    assert name not in ([r["name"] for r in status] if proto == "http" else list(status.regions))


def test_short_handle_is_rejected(raw_http, grpc_stub):
    short = base64.b64encode(b"x" * 10).decode()
    body = f'{{"raw_handle":{{"b64":"{short}"}},"device_id":0,"byte_size":64}}'
    resp = raw_http("POST", "/v2/cudasharedmemory/region/short/register", body)
    assert (resp.status, resp.error) == (400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    # Triton's gRPC handler does not check the length: it opens 64 bytes read from whatever it was
    # sent, and the failed open answers (Triton 2.51 on a GPU).
    with pytest.raises(Exception) as exc:
        grpc_stub.CudaSharedMemoryRegister(
            service_pb2.CudaSharedMemoryRegisterRequest(name="short", raw_handle=b"x" * 10, device_id=0, byte_size=64))
    assert grpc_error(exc.value) == ("INVALID_ARGUMENT", "failed to register shared memory region: invalid args")


def test_tensor_window_is_checked(client, cudashm):
    proto, c = client
    mod = _module(proto)
    name, handle = cudashm.create("window", 64)
    c.register_cuda_shared_memory(name, cudashm.module.get_raw_handle(handle), 0, 64)
    inputs = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(name, 64, offset=32)
    inputs[1].set_data_from_numpy(SIMPLE_B)
    with pytest.raises(InferenceServerException) as exc:
        c.infer("simple", inputs)
    assert _error(exc.value, proto) == f"Invalid offset + byte size for shared memory region: '{name}'"


def test_a_handle_wrapped_as_tritons_cpp_client_wraps_it(raw_http, http_client, cudashm):
    """perf_analyzer and Triton's C++ client encode the handle with libb64 (a line break after
    72 characters and one at the end); Triton reads past them, and so must the sidecar."""
    name, handle = cudashm.create("wrapped")
    cudashm.module.set_shared_memory_region(handle, [SIMPLE_A])
    plain = cudashm.module.get_raw_handle(handle).decode()
    body = f'{{"raw_handle":{{"b64":"{plain[:72]}\\n{plain[72:]}\\n"}},"device_id":0,"byte_size":64}}'
    resp = raw_http("POST", f"/v2/cudasharedmemory/region/{name}/register", body)
    try:
        assert resp.status == 200, resp.error
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(name, 64)
        inputs[1].set_data_from_numpy(SIMPLE_B)
        np.testing.assert_array_equal(http_client.infer("simple", inputs).as_numpy("OUTPUT0"), SUM)
    finally:
        http_client.unregister_cuda_shared_memory(name)


@pytest.mark.perf_analyzer
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_cuda_shared_memory(http_url, grpc_url, raw_http, protocol):
    """perf_analyzer registers its device buffers over HTTP with libb64-wrapped handles."""
    from test_perf_analyzer import run_pa_over_shared_memory

    run_pa_over_shared_memory(raw_http, http_url if protocol == "http" else grpc_url, protocol, "cuda")
