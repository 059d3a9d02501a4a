"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from the requests the
conformance suite makes, built with tritonclient's own request builders and checked against a
running sidecar, so that every seed reaches the code behind the parsers.

For every model the sidecar serves (its configuration read from GET /v2/models/<m>/config), the
HTTP and gRPC seeds are: tensors as JSON, as binary data, inputs and outputs in the system shared
memory region the fuzz harness registers (fuzz/src/harness.rs: "fuzz_region", 64 KiB),
classification of the first output, sequence parameters for sequence models, and a gzip body.
generate gets the same tensors as a generate body on both routes (models without sequences).
json_tensor and bytes_tensor get the tensors of those requests; operator_children gets the
project's example manifests.

Usage (from the repository root, with the test venv and a built sidecar):
    .venv/bin/python fuzz/seeds/make_corpus.py [--sidecar target/debug/infergate-sidecar]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import _utils as grpc_utils
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"
REGION = "fuzz_region"
REGION_BYTES = 64 * 1024
# DataType::ALL order (proto/src/datatype.rs): the json_tensor target's first byte.
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES"]
CONFIG_TO_PROTOCOL = {"TYPE_STRING": "BYTES"}
RNG = np.random.default_rng(7)


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def write(target: str, data: bytes) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def protocol_type(config_type: str) -> str:
    return CONFIG_TO_PROTOCOL.get(config_type, config_type.removeprefix("TYPE_"))


