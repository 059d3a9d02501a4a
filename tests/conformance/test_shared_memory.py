"""System shared memory (TRITON.md §5) and CUDA shared memory without a GPU (§6).

The server must allow client shared memory (`--allow-client-shm`, §0.7; the
fixtures pass it to the sidecar, Triton 2.51 has no such switch). Every test
creates its own shm objects (tritonclient.utils.shared_memory) under unique
keys and unique region names; the `pool` fixture unregisters those names and
destroys the objects afterwards.

Sidecar choices where Triton 2.51 differs (TRITON.md §12), marked
``triton251_differs``: a registration offset (a multiple of the page size, as
Triton's mmap needs) is applied once; keys made of slashes only and keys with the
python-backend prefix are rejected with 400; one key may back several
regions; an offset + byte_size overflow in a tensor is reported; CUDA
registration without a GPU answers "GPUs not supported" and `/v2` does not
list `cuda_shared_memory`.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from support import (SIMPLE_A, SIMPLE_B, assert_serving, binary_body, grpc_error, local_models,
                     raw_request)


A_BYTES = SIMPLE_A.tobytes()  # 64 bytes: INPUT0 of `simple`
B_BYTES = SIMPLE_B.tobytes()  # 64 bytes: INPUT1 of `simple`
SUM = SIMPLE_A + SIMPLE_B
DIFF = SIMPLE_A - SIMPLE_B
RESERVED_PREFIX = "triton_python_backend_shm_region_"
SENTINEL = 0xAB
_COUNTER = itertools.count()


# --------------------------------------------------------------------------- shm objects
class ShmPool:
    """Unique region names / shm objects for one test; cleans both up."""

    def __init__(self, http_url: str, tag: str):
        self.http_url = http_url
        self.prefix = f"igshm{os.getpid()}_{tag[:24]}"
        self.names: list = []
        self.handles: list = []

    def name(self, label: str = "r") -> str:
        """A region name, unregistered (system) at teardown."""
        n = f"{self.prefix}_{label}_{next(_COUNTER)}"
        self.names.append(n)
        return n

    def create(self, byte_size: int, label: str = "k", key: str | None = None, fill: int | None = None):
        """(handle, key): a new shm object of exactly byte_size bytes."""
        key = key or f"/{self.prefix}_{label}_{next(_COUNTER)}"
        handle = shm.create_shared_memory_region(key.lstrip("/"), key, byte_size, create_only=True)
        self.handles.append(handle)
        if fill is not None:
            write(handle, bytes([fill]) * byte_size)
        return handle, key

    def close(self) -> None:
        for n in self.names:
            try:
                raw_request(self.http_url, "POST", f"/v2/systemsharedmemory/region/{n}/unregister", timeout=10)
            except OSError:
                pass
        for h in self.handles:
            try:
                shm.destroy_shared_memory_region(h)
            except BufferError:  # a numpy view still alive: unlink anyway
                h._mpsm_handle.unlink()


@pytest.fixture
def pool(request, http_url):
    p = ShmPool(http_url, request.node.name.replace("[", "_").replace("]", "").replace("-", "_"))
    yield p
    p.close()


def write(handle, data: bytes, offset: int = 0) -> None:
    shm.set_shared_memory_region(handle, [np.frombuffer(data, dtype=np.uint8)], offset=offset)


def read(handle, nbytes: int, offset: int = 0) -> bytes:
    return shm.get_contents_as_numpy(handle, np.uint8, [nbytes], offset=offset).tobytes()


def read_i32(handle, offset: int = 0, shape=(1, 16)) -> np.ndarray:
    return np.frombuffer(read(handle, 4 * int(np.prod(shape)), offset), dtype=np.int32).reshape(shape)


def shm_params(region: str, byte_size: int, offset: int | None = None) -> dict:
    p = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset is not None:
        p["shared_memory_offset"] = offset
    return p


def set_grpc_params(pmap, params: dict) -> None:
    for k, v in params.items():
        if isinstance(v, bool):
            pmap[k].bool_param = v
        elif isinstance(v, str):
            pmap[k].string_param = v
        else:
            pmap[k].int64_param = v


def gpu_visible() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


# --------------------------------------------------------------------------- one API, two protocols
class Api:
    """The same shm operations over HTTP (raw requests) or gRPC (raw stub).

    Failures come back as (HTTP status, message) or (gRPC code name, message).
    """

    def __init__(self, proto: str, raw_http, grpc_stub):
        self.proto = proto
        self.raw_http = raw_http
        self.stub = grpc_stub

    def err(self, http_status: int, grpc_code: str, message: str) -> tuple:
        return (http_status, message) if self.proto == "http" else (grpc_code, message)

    def _grpc(self, method, req):
        try:
            return None, getattr(self.stub, method)(req, timeout=30)
        except grpc.RpcError as exc:
            return grpc_error(exc), None

    def _http(self, method, path, body=b""):
        resp = self.raw_http(method, path, body)
        if resp.status != 200:
            return (resp.status, resp.error), resp
        return None, resp

    # registration ---------------------------------------------------------
    def register(self, name: str, key: str, byte_size: int, offset: int = 0):
        """None on success, else the error tuple."""
        if self.proto == "http":
            body = json.dumps({"key": key, "offset": offset, "byte_size": byte_size})
            err, resp = self._http("POST", f"/v2/systemsharedmemory/region/{name}/register", body)
            if err is None:
                assert resp.body == b"", resp
            return err
        req = service_pb2.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=offset, byte_size=byte_size)
        return self._grpc("SystemSharedMemoryRegister", req)[0]

    def unregister(self, name: str = ""):
        if self.proto == "http":
            path = f"/v2/systemsharedmemory/region/{name}/unregister" if name else "/v2/systemsharedmemory/unregister"
            return self._http("POST", path)[0]
        return self._grpc("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name=name))[0]

    def status(self, name: str = ""):
        """List of {name,key,offset,byte_size} (sorted by name), or the error tuple."""
        if self.proto == "http":
            path = f"/v2/systemsharedmemory/region/{name}/status" if name else "/v2/systemsharedmemory/status"
            err, resp = self._http("GET", path)
            if err:
                return err
            doc = resp.json()
            assert isinstance(doc, list), resp
            return sorted(doc, key=lambda d: d["name"])
        err, resp = self._grpc("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest(name=name))
        if err:
            return err
        out = []
        for k, v in resp.regions.items():
            assert k == v.name
            out.append({"name": v.name, "key": v.key, "offset": v.offset, "byte_size": v.byte_size})
        return sorted(out, key=lambda d: d["name"])

    def cuda_register(self, name: str, byte_size: int = 64, device_id: int = 0):
        handle = bytes(64)  # a cudaIpcMemHandle_t-sized blob
        if self.proto == "http":
            body = json.dumps({"raw_handle": {"b64": base64.b64encode(handle).decode()},
                               "device_id": device_id, "byte_size": byte_size})
            return self._http("POST", f"/v2/cudasharedmemory/region/{name}/register", body)[0]
        req = service_pb2.CudaSharedMemoryRegisterRequest(
            name=name, raw_handle=handle, device_id=device_id, byte_size=byte_size)
        return self._grpc("CudaSharedMemoryRegister", req)[0]

    def cuda_unregister(self, name: str = ""):
        if self.proto == "http":
            path = f"/v2/cudasharedmemory/region/{name}/unregister" if name else "/v2/cudasharedmemory/unregister"
            return self._http("POST", path)[0]
        return self._grpc("CudaSharedMemoryUnregister", service_pb2.CudaSharedMemoryUnregisterRequest(name=name))[0]

    def cuda_status(self, name: str = ""):
        if self.proto == "http":
            path = f"/v2/cudasharedmemory/region/{name}/status" if name else "/v2/cudasharedmemory/status"
            err, resp = self._http("GET", path)
            return err or resp.json()
        err, resp = self._grpc("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest(name=name))
        return err or dict(resp.regions)

    # inference on `simple` --------------------------------------------------
    def _infer(self, in0, in1, outputs, model="simple"):
        """in0/in1: shm params dict, or an int32 array sent inline (JSON data / raw)."""
        if self.proto == "http":
            inputs = []
            for name, spec in (("INPUT0", in0), ("INPUT1", in1)):
                entry = {"name": name, "datatype": "INT32", "shape": [1, 16]}
                if isinstance(spec, dict):
                    entry["parameters"] = spec
                else:
                    entry["data"] = np.asarray(spec).reshape(-1).tolist()
                inputs.append(entry)
            doc = {"inputs": inputs}
            if outputs is not None:
                doc["outputs"] = [{"name": n, "parameters": p} if p else {"name": n} for n, p in outputs.items()]
            return self._http("POST", f"/v2/models/{model}/infer", json.dumps(doc))
        req = service_pb2.ModelInferRequest(model_name=model)
        for name, spec in (("INPUT0", in0), ("INPUT1", in1)):
            t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            if isinstance(spec, dict):
                set_grpc_params(t.parameters, spec)
            else:
                req.raw_input_contents.append(np.asarray(spec, dtype=np.int32).tobytes())
        for name, params in (outputs or {}).items():
            set_grpc_params(req.outputs.add(name=name).parameters, params or {})
        return self._grpc("ModelInfer", req)

    def infer_ok(self, in0, in1, outputs=None) -> dict:
        """{output name: int32 array, or None for a shared-memory output}.

        Also checks the shm output entries: HTTP name/datatype/shape only;
        gRPC an empty raw_output_contents entry at the output's index.
        """
        err, resp = self._infer(in0, in1, outputs)
        assert err is None, err
        shm_outputs = {n for n, p in (outputs or {}).items() if p and "shared_memory_region" in p}
        got = {}
        if self.proto == "http":
            assert "inference-header-content-length" not in resp.headers, resp
            for o in resp.json()["outputs"]:
                if o["name"] in shm_outputs:
                    assert o == {"name": o["name"], "datatype": "INT32", "shape": [1, 16]}, o
                    got[o["name"]] = None
                else:
                    got[o["name"]] = np.array(o["data"], dtype=np.int32).reshape(o["shape"])
            return got
        assert len(resp.raw_output_contents) == len(resp.outputs), resp
        for o, raw in zip(resp.outputs, resp.raw_output_contents):
            assert o.datatype == "INT32" and list(o.shape) == [1, 16] and len(o.parameters) == 0
            if o.name in shm_outputs:
                assert raw == b"", o.name
                got[o.name] = None
            else:
                got[o.name] = np.frombuffer(raw, dtype=np.int32).reshape(1, 16)
        return got

    def infer_err(self, in0, in1, outputs=None) -> tuple:
        err, resp = self._infer(in0, in1, outputs)
        assert err is not None, resp
        return err


@pytest.fixture(params=["http", "grpc"])
def api(request, raw_http, grpc_stub) -> Api:
    return Api(request.param, raw_http, grpc_stub)


def input_region(pool, api, label="in"):
    """A registered 128-byte region: INPUT0 at 0, INPUT1 at 64 (as the examples lay it out)."""
    handle, key = pool.create(128, label)
    write(handle, A_BYTES + B_BYTES)
    name = pool.name(label)
    assert api.register(name, key, 128) is None
    return handle, name


def output_region(pool, api, size=128, label="out"):
    handle, key = pool.create(size, label, fill=SENTINEL)
    name = pool.name(label)
    assert api.register(name, key, size) is None
    return handle, name


# --------------------------------------------------------------------------- the client examples
def test_simple_http_shm_client(http_client, pool):
    """simple_http_shm_client.py: one input region, one output region, 64-byte halves."""
    http_client.unregister_system_shared_memory()
    http_client.unregister_cuda_shared_memory()
    out_handle, out_key = pool.create(128, "output_simple")
    in_handle, in_key = pool.create(128, "input_simple")
    out_name, in_name = pool.name("output_data"), pool.name("input_data")
    http_client.register_system_shared_memory(out_name, out_key, 128)
    shm.set_shared_memory_region(in_handle, [SIMPLE_A])
    shm.set_shared_memory_region(in_handle, [SIMPLE_B], offset=64)
    http_client.register_system_shared_memory(in_name, in_key, 128)

    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(in_name, 64)
    inputs[1].set_shared_memory(in_name, 64, offset=64)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
    outputs[0].set_shared_memory(out_name, 64)
    outputs[1].set_shared_memory(out_name, 64, offset=64)
    result = http_client.infer("simple", inputs, outputs=outputs)

    out0, out1 = result.get_output("OUTPUT0"), result.get_output("OUTPUT1")
    assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    assert out1 == {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16]}
    dtype = utils.triton_to_np_dtype(out0["datatype"])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, dtype, out0["shape"]).copy(), SUM)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, dtype, out1["shape"], offset=64).copy(), DIFF)

    status = http_client.get_system_shared_memory_status()
    assert sorted(status, key=lambda d: d["name"]) == sorted([
        {"name": out_name, "key": out_key, "offset": 0, "byte_size": 128},
        {"name": in_name, "key": in_key, "offset": 0, "byte_size": 128},
    ], key=lambda d: d["name"])
    http_client.unregister_system_shared_memory()
    assert http_client.get_system_shared_memory_status() == []


def test_simple_grpc_shm_client(grpc_client, pool):
    """simple_grpc_shm_client.py."""
    grpc_client.unregister_system_shared_memory()
    grpc_client.unregister_cuda_shared_memory()
    out_handle, out_key = pool.create(128, "output_simple")
    in_handle, in_key = pool.create(128, "input_simple")
    out_name, in_name = pool.name("output_data"), pool.name("input_data")
    grpc_client.register_system_shared_memory(out_name, out_key, 128)
    shm.set_shared_memory_region(in_handle, [SIMPLE_A])
    shm.set_shared_memory_region(in_handle, [SIMPLE_B], offset=64)
    grpc_client.register_system_shared_memory(in_name, in_key, 128)

    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(in_name, 64)
    inputs[1].set_shared_memory(in_name, 64, offset=64)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(out_name, 64)
    outputs[1].set_shared_memory(out_name, 64, offset=64)
    result = grpc_client.infer("simple", inputs, outputs=outputs)

    out0, out1 = result.get_output("OUTPUT0"), result.get_output("OUTPUT1")
    assert out0.name == "OUTPUT0" and out0.datatype == "INT32" and list(out0.shape) == [1, 16]
    dtype = utils.triton_to_np_dtype(out0.datatype)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, dtype, out0.shape).copy(), SUM)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, dtype, out1.shape, offset=64).copy(), DIFF)
    assert list(result.get_response().raw_output_contents) == [b"", b""]

    status = grpc_client.get_system_shared_memory_status()
    assert len(status.regions) == 2
    assert status.regions[in_name].key == in_key and status.regions[in_name].byte_size == 128
    assert status.regions[out_name].offset == 0
    grpc_client.unregister_system_shared_memory()
    assert len(grpc_client.get_system_shared_memory_status().regions) == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_simple_shm_string_client(http_client, grpc_client, pool, protocol):
    """simple_http_shm_string_client.py: BYTES tensors in shm, output regions of the serialized size."""
    client, mod = (http_client, httpclient) if protocol == "http" else (grpc_client, grpcclient)
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    as_bytes = lambda x: np.array([str(v).encode() for v in x], dtype=object)  # noqa: E731
    expected_sum, expected_diff = as_bytes(in0 + in1), as_bytes(in0 - in1)
    ser = {k: utils.serialize_byte_tensor(v) for k, v in
           (("in0", as_bytes(in0)), ("in1", as_bytes(in1)), ("out0", expected_sum), ("out1", expected_diff))}
    size = {k: utils.serialized_byte_size(v) for k, v in ser.items()}
    handles, names = {}, {}
    for k in ("out0", "out1", "in0", "in1"):
        handles[k], key = pool.create(size[k], k)
        names[k] = pool.name(k)
        if k.startswith("in"):
            shm.set_shared_memory_region(handles[k], [ser[k]])
        client.register_system_shared_memory(names[k], key, size[k])

    inputs = [mod.InferInput("INPUT0", [1, 16], "BYTES"), mod.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_shared_memory(names["in0"], size["in0"])
    inputs[1].set_shared_memory(names["in1"], size["in1"])
    outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(names["out0"], size["out0"])
    outputs[1].set_shared_memory(names["out1"], size["out1"])
    result = client.infer("simple_string", inputs, outputs=outputs)

    for out, k, want in (("OUTPUT0", "out0", expected_sum), ("OUTPUT1", "out1", expected_diff)):
        o = result.get_output(out)
        datatype, shape = (o["datatype"], o["shape"]) if protocol == "http" else (o.datatype, list(o.shape))
        assert (datatype, shape) == ("BYTES", [1, 16])
        got = shm.get_contents_as_numpy(handles[k], utils.triton_to_np_dtype(datatype), shape)
        assert list(got.reshape(-1)) == list(want)
        del got
        assert read(handles[k], size[k]) == ser[k].item()


def test_simple_string_output_region_too_small(raw_http, pool):
    """A BYTES output larger than its region fails like a fixed-size one."""
    api = Api("http", raw_http, None)
    s = utils.serialize_byte_tensor(np.array([str(i).encode() for i in range(16)], dtype=object)).item()
    handle, key = pool.create(len(s), "in")
    write(handle, s)
    in_name = pool.name("in")
    assert api.register(in_name, key, len(s)) is None
    _, out_name = output_region(pool, api, size=16)
    doc = {"inputs": [{"name": n, "datatype": "BYTES", "shape": [1, 16], "parameters": shm_params(in_name, len(s))}
                      for n in ("INPUT0", "INPUT1")],
           "outputs": [{"name": "OUTPUT0", "parameters": shm_params(out_name, 16)}]}
    resp = raw_http("POST", "/v2/models/simple_string/infer", json.dumps(doc))
    need = len(utils.serialize_byte_tensor(np.array([str(2 * i).encode() for i in range(16)], dtype=object)).item())
    assert (resp.status, resp.error) == (500, f"shared memory size specified with the request for output 'OUTPUT0' "
                                              f"(16 bytes) should be at least {need} bytes to hold the results"), resp


# --------------------------------------------------------------------------- mixing shm and inline data
@pytest.mark.parametrize("in1_binary", [True, False], ids=["binary", "json"])
def test_http_mixed_shm_and_inline_inputs(http_client, raw_http, pool, in1_binary):
    """INPUT0 from shm, INPUT1 inline (binary or JSON); OUTPUT0 to shm, OUTPUT1 binary."""
    api = Api("http", raw_http, None)
    in_handle, key = pool.create(64, "in")
    write(in_handle, A_BYTES)
    in_name = pool.name("in")
    assert api.register(in_name, key, 64) is None
    out_handle, out_name = output_region(pool, api, size=64)

    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(in_name, 64)
    inputs[1].set_data_from_numpy(SIMPLE_B, binary_data=in1_binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
    outputs[0].set_shared_memory(out_name, 64)
    result = http_client.infer("simple", inputs, outputs=outputs)
    assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    assert result.get_output("OUTPUT1")["parameters"] == {"binary_data_size": 64}
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DIFF)
    np.testing.assert_array_equal(read_i32(out_handle), SUM)


def test_http_mixed_raw_binary_framing(raw_http, pool):
    """Binary chunks skip the shm input: INPUT0 shm, INPUT1 binary_data_size, all outputs to JSON/shm."""
    api = Api("http", raw_http, None)
    in_handle, key = pool.create(64, "in")
    write(in_handle, A_BYTES)
    in_name = pool.name("in")
    assert api.register(in_name, key, 64) is None
    header = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": shm_params(in_name, 64)},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
    ]}
    body, headers = binary_body(header, B_BYTES)
    resp = raw_http("POST", "/v2/models/simple/infer", body, headers)
    assert resp.status == 200, resp
    outs = {o["name"]: o["data"] for o in resp.json()["outputs"]}
    assert outs == {"OUTPUT0": SUM.reshape(-1).tolist(), "OUTPUT1": DIFF.reshape(-1).tolist()}


@pytest.mark.parametrize("shm_input", ["INPUT0", "INPUT1"])
def test_grpc_mixed_shm_and_raw(grpc_stub, raw_http, pool, shm_input):
    """The raw_input_contents index advances only for raw inputs; a shm output gets an empty raw entry."""
    api = Api("grpc", raw_http, grpc_stub)
    in_handle, key = pool.create(64, "in")
    write(in_handle, A_BYTES if shm_input == "INPUT0" else B_BYTES)
    in_name = pool.name("in")
    assert api.register(in_name, key, 64) is None
    out_handle, out_name = output_region(pool, api, size=64)
    p = shm_params(in_name, 64)
    got = api.infer_ok(p if shm_input == "INPUT0" else SIMPLE_A, p if shm_input == "INPUT1" else SIMPLE_B,
                       {"OUTPUT0": {}, "OUTPUT1": shm_params(out_name, 64)})
    assert got["OUTPUT1"] is None
    np.testing.assert_array_equal(got["OUTPUT0"], SUM)
    np.testing.assert_array_equal(read_i32(out_handle), DIFF)


# --------------------------------------------------------------------------- offsets and sizes inside regions
def test_offsets_inside_region(api, pool):
    """Inputs and outputs at arbitrary offsets of one region; nothing else in it is touched."""
    handle, key = pool.create(512, "mixed", fill=SENTINEL)
    write(handle, A_BYTES, offset=100)
    write(handle, B_BYTES, offset=7)  # unaligned
    name = pool.name("mixed")
    assert api.register(name, key, 512) is None
    got = api.infer_ok(shm_params(name, 64, 100), shm_params(name, 64, 7),
                       {"OUTPUT0": shm_params(name, 64, 300), "OUTPUT1": shm_params(name, 64, 448)})
    assert got == {"OUTPUT0": None, "OUTPUT1": None}
    np.testing.assert_array_equal(read_i32(handle, 300), SUM)
    np.testing.assert_array_equal(read_i32(handle, 448), DIFF)
    expect = bytearray([SENTINEL]) * 512
    expect[100:164], expect[7:71], expect[300:364] = A_BYTES, B_BYTES, SUM.tobytes()
    expect[448:512] = DIFF.tobytes()
    assert read(handle, 512) == bytes(expect)


def test_output_region_larger_than_needed(api, pool):
    _, in_name = input_region(pool, api)
    out_handle, out_name = output_region(pool, api, size=1024)
    got = api.infer_ok(shm_params(in_name, 64), shm_params(in_name, 64, 64),
                       {"OUTPUT0": shm_params(out_name, 1024), "OUTPUT1": shm_params(out_name, 512, 512)})
    assert got == {"OUTPUT0": None, "OUTPUT1": None}
    np.testing.assert_array_equal(read_i32(out_handle), SUM)
    np.testing.assert_array_equal(read_i32(out_handle, 512), DIFF)
    assert read(out_handle, 448, 64) == bytes([SENTINEL]) * 448
    assert read(out_handle, 448, 576) == bytes([SENTINEL]) * 448


def test_output_region_too_small(api, pool):
    _, in_name = input_region(pool, api)
    out_handle, out_name = output_region(pool, api, size=128)
    err = api.infer_err(shm_params(in_name, 64), shm_params(in_name, 64, 64),
                        {"OUTPUT0": shm_params(out_name, 32)})
    assert err == api.err(500, "INTERNAL", "shared memory size specified with the request for output 'OUTPUT0' "
                                           "(32 bytes) should be at least 64 bytes to hold the results")


def test_region_is_read_at_request_time(api, pool):
    """The server reads the client's memory, not a copy taken at registration."""
    in_handle, in_name = input_region(pool, api)
    out_handle, out_name = output_region(pool, api)
    outputs = {"OUTPUT0": shm_params(out_name, 64), "OUTPUT1": shm_params(out_name, 64, 64)}
    api.infer_ok(shm_params(in_name, 64), shm_params(in_name, 64, 64), outputs)
    np.testing.assert_array_equal(read_i32(out_handle), SUM)
    a2 = np.full((1, 16), 1000, dtype=np.int32)
    write(in_handle, a2.tobytes())
    api.infer_ok(shm_params(in_name, 64), shm_params(in_name, 64, 64), outputs)
    np.testing.assert_array_equal(read_i32(out_handle), a2 + SIMPLE_B)
    np.testing.assert_array_equal(read_i32(out_handle, 64), a2 - SIMPLE_B)
    got = api.infer_ok(shm_params(in_name, 64), shm_params(in_name, 64, 64))  # outputs inline
    np.testing.assert_array_equal(got["OUTPUT0"], a2 + SIMPLE_B)


