"""Ragged batches as a model server receives them: a model whose input is ragged
(`allow_ragged_batch`) and whose configuration has a batch input, batched by the sidecar.

The model server is a recording V2 gRPC server (grpcio, with tritonclient's own service
definitions) serving `ragged_sum`: it takes `R`, the requests' elements one after another, and
`OFFSETS`, their accumulated element counts (`BATCH_ACCUMULATED_ELEMENT_COUNT`), and answers each
request's sum, as a model of Triton's ONNX Runtime or PyTorch backends would. It records what it
was sent, so the tests see the joined request itself: one call for requests of different
lengths, `R` flat, `OFFSETS` right; and each client gets its own sum.

Standalone: starts the sidecar binary (INFERGATE_SIDECAR_BIN, default target/debug/...) with a
configuration whose `backend.models[].config` gives the ragged input, the batch input and the
dynamic batcher (the model server's own configuration has none of them).
"""

import os
import signal
import socket
import subprocess
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("INFERGATE_SIDECAR_BIN", REPO / "target/debug/infergate-sidecar"))
MODEL = "ragged_sum"
# Long enough for requests started together to meet in one batch; a batch of 4 goes at once.
DELAY_US = 2_000_000


class RecordingRaggedServer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """A V2 model server whose one model sums each request's part of a ragged input."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []  # (R as numpy, OFFSETS as numpy) per ModelInfer

    def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=request.name == MODEL)

    def ServerMetadata(self, request, context):
        return service_pb2.ServerMetadataResponse(name="recording", version="1", extensions=[])

    def RepositoryIndex(self, request, context):
        return service_pb2.RepositoryIndexResponse(
            models=[service_pb2.RepositoryIndexResponse.ModelIndex(name=MODEL, version="1", state="READY")]
        )

    def ModelMetadata(self, request, context):
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=MODEL, versions=["1"], platform="recording",
            inputs=[tensor(name="R", datatype="FP32", shape=[-1])],
            outputs=[tensor(name="SUM", datatype="FP32", shape=[-1, 1])],
        )

    def ModelConfig(self, request, context):
        # What a model server without a batcher reports: the sidecar's configuration adds the
        # rest.
        config = model_config_pb2.ModelConfig(
            name=MODEL,
            max_batch_size=0,
            input=[model_config_pb2.ModelInput(name="R", data_type=model_config_pb2.TYPE_FP32, dims=[-1])],
            output=[model_config_pb2.ModelOutput(name="SUM", data_type=model_config_pb2.TYPE_FP32, dims=[-1, 1])],
        )
        return service_pb2.ModelConfigResponse(config=config)

    def ModelInfer(self, request, context):
        inputs = {}
        for index, tensor in enumerate(request.inputs):
            dtype = np.float32 if tensor.datatype == "FP32" else np.int32
            inputs[tensor.name] = (
                np.frombuffer(request.raw_input_contents[index], dtype=dtype).reshape(list(tensor.shape)))
        if set(inputs) != {"R", "OFFSETS"}:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"expected R and OFFSETS, got {sorted(inputs)}")
        ragged, offsets = inputs["R"], inputs["OFFSETS"]
        with self.lock:
            self.calls.append((ragged.copy(), offsets.copy()))
        if ragged.ndim != 1 or offsets.ndim != 1 or (offsets.size and offsets[-1] != ragged.size):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"R {list(ragged.shape)} does not match OFFSETS {offsets.tolist()}")
        starts = np.concatenate([[0], offsets[:-1]])
        sums = np.array([ragged[s:e].sum() for s, e in zip(starts, offsets)], dtype=np.float32)
        output = service_pb2.ModelInferResponse.InferOutputTensor(
            name="SUM", datatype="FP32", shape=[len(sums), 1])
        return service_pb2.ModelInferResponse(
            model_name=MODEL, model_version="1", id=request.id, outputs=[output],
            raw_output_contents=[sums.tobytes()])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SIDECAR_CONFIG = """\