def sample(datatype: str, shape: list[int]) -> np.ndarray:
    if datatype == "BYTES":
        flat = [f"{i + 1}".encode() for i in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if datatype == "BF16":
        return RNG.random(shape).astype(np.float32)
    dtype = triton_to_np_dtype(datatype)
    if dtype == bool:
        return RNG.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(0, 100, shape).astype(dtype)
    return (RNG.random(shape) * 100).astype(dtype)


def raw_bytes(datatype: str, array: np.ndarray) -> bytes:
    if datatype == "BYTES":
        return serialize_byte_tensor(array).item()
    if datatype == "BF16":
        return (array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return array.tobytes()


class Tensor:
    def __init__(self, name: str, datatype: str, shape: list[int]):
        self.name, self.datatype, self.shape = name, datatype, shape
        self.array = sample(datatype, shape)
        self.raw = raw_bytes(datatype, self.array)


def model_tensors(config: dict) -> tuple[list[Tensor], list[str], list[str]]:
    batch = [1] if config.get("max_batch_size", 0) > 0 else []
    inputs = [Tensor(i["name"], protocol_type(i["data_type"]),
                     batch + [1 if d < 0 else d for d in i["dims"]])
              for i in config.get("input", [])]
    outputs = [o["name"] for o in config.get("output", [])]
    classifiable = [o["name"] for o in config.get("output", [])
                    if protocol_type(o["data_type"]) not in ("BYTES", "BOOL", "FP16", "BF16")]
    return inputs, outputs, classifiable


def as_json(value):
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value.decode() if isinstance(value, bytes) else value


def http_inputs(tensors: list[Tensor], binary: bool, region_offsets=None):
    inputs = []
    for i, t in enumerate(tensors):
        tensor = httpclient.InferInput(t.name, t.shape, t.datatype)
        if region_offsets is not None:
            tensor.set_shared_memory(REGION, len(t.raw), offset=region_offsets[i])
        elif t.datatype == "BF16" or (binary and t.datatype != "FP16") or t.datatype == "FP16":
            tensor._raw_data = t.raw
            tensor._parameters["binary_data_size"] = len(t.raw)
            tensor._data = None
        else:
            tensor.set_data_from_numpy(t.array, binary_data=False)
        inputs.append(tensor)
    return inputs


def grpc_inputs(tensors: list[Tensor], region_offsets=None):
    inputs = []
    for i, t in enumerate(tensors):
        tensor = grpcclient.InferInput(t.name, t.shape, t.datatype)
        if region_offsets is not None:
            tensor.set_shared_memory(REGION, len(t.raw), offset=region_offsets[i])
        else:
            tensor._raw_content = t.raw
        inputs.append(tensor)
    return inputs


def offsets(tensors: list[Tensor]) -> list[int]:
    out, at = [], 0
    for t in tensors:
        out.append(at)
        at += (len(t.raw) + 63) // 64 * 64
    return out


def http_seed(model: str, inputs, outputs, headers: dict, **kwargs) -> bytes:
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, **kwargs)
    head = [model]
    if json_size is not None:
        head.append(f"inference-header-content-length: {json_size}")
    head += [f"{k}: {v}" for k, v in headers.items()]
    return ("\n".join(head) + "\n\n").encode() + body


def post_generate(http_url: str, seed: bytes) -> int:
    head, body = seed.split(b"\n\n", 1)
    route = head.decode()
    request = urllib.request.Request(f"{http_url}/v2/models/{route}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = response.read()
            # /generate answers a decoupled model's several responses with an error under 200.
            if not route.endswith("_stream") and b'"error"' in answer:
                print(f"{route}: {answer!r}", file=sys.stderr)
                return -1
            return response.status
    except urllib.error.HTTPError as e:
        print(f"{route}: {e.code} {e.read().decode(errors='replace')}", file=sys.stderr)
        return e.code


def post(http_url: str, seed: bytes) -> int:
    head, body = seed.split(b"\n\n", 1)
    lines = head.decode().split("\n")
    request = urllib.request.Request(f"{http_url}/v2/models/{lines[0]}/infer", data=body,
                                     method="POST")
    for line in lines[1:]:
        name, value = line.split(":", 1)
        request.add_header(name.strip(), value.strip())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        print(f"{lines[0]}: {e.code} {e.read().decode(errors='replace')}", file=sys.stderr)
        return e.code


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sidecar", default=str(ROOT / "target/debug/infergate-sidecar"))
    args = parser.parse_args()
    http_port, grpc_port, metrics_port, admin_port = free_ports(4)
    sidecar = subprocess.Popen(
        [args.sidecar, "--http-port", str(http_port), "--grpc-port", str(grpc_port),
         "--metrics-port", str(metrics_port), "--admin-port", str(admin_port),
         "--allow-client-shm", "--log-level", "warn"])
    key = f"/infergate-seeds-{os.getpid()}"
    handle = None
    try:
        http_url = f"http://127.0.0.1:{http_port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{http_url}/v2/health/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        handle = shm.create_shared_memory_region(REGION, key, REGION_BYTES)
        client.register_system_shared_memory(REGION, key, REGION_BYTES)
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        grpc_stub = grpc_client._client_stub
        statuses: dict = {}
        models = [m["name"] for m in client.get_model_repository_index()]
        for model in models:
            config = client.get_model_config(model)
            tensors, outputs, classifiable = model_tensors(config)
            if not tensors:
                continue
            sequence = "sequence_batching" in config
            controls = json.dumps(config.get("sequence_batching", {}))
            corrid = "seq-1001" if "TYPE_STRING" in controls else 1001
            seq = {"sequence_id": corrid, "sequence_start": True, "sequence_end": True} if sequence else {}
            region = offsets(tensors)
            for t, at in zip(tensors, region):
                shm.set_shared_memory_region(handle, [np.frombuffer(t.raw, dtype=np.uint8)], offset=at)
            out_at = region[-1] + 4096 if region else 0
            json_ok = all(t.datatype not in ("FP16", "BF16") for t in tensors)
            cases = []
            if json_ok:
                cases.append(http_seed(model, http_inputs(tensors, False),
                                       [httpclient.InferRequestedOutput(o, binary_data=False) for o in outputs], {}, **seq))
            cases.append(http_seed(model, http_inputs(tensors, True),
                                   [httpclient.InferRequestedOutput(o, binary_data=True) for o in outputs], {}, **seq))
            shm_outputs = []
            for i, o in enumerate(outputs):
                requested = httpclient.InferRequestedOutput(o)
                requested.set_shared_memory(REGION, 4096, offset=out_at + i * 4096)
                shm_outputs.append(requested)
            cases.append(http_seed(model, http_inputs(tensors, True, region), shm_outputs, {}, **seq))
            if classifiable:
                cases.append(http_seed(model, http_inputs(tensors, True),
                                       [httpclient.InferRequestedOutput(classifiable[0], class_count=2)], {}, **seq))
            plain = http_seed(model, http_inputs(tensors, True), None, {}, request_id="seed", **seq)
            head, body = plain.split(b"\n\n", 1)
            cases.append(head + b"\ncontent-encoding: gzip\naccept-encoding: gzip\n\n" + gzip.compress(body))
            for case in cases:
                status = post(http_url, case)
                statuses[status] = statuses.get(status, 0) + 1
                write("http_infer", case)

            grpc_cases = [
                grpc_utils._get_inference_request(
                    model_name=model, inputs=grpc_inputs(tensors), model_version="",
                    request_id="seed", outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                    priority=0, timeout=None, parameters=None, **(seq or {"sequence_id": 0, "sequence_start": False, "sequence_end": False})),
            ]
            shm_out = []
            for i, o in enumerate(outputs):
                requested = grpcclient.InferRequestedOutput(o)
                requested.set_shared_memory(REGION, 4096, offset=out_at + i * 4096)
                shm_out.append(requested)
            grpc_cases.append(grpc_utils._get_inference_request(
                model_name=model, inputs=grpc_inputs(tensors, region), model_version="",
                request_id="", outputs=shm_out, priority=0, timeout=None, parameters=None,
                **(seq or {"sequence_id": 0, "sequence_start": False, "sequence_end": False})))
            if classifiable:
                grpc_cases.append(grpc_utils._get_inference_request(
                    model_name=model, inputs=grpc_inputs(tensors), model_version="1",
                    request_id="", outputs=[grpcclient.InferRequestedOutput(classifiable[0], class_count=3)],
                    priority=0, timeout=None, parameters={"custom": "x"},
                    **(seq or {"sequence_id": 0, "sequence_start": False, "sequence_end": False})))
            for case in grpc_cases:
                try:
                    grpc_stub.ModelInfer(request=case, timeout=10)
                    statuses["grpc OK"] = statuses.get("grpc OK", 0) + 1
                except Exception as e:  # grpc.RpcError
                    print(f"{model}: gRPC {e}", file=sys.stderr)
                    statuses["grpc error"] = statuses.get("grpc error", 0) + 1
                write("grpc_infer", case.SerializeToString())

            # generate: the tensors as flat JSON members, at the top level and inside
            # `parameters`, with a parameter beside them; both routes.
            if json_ok and not sequence:
                flat = {t.name: as_json(t.array.flatten().tolist()) for t in tensors}
                if model == "repeat_int32":  # no waiting
                    flat = {"IN": [4], "DELAY": [0], "WAIT": 0}
                bodies = [dict(flat, id="seed", temperature=0.5), {"parameters": dict(flat, n=1)}]
                for body in bodies:
                    for route in ("generate", "generate_stream"):
                        case = f"{model}/{route}\n\n".encode() + json.dumps(body).encode()
                        status = post_generate(http_url, case)
                        statuses[status] = statuses.get(status, 0) + 1
                        write("generate", case)

            for t in tensors:
                if t.datatype == "BYTES":
                    write("bytes_tensor", t.raw)
                if t.datatype in ("FP16", "BF16"):
                    continue
                values = as_json(t.array.tolist())
                count = int(np.prod(t.shape))
                header = bytes([DATATYPES.index(t.datatype)]) + count.to_bytes(2, "little")
                write("json_tensor", header + json.dumps(values).encode())
        for manifest in sorted((ROOT / "examples").glob("*.yaml")):
            write("operator_children", manifest.read_bytes())
        print(f"seeds written under {CORPUS}; HTTP answers from the sidecar: {statuses}")
        return 0 if set(statuses) == {200, "grpc OK"} else 1
    finally:
        if handle is not None:
            shm.destroy_shared_memory_region(handle)
        sidecar.terminate()
        sidecar.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