# --------------------------------------------------------------------------- register / status / unregister
def test_register_status_unregister_http(raw_http, pool):
    handle, key = pool.create(256, "k")
    name = pool.name("r")
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register", json.dumps({"key": key, "byte_size": 128}))
    assert resp.status == 200 and resp.body == b"", resp
    assert resp.headers.get("content-type") == "application/json", resp
    entry = {"name": name, "key": key, "offset": 0, "byte_size": 128}  # offset defaults to 0
    resp = raw_http("GET", "/v2/systemsharedmemory/status")
    assert resp.status == 200 and entry in resp.json(), resp
    resp = raw_http("GET", f"/v2/systemsharedmemory/region/{name}/status")
    assert resp.status == 200 and resp.json() == [entry], resp
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/unregister")
    assert resp.status == 200 and resp.body == b"", resp
    resp = raw_http("GET", f"/v2/systemsharedmemory/region/{name}/status")
    assert (resp.status, resp.error) == (404, f"Unable to find system shared memory region: '{name}'"), resp


def test_register_status_unregister(api, pool):
    handle, key = pool.create(256, "k")
    write(handle, A_BYTES + B_BYTES)
    n1, n2 = pool.name("a"), pool.name("b")
    assert api.register(n1, key, 128) is None
    h2, key2 = pool.create(64, "k2")
    assert api.register(n2, key2, 64, offset=0) is None
    e1 = {"name": n1, "key": key, "offset": 0, "byte_size": 128}
    e2 = {"name": n2, "key": key2, "offset": 0, "byte_size": 64}
    assert [e for e in api.status() if e["name"] in (n1, n2)] == sorted([e1, e2], key=lambda d: d["name"])
    assert api.status(n1) == [e1]
    assert api.status(n2) == [e2]
    assert api.unregister(n2) is None
    assert api.status(n2) == api.err(404, "NOT_FOUND", f"Unable to find system shared memory region: '{n2}'")
    assert api.status(n1) == [e1]
    # an unregistered region is gone for inference too
    err = api.infer_err(shm_params(n2, 64), SIMPLE_B)
    assert err == api.err(404, "NOT_FOUND", f"Unable to find shared memory region: '{n2}'")
    got = api.infer_ok(shm_params(n1, 64), shm_params(n1, 64, 64))
    np.testing.assert_array_equal(got["OUTPUT0"], SUM)
    # the name is free again
    assert api.register(n2, key2, 32) is None
    assert api.status(n2) == [{**e2, "byte_size": 32}]


