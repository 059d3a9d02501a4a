"""Clients' CUDA buffers handed to the model server, where this container has no GPU (and, at
the end, where it has one).

No GPU is needed: the model server here is a recording V2 gRPC server (grpcio, with tritonclient's
own service definitions) that lists `cuda_shared_memory`, accepts any 64-byte IPC handle except
those starting with 0xFF, and checks that every region an inference names is one it holds, as
Triton does. It proves what the sidecar sends: the client's handle, device and size unchanged at
registration; the region, offset and size of every tensor at inference, with no tensor bytes;
unregistration; re-registration after the model server forgot its regions (a restart). That a
real Triton opens such a handle is beyond a machine without a GPU; what it answers when it cannot
is checked against the real Triton by test_staging.py (run-triton.sh).

Standalone: starts the sidecar binary (INFERGATE_SIDECAR_BIN, default target/debug/...) with
`--upstream grpc://<the recording server>`.
"""

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "conformance"))
from support import cuda_unusable_reason  # noqa: E402  (tests/conformance/support.py)

BINARY = Path(os.environ.get("INFERGATE_SIDECAR_BIN", REPO / "target/debug/infergate-sidecar"))
MODEL = "identity_fp32"
PREFIX = "infergate_client_"


class RecordingModelServer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Just enough of a V2 model server with CUDA shared memory to be fronted by the sidecar."""

    def __init__(self):
        self.lock = threading.Lock()
        self.registered = {}  # upstream name -> CudaSharedMemoryRegisterRequest
        self.registrations = []
        self.unregistrations = []
        self.requests = []
        self.refuse_all = False  # refuse every handle, as a model server without the GPU would

    def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=request.name == MODEL)

    def ServerMetadata(self, request, context):
        return service_pb2.ServerMetadataResponse(
            name="recording", version="1", extensions=["cuda_shared_memory", "binary_tensor_data"]
        )

    def RepositoryIndex(self, request, context):
        return service_pb2.RepositoryIndexResponse(
            models=[service_pb2.RepositoryIndexResponse.ModelIndex(name=MODEL, version="1", state="READY")]
        )

    def ModelMetadata(self, request, context):
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=MODEL,
            versions=["1"],
            platform="recording",
            inputs=[tensor(name="INPUT0", datatype="FP32", shape=[-1])],
            outputs=[tensor(name="OUTPUT0", datatype="FP32", shape=[-1])],
        )

    def ModelConfig(self, request, context):
        config = model_config_pb2.ModelConfig(
            name=MODEL,
            max_batch_size=0,
            input=[model_config_pb2.ModelInput(name="INPUT0", data_type=model_config_pb2.TYPE_FP32, dims=[-1])],
            output=[model_config_pb2.ModelOutput(name="OUTPUT0", data_type=model_config_pb2.TYPE_FP32, dims=[-1])],
        )
        return service_pb2.ModelConfigResponse(config=config)

    def CudaSharedMemoryRegister(self, request, context):
        with self.lock:
            self.registrations.append(request)
            if self.refuse_all or request.raw_handle[:1] == b"\xff":
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"failed to register shared memory region '{request.name}': invalid args",
                )
            self.registered[request.name] = request
        return service_pb2.CudaSharedMemoryRegisterResponse()

    def CudaSharedMemoryUnregister(self, request, context):
        with self.lock:
            self.unregistrations.append(request.name)
            self.registered.pop(request.name, None)
        return service_pb2.CudaSharedMemoryUnregisterResponse()

    def ModelInfer(self, request, context):
        with self.lock:
            self.requests.append(request)
            for tensor in list(request.inputs) + list(request.outputs):
                region = tensor.parameters.get("shared_memory_region")
                if region is not None and region.string_param not in self.registered:
                    context.abort(
                        grpc.StatusCode.NOT_FOUND,
                        f"Unable to find shared memory region: '{region.string_param}'",
                    )
        shape = list(request.inputs[0].shape)
        output = service_pb2.ModelInferResponse.InferOutputTensor(name="OUTPUT0", datatype="FP32", shape=shape)
        # An identity model for bytes sent on the wire (a sidecar copying out of a region).
        return service_pb2.ModelInferResponse(
            model_name=MODEL, model_version="1", outputs=[output],
            raw_output_contents=list(request.raw_input_contents))

    def forget(self):
        """A restart: the model server holds no region any more."""
        with self.lock:
            self.registered.clear()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_server():
    recorder = RecordingModelServer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    recorder.url = f"grpc://127.0.0.1:{port}"
    yield recorder
    server.stop(grace=None)


@contextlib.contextmanager
def running_sidecar(model_server, log_dir, env):
    """The sidecar in front of `model_server`: its ports, and its process as "proc"."""
    if not BINARY.exists():
        pytest.fail(f"sidecar binary not found at {BINARY}: build it (cargo build -p infergate-sidecar)")
    ports = {name: free_port() for name in ("http", "grpc", "metrics", "admin")}
    log = open(log_dir / "sidecar.log", "wb")
    proc = subprocess.Popen(
        [
            str(BINARY),
            "--host=127.0.0.1",
            f"--upstream={model_server.url}",
            "--allow-client-shm",
            *(f"--{name}-port={port}" for name, port in ports.items()),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{ports['http']}"
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, Path(log.name).read_text()
            try:
                if requests.get(f"{base}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.time() < deadline, Path(log.name).read_text()
            time.sleep(0.2)
        ports["proc"] = proc
        yield ports
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, Path(log.name).read_text()[-4000:]
    finally:
        if proc.poll() is None:  # it never became ready, or did not stop: it holds ports (and a GPU)
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def sidecar(model_server, tmp_path_factory):
    # The case under test is a sidecar container without a GPU: on a machine with one, hide it,
    # or the sidecar would open the (made-up) handles itself instead of handing them on.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    with running_sidecar(model_server, tmp_path_factory.mktemp("cuda-forwarding"), env) as ports:
        yield ports


@pytest.fixture
def http_client(sidecar):
    return httpclient.InferenceServerClient(f"127.0.0.1:{sidecar['http']}")


@pytest.fixture
def grpc_client(sidecar):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{sidecar['grpc']}")
    yield client
    client.close()


def handle(seed):
    return bytes((seed + i) % 256 for i in range(64))


def b64(raw):
    return base64.b64encode(raw)


def upstream_name_of(model_server, raw):
    names = [r.name for r in model_server.registrations if r.raw_handle == raw]
    assert len(names) >= 1, model_server.registrations
    return names[-1]


def shm_params(tensor):
    p = tensor.parameters
    return (
        p["shared_memory_region"].string_param,
        p["shared_memory_offset"].int64_param,
        p["shared_memory_byte_size"].int64_param,
    )


def test_the_sidecar_offers_cuda_shared_memory_through_the_model_server(sidecar):
    v2 = requests.get(f"http://127.0.0.1:{sidecar['http']}/v2", timeout=10).json()
    assert "cuda_shared_memory" in v2["extensions"], v2
    status = requests.get(f"http://127.0.0.1:{sidecar['admin']}/status", timeout=10).json()
    cuda = next(e for e in status["extensions"] if e["name"] == "cuda_shared_memory")
    assert (cuda["state"], cuda["implementation"]) == ("Active", "upstream"), cuda


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_registered_handle_reaches_the_model_server_unchanged_and_tensors_name_it(
    model_server, http_client, grpc_client, protocol
):
    client = http_client if protocol == "http" else grpc_client
    module = httpclient if protocol == "http" else grpcclient
    name = f"gpu_{protocol}"
    raw = handle(1 if protocol == "http" else 2)
    client.register_cuda_shared_memory(name, b64(raw), 0, 4096)

    registration = model_server.registrations[-1]
    assert registration.raw_handle == raw
    assert (registration.device_id, registration.byte_size) == (0, 4096)
    assert registration.name.startswith(PREFIX), registration.name
    status = client.get_cuda_shared_memory_status(name)
    if protocol == "http":
        assert status == [{"name": name, "device_id": 0, "byte_size": 4096}], status
    else:
        assert status.regions[name].byte_size == 4096, status

    # Input at 256, output at 1024: the model server gets the window, not the bytes.
    tensor = module.InferInput("INPUT0", [16], "FP32")
    tensor.set_shared_memory(name, 64, offset=256)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(name, 64, offset=1024)
    before = len(model_server.requests)
    result = client.infer(MODEL, [tensor], outputs=[output])
    assert result.get_output("OUTPUT0") is not None
    sent = model_server.requests[before]
    assert shm_params(sent.inputs[0]) == (registration.name, 256, 64)
    assert shm_params(sent.outputs[0]) == (registration.name, 1024, 64)
    assert list(sent.raw_input_contents) == []
    # Registered once: a second request reuses the model server's registration.
    client.infer(MODEL, [tensor], outputs=[output])
    assert [r.raw_handle for r in model_server.registrations].count(raw) == 1

    client.unregister_cuda_shared_memory(name)
    assert registration.name in model_server.unregistrations
    assert registration.name not in model_server.registered


def test_a_handle_the_model_server_refuses_is_refused_with_its_reason(model_server, http_client, grpc_client):
    raw = b"\xff" + bytes(63)
    with pytest.raises(InferenceServerException) as http_error:
        http_client.register_cuda_shared_memory("refused_http", b64(raw), 0, 64)
    assert http_error.value.status() == "400"
    assert http_error.value.message() == "failed to register shared memory region 'refused_http': invalid args"
    with pytest.raises(InferenceServerException) as grpc_error:
        grpc_client.register_cuda_shared_memory("refused_grpc", b64(raw), 0, 64)
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert grpc_error.value.message() == "failed to register shared memory region 'refused_grpc': invalid args"
    assert http_client.get_cuda_shared_memory_status() == []
    # A handle of the wrong length never reaches the model server.
    count = len(model_server.registrations)
    with pytest.raises(InferenceServerException) as short:
        http_client.register_cuda_shared_memory("short", b64(bytes(10)), 0, 64)
    assert short.value.message() == "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
    with pytest.raises(InferenceServerException) as short:
        grpc_client.register_cuda_shared_memory("short", b64(bytes(10)), 0, 64)
    assert short.value.message() == "failed to register shared memory region: invalid args"
    assert len(model_server.registrations) == count


def test_after_the_model_server_forgot_its_regions_they_are_registered_again(model_server, grpc_client):
    raw = handle(3)
    grpc_client.register_cuda_shared_memory("again", b64(raw), 0, 128)
    first = upstream_name_of(model_server, raw)
    model_server.forget()
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_shared_memory("again", 16)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("again", 16, offset=64)
    grpc_client.infer(MODEL, [tensor], outputs=[output])
    second = upstream_name_of(model_server, raw)
    assert second != first and second in model_server.registered
    assert shm_params(model_server.requests[-1].inputs[0]) == (second, 0, 16)
    grpc_client.unregister_cuda_shared_memory()
    assert second in model_server.unregistrations


def test_bad_windows_are_refused_by_the_sidecar_before_the_model_server(model_server, http_client):
    http_client.register_cuda_shared_memory("window", b64(handle(4)), 0, 64)
    try:
        count = len(model_server.requests)
        tensor = httpclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("window", 64, offset=32)
        with pytest.raises(InferenceServerException) as error:
            http_client.infer(MODEL, [tensor])
        assert error.value.message() == "Invalid offset + byte size for shared memory region: 'window'"
        assert len(model_server.requests) == count
    finally:
        http_client.unregister_cuda_shared_memory("window")


def test_a_handle_encoded_as_tritons_cpp_client_encodes_it_is_read_as_triton_reads_it(model_server, sidecar):
    """Triton's C++ client (perf_analyzer's) encodes the handle with libb64: a line break after 72
    characters and one at the end. Triton skips every character outside the alphabet, so must we."""
    raw = handle(5)
    plain = b64(raw).decode()
    wrapped = f"{plain[:72]}\n{plain[72:]}\n"
    body = {"raw_handle": {"b64": wrapped}, "device_id": 0, "byte_size": 64}
    base = f"http://127.0.0.1:{sidecar['http']}/v2/cudasharedmemory"
    resp = requests.post(f"{base}/region/wrapped/register", json=body, timeout=10)
    try:
        assert resp.status_code == 200, resp.text
        assert model_server.registrations[-1].raw_handle == raw
        # Junk that leaves fewer than 64 bytes is still a handle of the wrong length.
        body["raw_handle"]["b64"] = plain[:40] + "-_-_" + "\n"
        resp = requests.post(f"{base}/region/cut/register", json=body, timeout=10)
        assert (resp.status_code, resp.json()) == (
            400, {"error": "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"})
    finally:
        requests.post(f"{base}/region/wrapped/unregister", timeout=10)


# --------------------------------------------------------------------------- a GPU of its own
GPU_REASON = cuda_unusable_reason()
needs_gpu = pytest.mark.skipif(bool(GPU_REASON), reason=GPU_REASON or "GPU present")


@pytest.fixture(scope="module")
def gpu_sidecar(model_server, tmp_path_factory):
    """A sidecar that sees the GPU, in front of the same model server."""
    with running_sidecar(model_server, tmp_path_factory.mktemp("cuda-own-gpu"), dict(os.environ)) as ports:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
        yield client
        client.close()


@pytest.fixture
def device_region():
    """A 4 KiB buffer on device 0, exported as tritonclient exports it; freed afterwards."""
    import tritonclient.utils.cuda_shared_memory as cudashm

    regions = []

    def create(name):
        regions.append(cudashm.create_shared_memory_region(name, 4096, 0))
        return cudashm, regions[-1]

    yield create
    for region in regions:
        cudashm.destroy_shared_memory_region(region)


@needs_gpu
def test_with_a_gpu_of_its_own_the_sidecar_still_hands_the_handle_to_the_model_server(
    model_server, gpu_sidecar, device_region
):
    cudashm, region = device_region("own_gpu_passed")
    raw = base64.b64decode(cudashm.get_raw_handle(region))
    gpu_sidecar.register_cuda_shared_memory("passed", cudashm.get_raw_handle(region), 0, 4096)
    try:
        tensor = grpcclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("passed", 64, offset=256)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("passed", 64, offset=1024)
        before = len(model_server.requests)
        gpu_sidecar.infer(MODEL, [tensor], outputs=[output])
        sent = model_server.requests[before]
        upstream = upstream_name_of(model_server, raw)
        assert shm_params(sent.inputs[0]) == (upstream, 256, 64)
        assert shm_params(sent.outputs[0]) == (upstream, 1024, 64)
        assert list(sent.raw_input_contents) == []
    finally:
        gpu_sidecar.unregister_cuda_shared_memory("passed")
    assert upstream in model_server.unregistrations


@needs_gpu
def test_with_a_gpu_of_its_own_the_sidecar_copies_for_a_model_server_that_refuses_the_handle(
    model_server, gpu_sidecar, device_region
):
    import numpy as np

    cudashm, region = device_region("own_gpu_copied")
    values = np.arange(16, dtype=np.float32) * 1.5
    cudashm.set_shared_memory_region(region, [values])
    model_server.refuse_all = True
    try:
        gpu_sidecar.register_cuda_shared_memory("copied", cudashm.get_raw_handle(region), 0, 4096)
        tensor = grpcclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("copied", 64)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("copied", 64, offset=1024)
        before = len(model_server.requests)
        gpu_sidecar.infer(MODEL, [tensor], outputs=[output])
        sent = model_server.requests[before:]
        assert len(sent) == 1, sent
        assert list(sent[0].raw_input_contents) == [values.tobytes()]
        assert "shared_memory_region" not in sent[0].inputs[0].parameters
        whole = cudashm.get_contents_as_numpy(region, np.float32, [1024])
        np.testing.assert_array_equal(whole[256:272], values)
    finally:
        model_server.refuse_all = False
        gpu_sidecar.unregister_cuda_shared_memory("copied")