server: {{host: 127.0.0.1, http_port: {http}, grpc_port: {grpc}, metrics_port: 0, admin_port: 0}}
backend:
  kind: upstream
  url: grpc://127.0.0.1:{upstream}
  probe_interval_seconds: 1
  staging_shm_bytes: 0
  models:
    - name: ragged_sum
      config:
        max_batch_size: 4
        input: [{{name: R, data_type: TYPE_FP32, dims: [-1], allow_ragged_batch: true}}]
        batch_input:
          - {{kind: BATCH_ACCUMULATED_ELEMENT_COUNT, target_name: [OFFSETS], data_type: TYPE_INT32,
              source_input: [R]}}
        dynamic_batching: {{preferred_batch_size: [4], max_queue_delay_microseconds: {delay}}}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not BINARY.exists():
        pytest.fail(f"sidecar binary {BINARY} not built (cargo build -p infergate-sidecar)")
    recorder = RecordingRaggedServer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(recorder, server)
    upstream = free_port()
    server.add_insecure_port(f"127.0.0.1:{upstream}")
    server.start()
    http, grpc_port = free_port(), free_port()
    work = tmp_path_factory.mktemp("ragged")
    config = work / "sidecar.yaml"
    config.write_text(SIDECAR_CONFIG.format(http=http, grpc=grpc_port, upstream=upstream, delay=DELAY_US))
    log = open(work / "sidecar.log", "w")
    proc = subprocess.Popen([str(BINARY), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    ready = False
    while time.time() < deadline and proc.poll() is None:
        try:
            if requests.get(f"http://127.0.0.1:{http}/v2/models/{MODEL}/ready", timeout=2).status_code == 200:
                ready = True
                break
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    if not ready:
        proc.kill()
        server.stop(0)
        pytest.fail("the sidecar did not get ready:\n" + (work / "sidecar.log").read_text()[-3000:])
    yield recorder, f"127.0.0.1:{http}", f"127.0.0.1:{grpc_port}"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    server.stop(0)


def infer_http(url, values):
    client = httpclient.InferenceServerClient(url)
    data = np.asarray(values, dtype=np.float32).reshape(1, -1)
    tensor = httpclient.InferInput("R", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    return client.infer(MODEL, [tensor]).as_numpy("SUM")


def infer_grpc(url, values):
    client = grpcclient.InferenceServerClient(url)
    data = np.asarray(values, dtype=np.float32).reshape(1, -1)
    tensor = grpcclient.InferInput("R", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer(MODEL, [tensor]).as_numpy("SUM")


def test_requests_of_different_lengths_join_one_call_and_each_gets_its_own_sum(setup):
    recorder, http, grpc_url = setup
    with recorder.lock:
        recorder.calls.clear()
    requests_ = [[1.0], [2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0, 10.0]]
    results = [None] * len(requests_)
    start = threading.Barrier(len(requests_))

    def call(i):
        start.wait()
        infer = infer_http if i % 2 == 0 else infer_grpc
        results[i] = infer(http if i % 2 == 0 else grpc_url, requests_[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(requests_))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for values, got in zip(requests_, results):
        assert got is not None
        assert got.shape == (1, 1)
        assert got[0, 0] == pytest.approx(sum(values))
    # One call to the model server, whatever order the requests were queued in: R is their
    # elements one after another, OFFSETS where each ends.
    assert len(recorder.calls) == 1, [(r.tolist(), o.tolist()) for r, o in recorder.calls]
    ragged, offsets = recorder.calls[0]
    assert ragged.shape == (10,)
    assert len(offsets) == 4 and offsets[-1] == 10, offsets
    starts = np.concatenate([[0], offsets[:-1]])
    parts = sorted(ragged[s:e].tolist() for s, e in zip(starts, offsets))
    assert parts == sorted(requests_)
    stats = requests.get(f"http://{http}/v2/models/{MODEL}/stats", timeout=10).json()["model_stats"][0]
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}.get(4) == 1


def test_a_request_alone_is_sent_flat_with_its_batch_input_too(setup):
    recorder, http, _ = setup
    with recorder.lock:
        recorder.calls.clear()
    # Alone, it waits out the delay, then goes as it is: the same layout as in a batch.
    got = infer_http(http, [[1.5, 2.5, 3.0]])
    assert got.tolist() == [[7.0]]
    assert len(recorder.calls) == 1
    ragged, offsets = recorder.calls[0]
    assert ragged.tolist() == [1.5, 2.5, 3.0]
    assert offsets.tolist() == [3]


def test_the_sidecar_says_it_batches_the_model(setup):
    _, http, _ = setup
    config = requests.get(f"http://{http}/v2/models/{MODEL}/config", timeout=10).json()
    assert config["input"][0]["allow_ragged_batch"] is True
    assert config["batch_input"][0]["kind"] == "BATCH_ACCUMULATED_ELEMENT_COUNT"
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