def test_status_of_unknown_region(api, pool):
    name = pool.name("never")
    assert api.status(name) == api.err(404, "NOT_FOUND", f"Unable to find system shared memory region: '{name}'")


def test_unregister_unknown_is_noop(api, pool):
    assert api.unregister(pool.name("never")) is None


def test_unregister_all(api, pool):
    names = []
    for i in range(3):
        _, key = pool.create(64, f"k{i}")
        names.append(pool.name(f"r{i}"))
        assert api.register(names[-1], key, 64) is None
    assert {e["name"] for e in api.status()} >= set(names)
    # CUDA unregister (all, or by the name of a system region) leaves system regions alone
    assert api.cuda_unregister() is None
    assert api.cuda_unregister(names[0]) is None
    assert {e["name"] for e in api.status()} >= set(names)
    assert api.unregister() is None
    assert api.status() == []
    assert api.unregister() is None  # nothing left: still fine


def test_duplicate_region_name(api, pool):
    h1, key1 = pool.create(64, "k1")
    h2, key2 = pool.create(128, "k2")
    name = pool.name("dup")
    assert api.register(name, key1, 64) is None
    msg = f"shared memory region '{name}' already in manager"
    assert api.register(name, key1, 64) == api.err(400, "ALREADY_EXISTS", msg)
    assert api.register(name, key2, 128) == api.err(400, "ALREADY_EXISTS", msg)
    assert api.status(name) == [{"name": name, "key": key1, "offset": 0, "byte_size": 64}]


@pytest.mark.parametrize("missing", ["key", "byte_size"])
def test_register_missing_field_http(raw_http, pool, missing):
    _, key = pool.create(64, "k")
    name = pool.name("r")
    body = {"key": key, "offset": 0, "byte_size": 64}
    del body[missing]
    resp = raw_http("POST", f"/v2/systemsharedmemory/region/{name}/register", json.dumps(body))
    assert (resp.status, resp.error) == (400, f"Shared memory register request has no '{missing}' field"), resp
    assert raw_http("GET", f"/v2/systemsharedmemory/region/{name}/status").status == 404


def test_register_key_does_not_exist(api, pool):
    key = f"/{pool.prefix}_missing_{next(_COUNTER)}"
    name = pool.name("r")
    assert api.register(name, key, 64) == api.err(500, "INTERNAL", f"Unable to open shared memory region: '{key}'")
    assert api.status(name) == api.err(404, "NOT_FOUND", f"Unable to find system shared memory region: '{name}'")


@pytest.mark.parametrize("offset,byte_size", [(0, 101), (50, 51), (100, 1), (4096, 64)])
def test_register_beyond_object_size(api, pool, offset, byte_size):
    _, key = pool.create(100, "small")
    name = pool.name("r")
    assert api.register(name, key, byte_size, offset) == api.err(
        400, "INVALID_ARGUMENT", f"failed to register shared memory region '{name}': invalid args")


def test_register_exactly_object_size(api, pool):
    handle, key = pool.create(128, "k")
    write(handle, A_BYTES + B_BYTES)
    name = pool.name("r")
    assert api.register(name, key, 128) is None
    got = api.infer_ok(shm_params(name, 64), shm_params(name, 64, 64))
    np.testing.assert_array_equal(got["OUTPUT1"], DIFF)


@pytest.mark.parametrize("offset,byte_size", [(100, 128), (37, 8), (4097, 64), (0, 0), (4096, 0)])
def test_register_offset_inside_a_page_or_nothing(api, pool, offset, byte_size):
    """Triton maps the region at its offset: one inside a page, or a size of 0, fails its mmap
    with EINVAL, and Triton says so (TRITON.md §5.2)."""
    _, key = pool.create(3 * 4096, "k")
    name = pool.name("r")
    assert api.register(name, key, byte_size, offset) == api.err(
        400, "INVALID_ARGUMENT",
        f"failed to register shared memory region '{name}': unable to process address spaceInvalid argument")
    assert api.status(name) == api.err(404, "NOT_FOUND", f"Unable to find system shared memory region: '{name}'")


@pytest.mark.triton251_differs(
    "2.51 applies a page-multiple registration offset twice (TRITON.md §12): the region reads past its object")
def test_register_bounds_are_the_regions(api, pool):
    handle, key = pool.create(2 * 4096, "in", fill=0)
    write(handle, A_BYTES + B_BYTES, offset=4096)
    name = pool.name("in")
    assert api.register(name, key, 128, offset=4096) is None
    assert api.status(name) == [{"name": name, "key": key, "offset": 4096, "byte_size": 128}]
    # bounds are those of the region, not of the object
    assert api.infer_err(shm_params(name, 64, 128), SIMPLE_B) == api.err(
        400, "INVALID_ARGUMENT", f"Invalid offset for shared memory region: '{name}'")
    assert api.infer_err(shm_params(name, 64, 65), SIMPLE_B) == api.err(
        400, "INVALID_ARGUMENT", f"Invalid offset + byte size for shared memory region: '{name}'")


@pytest.mark.triton251_differs(
    "2.51 applies a page-multiple registration offset twice (TRITON.md §12): region offset 0 reads object offset 8192")
def test_register_page_offset(api, pool):
    handle, key = pool.create(3 * 4096, "k", fill=0)
    write(handle, A_BYTES + B_BYTES, offset=4096)
    write(handle, (SIMPLE_A * 100).astype(np.int32).tobytes(), offset=8192)  # what a double offset would read
    name = pool.name("r")
    assert api.register(name, key, 8192, offset=4096) is None
    got = api.infer_ok(shm_params(name, 64), shm_params(name, 64, 64))
    np.testing.assert_array_equal(got["OUTPUT0"], SUM)
    np.testing.assert_array_equal(got["OUTPUT1"], DIFF)


@pytest.mark.triton251_differs("no shm key validation in 2.51: 500 \"Unable to open shared memory region: '<k>'\"")
@pytest.mark.parametrize("key", ["/", "///"])
def test_register_key_only_slashes(api, pool, key):
    name = pool.name("r")
    assert api.register(name, key, 64) == api.err(
        400, "INVALID_ARGUMENT", f"cannot register shared memory region '{name}' - invalid shm key '{key}'")


@pytest.mark.triton251_differs("no reserved-prefix check in 2.51: an existing object with that key registers (200)")
def test_register_reserved_python_backend_prefix(api, pool):
    key = f"{RESERVED_PREFIX}{pool.prefix}_{next(_COUNTER)}"
    pool.create(64, key=key)  # the object exists: the key alone is refused
    name = pool.name("r")
    assert api.register(name, key, 64) == api.err(
        400, "INVALID_ARGUMENT",
        f"cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved "
        f"prefix '{RESERVED_PREFIX}'")
    # with leading slashes (stripped by shm_open) it is the same object, refused too
    err = api.register(name, "/" + key, 64)
    assert err[0] == api.err(400, "INVALID_ARGUMENT", "")[0], err
    assert err[1].startswith(f"cannot register shared memory region '{name}' with key '"), err
    assert err[1].endswith(f"' as the key contains the reserved prefix '{RESERVED_PREFIX}'"), err
    assert api.status(name) == api.err(404, "NOT_FOUND", f"Unable to find system shared memory region: '{name}'")


@pytest.mark.triton251_differs("2.51: the same key under a second name -> 500 \"Invalid shared memory region: '<k>'\"")
def test_same_key_two_regions(api, pool):
    handle, key = pool.create(256, "k")
    write(handle, A_BYTES + B_BYTES)
    n_in0, n_in1 = pool.name("in0"), pool.name("in1")
    assert api.register(n_in0, key, 64) is None
    assert api.register(n_in1, key, 128) is None
    got = api.infer_ok(shm_params(n_in0, 64), shm_params(n_in1, 64, 64))
    np.testing.assert_array_equal(got["OUTPUT0"], SUM)
    assert api.unregister(n_in0) is None  # the other region keeps working
    got = api.infer_ok(shm_params(n_in1, 64), shm_params(n_in1, 64, 64))
    np.testing.assert_array_equal(got["OUTPUT1"], DIFF)


DELAYED = "custom_identity_int32"  # an INT32 identity that waits its `execute_delay_ms` parameter
DELAY_MS = 2000


@pytest.fixture
def delayed_model(raw_http):
    """DELAYED loaded to answer DELAY_MS after each request, on one instance; restored after.
    (Triton takes a load's configuration as the whole configuration, the sidecar lays it over
    the model's own: the model's own with changes serves both.)"""
    resp = raw_http("GET", f"/v2/models/{DELAYED}/config")
    assert resp.status == 200, resp
    config = dict(resp.json())
    config.update({
        "max_batch_size": 1,
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": {"execute_delay_ms": {"string_value": str(DELAY_MS)}},
    })
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    resp = raw_http("POST", f"/v2/repository/models/{DELAYED}/load", body)
    assert resp.status == 200, resp
    yield
    assert raw_http("POST", f"/v2/repository/models/{DELAYED}/unload").status == 200
    assert raw_http("POST", f"/v2/repository/models/{DELAYED}/load").status == 200


def infer_delayed_in_shm(api, in_name, out_name):
    """INPUT0 from `in_name`, OUTPUT0 into `out_name` (16 INT32 each); None or the error."""
    params = {"INPUT0": shm_params(in_name, 64), "OUTPUT0": shm_params(out_name, 64)}
    if api.proto == "http":
        doc = {
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                        "parameters": params["INPUT0"]}],
            "outputs": [{"name": "OUTPUT0", "parameters": params["OUTPUT0"]}],
        }
        return api._http("POST", f"/v2/models/{DELAYED}/infer", json.dumps(doc))[0]
    req = service_pb2.ModelInferRequest(model_name=DELAYED)
    set_grpc_params(req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16]).parameters,
                    params["INPUT0"])
    set_grpc_params(req.outputs.add(name="OUTPUT0").parameters, params["OUTPUT0"])
    return api._grpc("ModelInfer", req)[0]


@local_models
@pytest.mark.triton251_differs("2.51 refuses: 'Cannot unregister shared memory region ..., it is currently "
                              "in use.' (current Triton marks the region and lets it go when its last "
                              "request ends, TRITON.md §5.2)")
def test_unregister_while_in_flight(api, pool, delayed_model):
    """Unregistering a region a request is using succeeds at once; the region stays registered
    (listed, its name taken, usable by a new request) until the last request using it ends, and
    then goes without another call. Inputs and outputs alike: the request holds both."""
    values = np.arange(100, 116, dtype=np.int32)
    in_handle, in_key = pool.create(64, "in")
    write(in_handle, values.tobytes())
    out_handle, out_key = pool.create(64, "out", fill=SENTINEL)
    in_name, out_name = pool.name("in"), pool.name("out")
    assert api.register(in_name, in_key, 64) is None
    assert api.register(out_name, out_key, 64) is None
    listed = [{"name": in_name, "key": in_key, "offset": 0, "byte_size": 64},
              {"name": out_name, "key": out_key, "offset": 0, "byte_size": 64}]
    listed.sort(key=lambda d: d["name"])

    answers = {}

    def send(tag):
        answers[tag] = infer_delayed_in_shm(api, in_name, out_name)

    first = threading.Thread(target=send, args=("first",))
    first.start()
    time.sleep(DELAY_MS / 4000)
    assert api.unregister(in_name) is None
    assert api.unregister() is None
    assert api.status() == listed
    assert api.register(in_name, in_key, 64) == api.err(
        400, "ALREADY_EXISTS", f"shared memory region '{in_name}' already in manager")
    # A new request may still name the regions while they wait.
    second = threading.Thread(target=send, args=("second",))
    second.start()
    time.sleep(DELAY_MS / 4000)
    first.join(timeout=30)
    assert answers["first"] is None, answers
    np.testing.assert_array_equal(read_i32(out_handle).reshape(-1), values)
    assert api.status() == listed  # the second request still uses them
    second.join(timeout=30)
    assert answers["second"] is None, answers
    deadline = time.monotonic() + 5
    while api.status() != [] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert api.status() == []
    assert api.status(in_name) == api.err(
        404, "NOT_FOUND", f"Unable to find system shared memory region: '{in_name}'")
    assert api.register(in_name, in_key, 64) is None


# --------------------------------------------------------------------------- inference errors
def test_infer_unknown_region(api, pool):
    _, in_name = input_region(pool, api)
    ghost = pool.name("ghost")
    msg = f"Unable to find shared memory region: '{ghost}'"
    assert api.infer_err(shm_params(ghost, 64), shm_params(in_name, 64, 64)) == api.err(404, "NOT_FOUND", msg)
    assert api.infer_err(SIMPLE_A, SIMPLE_B, {"OUTPUT0": shm_params(ghost, 64)}) == api.err(404, "NOT_FOUND", msg)


@pytest.mark.parametrize("where", ["input", "output"])
def test_infer_offset_out_of_region(api, pool, where):
    _, name = input_region(pool, api)  # 128 bytes

    def bad(offset, size):
        p = shm_params(name, size, offset)
        if where == "input":
            return api.infer_err(p, SIMPLE_B)
        return api.infer_err(SIMPLE_A, SIMPLE_B, {"OUTPUT0": p})

    invalid_offset = api.err(400, "INVALID_ARGUMENT", f"Invalid offset for shared memory region: '{name}'")
    invalid_end = api.err(400, "INVALID_ARGUMENT", f"Invalid offset + byte size for shared memory region: '{name}'")
    assert bad(128, 64) == invalid_offset
    assert bad(4096, 64) == invalid_offset
    assert bad(100, 64) == invalid_end
    assert bad(65, 64) == invalid_end


@pytest.mark.triton251_differs("byte-size overflow wraps around instead of being reported (TRITON.md §12)")
def test_http_infer_offset_plus_size_overflow(raw_http, pool):
    api = Api("http", raw_http, None)
    _, name = input_region(pool, api)
    size = 2**64 - 32
    assert api.infer_err(shm_params(name, size, 64), SIMPLE_B) == (
        400, f"Integer overflow detected: byte_size ({size}) + offset (64) exceeds maximum value "
             f"({2**64 - 1}) for region '{name}'")


@pytest.mark.parametrize("byte_size", [128, 32])
def test_infer_input_byte_size_mismatch(api, pool, byte_size):
    _, name = input_region(pool, api)
    assert api.infer_err(shm_params(name, byte_size), shm_params(name, 64, 64)) == api.err(
        400, "INVALID_ARGUMENT",
        f"[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. "
        f"Expected 64, got {byte_size}")


@pytest.mark.parametrize("extra,message", [
    ({"binary_data": True}, "Output can't set both 'shared_memory_region' and 'binary_data'"),
    ({"classification": 2}, "Output can't set both 'shared_memory_region' and 'classification'"),
])
def test_http_shm_output_conflicts(raw_http, pool, extra, message):
    api = Api("http", raw_http, None)
    _, name = output_region(pool, api)
    assert api.infer_err(SIMPLE_A, SIMPLE_B, {"OUTPUT0": {**shm_params(name, 64), **extra}}) == (400, message)


def test_http_shm_output_binary_data_false_is_fine(raw_http, pool):
    api = Api("http", raw_http, None)
    handle, name = output_region(pool, api)
    got = api.infer_ok(SIMPLE_A, SIMPLE_B, {"OUTPUT0": {**shm_params(name, 64), "binary_data": False}})
    assert got == {"OUTPUT0": None}
    np.testing.assert_array_equal(read_i32(handle), SUM)


@pytest.mark.parametrize("set_fields,listed", [
    ({"data": True}, "'data' 'shared_memory_region'"),
    ({"binary_data_size": 64}, "'binary_data_size' 'shared_memory_region'"),
])
def test_http_input_shm_and_other_data(raw_http, pool, set_fields, listed):
    api = Api("http", raw_http, None)
    _, name = input_region(pool, api)
    inp = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": shm_params(name, 64)}
    if "data" in set_fields:
        inp["data"] = SIMPLE_A.reshape(-1).tolist()
    else:
        inp["parameters"]["binary_data_size"] = 64
    doc = {"inputs": [inp, {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
                            "parameters": shm_params(name, 64, 64)}]}
    resp = raw_http("POST", "/v2/models/simple/infer", json.dumps(doc))
    assert (resp.status, resp.error) == (
        400, "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
             f"'shared_memory_region' in 'parameters'. But set {listed}"), resp


def test_grpc_shm_param_errors(grpc_stub, raw_http, pool):
    api = Api("grpc", raw_http, grpc_stub)
    _, name = input_region(pool, api)
    out = {"shared_memory_region": name, "shared_memory_byte_size": 64}
    cases = [
        ({"shared_memory_offset": 0, "shared_memory_byte_size": 64}, None,
         "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"),
        ({"shared_memory_byte_size": 64}, None,
         "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"),
        ({"shared_memory_region": name}, None,
         "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'"),
        ({"shared_memory_region": name, "shared_memory_offset": 64}, None,
         "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'"),
        ({"shared_memory_region": name, "shared_memory_byte_size": "64"}, None,
         "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param."),
        ({"shared_memory_region": 1, "shared_memory_byte_size": 64}, None,
         "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected string_param."),
        ({"shared_memory_region": name, "shared_memory_byte_size": 64, "shared_memory_offset": "0"}, None,
         "invalid value type for 'shared_memory_offset' parameter for tensor 'INPUT0', expected int64_param."),
        (SIMPLE_A, {"OUTPUT0": {"shared_memory_offset": 0}},
         "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'OUTPUT0'"),
        (SIMPLE_A, {"OUTPUT0": {"shared_memory_region": name}},
         "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'OUTPUT0'"),
        (SIMPLE_A, {"OUTPUT0": {**out, "classification": 2}},
         "output can't set both 'shared_memory_region' and 'classification'"),
    ]
    for in0, outputs, message in cases:
        in1 = SIMPLE_B if isinstance(in0, np.ndarray) else shm_params(name, 64, 64)
        assert api.infer_err(in0, in1, outputs) == ("INVALID_ARGUMENT", message), (in0, outputs)


def test_grpc_shm_input_with_contents(grpc_stub, raw_http, pool):
    api = Api("grpc", raw_http, grpc_stub)
    _, name = input_region(pool, api)
    req = service_pb2.ModelInferRequest(model_name="simple")
    t0 = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    set_grpc_params(t0.parameters, shm_params(name, 64))
    t0.contents.int_contents.extend(SIMPLE_A.reshape(-1).tolist())
    t1 = req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    t1.contents.int_contents.extend(SIMPLE_B.reshape(-1).tolist())
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.ModelInfer(req, timeout=30)
    assert grpc_error(info.value) == (
        "INVALID_ARGUMENT",
        "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'")


def test_client_errors_surface(http_client, grpc_client, pool):
    """tritonclient raises InferenceServerException with the server's status and text."""
    key = f"/{pool.prefix}_missing_{next(_COUNTER)}"
    name = pool.name("r")
    with pytest.raises(InferenceServerException) as info:
        http_client.register_system_shared_memory(name, key, 64)
    assert (info.value.status(), info.value.message()) == ("500", f"Unable to open shared memory region: '{key}'")
    with pytest.raises(InferenceServerException) as info:
        grpc_client.register_system_shared_memory(name, key, 64)
    assert grpc_error(info.value) == ("INTERNAL", f"Unable to open shared memory region: '{key}'")
    with pytest.raises(InferenceServerException) as info:
        http_client.get_system_shared_memory_status(name)
    assert info.value.status() == "404"


# --------------------------------------------------------------------------- CUDA shared memory, no GPU
requires_no_gpu = pytest.mark.skipif(gpu_visible(), reason="a GPU is visible here; these check the no-GPU answers")


@requires_no_gpu
@pytest.mark.triton251_differs("2.51 (a GPU build without a usable device) answers 400 / INVALID_ARGUMENT "
                               "\"failed to register shared memory region: invalid args\"")
def test_cuda_register_without_gpu(api, pool):
    name = pool.name("cuda")
    assert api.cuda_register(name) == api.err(
        400, "INVALID_ARGUMENT", f"failed to register CUDA shared memory region: '{name}', GPUs not supported")
    assert api.cuda_status() == ([] if api.proto == "http" else {})


@requires_no_gpu
def test_cuda_status_and_unregister_without_gpu(api, pool):
    assert api.cuda_status() == ([] if api.proto == "http" else {})
    assert api.cuda_unregister() is None
    ghost = pool.name("ghost")
    assert api.cuda_unregister(ghost) is None
    assert api.cuda_status(ghost) == api.err(404, "NOT_FOUND", f"Unable to find cuda shared memory region: '{ghost}'")
    _, sys_name = input_region(pool, api)
    assert api.cuda_status(sys_name) == api.err(
        404, "NOT_FOUND", f"The region named '{sys_name}' is registered as system shared memory, not CUDA shared memory")


def test_extensions_list_system_shared_memory(raw_http, grpc_stub):
    resp = raw_http("GET", "/v2")
    assert "system_shared_memory" in resp.json()["extensions"], resp
    assert "system_shared_memory" in grpc_stub.ServerMetadata(service_pb2.ServerMetadataRequest()).extensions


@requires_no_gpu
@pytest.mark.triton251_differs("2.51 lists cuda_shared_memory whether or not a GPU can be used")
def test_extensions_omit_cuda_shared_memory_without_gpu(raw_http, grpc_stub):
    resp = raw_http("GET", "/v2")
    assert "cuda_shared_memory" not in resp.json()["extensions"], resp
    assert "cuda_shared_memory" not in grpc_stub.ServerMetadata(service_pb2.ServerMetadataRequest()).extensions


# --------------------------------------------------------------------------- perf_analyzer
@pytest.mark.perf_analyzer
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_system_shared_memory(http_url, grpc_url, raw_http, protocol):
    from test_perf_analyzer import run_pa_over_shared_memory

    run_pa_over_shared_memory(raw_http, http_url if protocol == "http" else grpc_url, protocol, "system")


# --------------------------------------------------------------------------- owner misbehaving
@pytest.mark.triton251_differs("2.51 dies of the SIGBUS its copy out of the shrunk object raises", run=False)
def test_an_object_shrunk_by_its_owner_is_an_error_never_a_crash(http_url, pool):
    """The owner truncates its object after registering it, and keeps resizing it while requests
    read it: each request is answered (right or with an error), and the server keeps serving.
    (Reading a shrunk object through a mapping raises SIGBUS; the server must not die of it.)"""
    import threading

    size = 4 << 20
    handle, key = pool.create(size, "shrink", fill=1)
    name = pool.name("shrink")
    body = json.dumps({"key": key, "offset": 0, "byte_size": size})
    resp = raw_request(http_url, "POST", f"/v2/systemsharedmemory/region/{name}/register", body)
    assert resp.status == 200, resp
    path = f"/dev/shm/{key.lstrip('/')}"
    request = json.dumps({
        "inputs": [{"name": "INPUT0", "datatype": "UINT8", "shape": [size],
                    "parameters": shm_params(name, size, 0)}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    })

    os.truncate(path, 4096)
    resp = raw_request(http_url, "POST", "/v2/models/identity_uint8/infer", request)
    assert resp.status in (400, 500), resp
    assert "truncated" in resp.json()["error"], resp.json()

    stop = threading.Event()

    def resize():
        small = True
        while not stop.is_set():
            os.truncate(path, 4096 if small else size)
            small = not small

    resizer = threading.Thread(target=resize)
    resizer.start()
    try:
        for _ in range(100):
            resp = raw_request(http_url, "POST", "/v2/models/identity_uint8/infer", request, timeout=30)
            assert resp.status in (200, 400, 500), resp
    finally:
        stop.set()
        resizer.join()
    os.truncate(path, size)
    assert_serving(http_url)
