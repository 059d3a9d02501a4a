#!/usr/bin/env python3
"""Sends the same gRPC calls to Triton and to the sidecar and prints where their answers differ.

Usage: tests/tools/diff_against_triton_grpc.py TRITON_HOST:PORT SIDECAR_HOST:PORT [LABEL_SUBSTRING...]

The gRPC companion of diff_against_triton.py (REST). Both servers must serve the built-in
catalog's models (Triton: ../shared/reference/triton/models). Each call is a raw
`inference.GRPCInferenceService` message, well-formed or not: tensor contents and raw contents,
datatypes, shapes, parameters of every type, shared-memory and sequence parameters, the metadata,
statistics, repository, shared-memory, trace and logging RPCs. An answer is its status code and
message, or the response message (compared field by field, ids and timings left out).
Informational: prints each difference and a count, always exits 0. Differences on purpose are
listed in docs/compatibility.md; a finding worth keeping becomes a conformance test.
"""

import struct
import sys

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as rpc


def address(text):
    host, _, port = text.rpartition(":")
    return f"{host or '127.0.0.1'}:{port}"


A, B = address(sys.argv[1]), address(sys.argv[2])
ONLY = sys.argv[3:]
STUBS = [rpc.GRPCInferenceServiceStub(grpc.insecure_channel(a)) for a in (A, B)]

# Fields that differ between any two servers and say nothing about the protocol.
VOLATILE = {"id"}


def answer(stub, method, message):
    if method == "ModelStreamInfer":
        return stream_answer(stub, message)
    try:
        reply = getattr(stub, method)(message, timeout=10)
    except grpc.RpcError as error:
        return (error.code().name, error.details())
    return ("OK", normalise(method, reply))


def stream_answer(stub, message):
    """A request alone on a stream: the stream's responses (an error travels inside one)."""
    try:
        replies = list(stub.ModelStreamInfer(iter([message]), timeout=10))
    except grpc.RpcError as error:
        return (error.code().name, error.details())
    out = []
    for reply in replies:
        reply.infer_response.id = ""
        out.append((reply.error_message, reply.infer_response))
    return ("OK", out)


def normalise(method, reply):
    if method in ("ModelStatistics",):
        return "statistics"  # counts and times depend on each server's history
    if method in ("ServerMetadata",):
        return "metadata"
    if hasattr(reply, "id") and method == "ModelInfer":
        reply.id = ""
    return reply


diffs = 0
total = 0


def check(label, method, message):
    global diffs, total
    if ONLY and not any(o in label for o in ONLY):
        return
    total += 1
    a, b = (answer(stub, method, message) for stub in STUBS)
    if a != b:
        diffs += 1
        print(f"--- {label}: {method}")
        print(f"  triton : {a[0]} {str(a[1])[:400]!r}")
        print(f"  sidecar: {b[0]} {str(b[1])[:400]!r}")
    if a[0] == "UNAVAILABLE" and not alive(STUBS[0]):
        print("Triton stopped answering after", label)
        sys.exit(0)


def alive(stub):
    try:
        return stub.ServerLive(pb.ServerLiveRequest(), timeout=5).live
    except grpc.RpcError:
        return False


def tensor(name="INPUT0", datatype="FP32", shape=(4,), **contents):
    t = pb.ModelInferRequest().InferInputTensor(name=name, datatype=datatype, shape=list(shape))
    for field, values in contents.items():
        getattr(t.contents, field).extend(values)
    return t


def request(model="identity_fp32", inputs=(), raw=(), outputs=(), version="", params=None, **kw):
    r = pb.ModelInferRequest(model_name=model, model_version=version, **kw)
    r.inputs.extend(inputs)
    r.raw_input_contents.extend(raw)
    for o in outputs:
        r.outputs.append(o)
    for key, value in (params or {}).items():
        set_param(r.parameters[key], value)
    return r


def set_param(p, value):
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        if value >= 2**63:
            p.uint64_param = value
        else:
            p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = value


def output(name="OUTPUT0", params=None):
    o = pb.ModelInferRequest().InferRequestedOutputTensor(name=name)
    for key, value in (params or {}).items():
        set_param(o.parameters[key], value)
    return o


def with_params(t, params):
    for key, value in params.items():
        set_param(t.parameters[key], value)
    return t


F4 = struct.pack("<4f", 1, 2, 3, 4)
I16 = struct.pack("<16i", *range(16))


def blob(*items):
    return b"".join(struct.pack("<I", len(s)) + s for s in items)


cases = [
    ("ok contents", "ModelInfer", request(inputs=[tensor(fp32_contents=[1, 2, 3, 4])])),
    ("ok raw", "ModelInfer", request(inputs=[tensor()], raw=[F4])),
    ("no model", "ModelInfer", request(model="")),
    ("unknown model", "ModelInfer", request(model="nope", inputs=[tensor()], raw=[F4])),
    ("version 2", "ModelInfer", request(version="2", inputs=[tensor()], raw=[F4])),
    ("version abc", "ModelInfer", request(version="abc", inputs=[tensor()], raw=[F4])),
    ("version -1", "ModelInfer", request(version="-1", inputs=[tensor()], raw=[F4])),
    ("no inputs", "ModelInfer", request()),
    ("no contents", "ModelInfer", request(inputs=[tensor()])),
    ("raw short", "ModelInfer", request(inputs=[tensor()], raw=[F4[:12]])),
    ("raw long", "ModelInfer", request(inputs=[tensor()], raw=[F4 + F4])),
    ("raw extra", "ModelInfer", request(inputs=[tensor()], raw=[F4, F4])),
    ("raw and contents", "ModelInfer", request(inputs=[tensor(fp32_contents=[1, 2, 3, 4])], raw=[F4])),
    ("contents short", "ModelInfer", request(inputs=[tensor(fp32_contents=[1, 2, 3])])),
    ("contents long", "ModelInfer", request(inputs=[tensor(fp32_contents=[1, 2, 3, 4, 5])])),
    ("contents wrong field", "ModelInfer", request(inputs=[tensor(int_contents=[1, 2, 3, 4])])),
    ("contents two fields", "ModelInfer", request(inputs=[tensor(fp32_contents=[1, 2], int_contents=[3, 4])])),
    ("wrong datatype", "ModelInfer", request(inputs=[tensor(datatype="INT32")], raw=[F4])),
    ("bad datatype", "ModelInfer", request(inputs=[tensor(datatype="FLOAT")], raw=[F4])),
    ("empty datatype", "ModelInfer", request(inputs=[tensor(datatype="")], raw=[F4])),
    ("lowercase datatype", "ModelInfer", request(inputs=[tensor(datatype="fp32")], raw=[F4])),
    ("shape -1", "ModelInfer", request(inputs=[tensor(shape=(-1,))], raw=[F4])),
    ("shape -2", "ModelInfer", request(inputs=[tensor(shape=(-2,))], raw=[F4])),
    ("shape empty", "ModelInfer", request(inputs=[tensor(shape=())], raw=[F4[:4]])),
    ("shape 2x2", "ModelInfer", request(inputs=[tensor(shape=(2, 2))], raw=[F4])),
    ("shape 0", "ModelInfer", request(inputs=[tensor(shape=(0,))], raw=[b""])),
    ("shape 0 no raw", "ModelInfer", request(inputs=[tensor(shape=(0,))])),
    ("shape huge", "ModelInfer", request(inputs=[tensor(shape=(2**40,))], raw=[F4])),
    ("shape overflow", "ModelInfer", request(inputs=[tensor(shape=(2**32, 2**32))], raw=[F4])),
    ("empty name", "ModelInfer", request(inputs=[tensor(name="")], raw=[F4])),
    ("unknown input", "ModelInfer", request(inputs=[tensor(name="X")], raw=[F4])),
    ("dup input", "ModelInfer", request(inputs=[tensor(), tensor()], raw=[F4, F4])),
    ("unknown output", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output("NOPE")])),
    ("empty output name", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output("")])),
    ("dup output", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(), output()])),
    ("two unknown outputs", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output("Z"), output("A")])),
    ("class 2", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": 2})])),
    ("class 0", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": 0})])),
    ("class -1", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": -1})])),
    ("class 9", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": 9})])),
    ("class str", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": "2"})])),
    ("class bool", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": True})])),
    ("class double", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": 2.0})])),
    ("class uint64", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"classification": 2**63})])),
    ("out binary_data", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"binary_data": True})])),
    ("out unknown param", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"x": 1})])),
    ("param priority", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"priority": 1})),
    ("param priority str", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"priority": "1"})),
    ("param priority neg", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"priority": -1})),
    ("param timeout", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"timeout": 1000})),
    ("param timeout str", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"timeout": "x"})),
    ("param timeout double", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"timeout": 1.0})),
    ("param sequence_id", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_id": 5})),
    ("param sequence_start", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_start": True})),
    ("param sequence_start int", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_start": 1})),
    ("param sequence_end str", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_end": "true"})),
    ("param sequence_id bool", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_id": True})),
    ("param sequence_id double", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"sequence_id": 1.5})),
    ("param binary_data_output", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"binary_data_output": True})),
    ("param headers", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"headers": "x"})),
    ("param triton_", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"triton_x": 1})),
    ("param custom str", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"custom": "v"})),
    ("param custom double", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"custom": 0.5})),
    ("param custom uint64", "ModelInfer", request(inputs=[tensor()], raw=[F4], params={"custom": 2**63})),
    ("param unset", "ModelInfer", (lambda r: (r.parameters["unset"].Clear(), r)[1])(request(inputs=[tensor()], raw=[F4]))),
    ("in shm region only", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_region": "r"})])),
    ("in shm no region", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_byte_size": 16})])),
    ("in shm region int", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_region": 1, "shared_memory_byte_size": 16})])),
    ("in shm size str", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_region": "r", "shared_memory_byte_size": "16"})])),
    ("in shm unknown", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_region": "r", "shared_memory_byte_size": 16})])),
    ("in shm and raw", "ModelInfer", request(inputs=[with_params(tensor(), {"shared_memory_region": "r", "shared_memory_byte_size": 16})], raw=[F4])),
    ("in binary_data_size", "ModelInfer", request(inputs=[with_params(tensor(), {"binary_data_size": 16})], raw=[F4])),
    ("in unknown param", "ModelInfer", request(inputs=[with_params(tensor(), {"x": 1})], raw=[F4])),
    ("out shm unknown", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"shared_memory_region": "r", "shared_memory_byte_size": 16})])),
    ("out shm no size", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"shared_memory_region": "r"})])),
    ("out shm and class", "ModelInfer", request(inputs=[tensor()], raw=[F4], outputs=[output(params={"shared_memory_region": "r", "shared_memory_byte_size": 16, "classification": 1})])),
    ("bool raw", "ModelInfer", request("identity_bool", inputs=[tensor(datatype="BOOL", shape=(2,))], raw=[b"\x01\x00"])),
    ("bool raw 2", "ModelInfer", request("identity_bool", inputs=[tensor(datatype="BOOL", shape=(2,))], raw=[b"\x02\x00"])),
    ("bool contents", "ModelInfer", request("identity_bool", inputs=[tensor(datatype="BOOL", shape=(2,), bool_contents=[True, False])])),
    ("fp16 contents", "ModelInfer", request("identity_fp16", inputs=[tensor(datatype="FP16", shape=(1,), fp32_contents=[1.0])])),
    ("fp16 raw", "ModelInfer", request("identity_fp16", inputs=[tensor(datatype="FP16", shape=(2,))], raw=[b"\x00\x3c\x00\x40"])),
    ("bf16 raw", "ModelInfer", request("identity_bf16", inputs=[tensor(datatype="BF16", shape=(2,))], raw=[b"\x80\x3f\x00\x40"])),
    ("int8 contents", "ModelInfer", request("identity_int8", inputs=[tensor(datatype="INT8", shape=(2,), int_contents=[1, 300])])),
    ("uint8 contents", "ModelInfer", request("identity_uint8", inputs=[tensor(datatype="UINT8", shape=(2,), uint_contents=[1, 300])])),
    ("int16 contents", "ModelInfer", request("identity_int16", inputs=[tensor(datatype="INT16", shape=(2,), int_contents=[-1, 70000])])),
    ("int64 contents", "ModelInfer", request("identity_int64", inputs=[tensor(datatype="INT64", shape=(2,), int64_contents=[-1, 2**40])])),
    ("uint64 contents", "ModelInfer", request("identity_uint64", inputs=[tensor(datatype="UINT64", shape=(2,), uint64_contents=[1, 2**63])])),
    ("fp64 contents", "ModelInfer", request("identity_fp64", inputs=[tensor(datatype="FP64", shape=(2,), fp64_contents=[0.1, 1e300])])),
    ("bytes contents", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(2,), bytes_contents=[b"a", b""])])),
    ("bytes contents short", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(3,), bytes_contents=[b"a", b""])])),
    ("bytes raw", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(2,))], raw=[blob(b"ab", b"")])),
    ("bytes raw short count", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(3,))], raw=[blob(b"ab", b"")])),
    ("bytes raw long count", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(1,))], raw=[blob(b"ab", b"")])),
    ("bytes raw truncated len", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(1,))], raw=[b"\x05\x00"])),
    ("bytes raw truncated body", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(1,))], raw=[b"\x05\x00\x00\x00ab"])),
    ("bytes raw empty", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(1,))], raw=[b""])),
    ("simple ok", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16)), tensor("INPUT1", "INT32", (1, 16))], raw=[I16, I16])),
    ("simple batch -1", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (-1, 16)), tensor("INPUT1", "INT32", (-1, 16))], raw=[I16, I16])),
    ("simple batch -2", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (-2, 16)), tensor("INPUT1", "INT32", (-2, 16))], raw=[I16, I16])),
    ("simple batch 2**32+1", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (2**32 + 1, 16)), tensor("INPUT1", "INT32", (2**32 + 1, 16))], raw=[I16, I16])),
    ("simple dim -2", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, -2)), tensor("INPUT1", "INT32", (1, 16))], raw=[I16, I16])),
    ("shape -2 x 2", "ModelInfer", request("identity_int8", inputs=[tensor(datatype="INT8", shape=(-2,))], raw=[b"ab"])),
    ("bytes shape -2", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(-2,))], raw=[blob(b"ab")])),
    ("bytes shape overflow", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(2**62,))], raw=[blob(b"ab")])),
    ("bytes truncated of 2", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(2,))], raw=[b"\x05\x00\x00\x00ab"])),
    ("bytes truncated of 3", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(3,))], raw=[blob(b"x") + b"\x05\x00\x00\x00ab"])),
    ("bytes 3 of 1", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(1,))], raw=[blob(b"a", b"b", b"c")])),
    ("bytes short len then more", "ModelInfer", request("identity_bytes", inputs=[tensor(datatype="BYTES", shape=(2,))], raw=[blob(b"a") + b"\x01\x00"])),
    ("simple no batch", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (16,)), tensor("INPUT1", "INT32", (16,))], raw=[I16, I16])),
    ("simple batch 9", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (9, 16)), tensor("INPUT1", "INT32", (9, 16))], raw=[I16 * 9, I16 * 9])),
    ("simple batch mismatch", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16)), tensor("INPUT1", "INT32", (2, 16))], raw=[I16, I16 * 2])),
    ("simple one input", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16))], raw=[I16])),
    ("simple raw for one", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16)), tensor("INPUT1", "INT32", (1, 16))], raw=[I16])),
    ("simple mixed", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16), int_contents=list(range(16))), tensor("INPUT1", "INT32", (1, 16))], raw=[I16])),
    ("simple one output", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16)), tensor("INPUT1", "INT32", (1, 16))], raw=[I16, I16], outputs=[output("OUTPUT1")])),
    ("simple class", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (1, 16)), tensor("INPUT1", "INT32", (1, 16))], raw=[I16, I16], outputs=[output("OUTPUT0", {"classification": 3})])),
    ("simple class batch 2", "ModelInfer", request("simple", inputs=[tensor("INPUT0", "INT32", (2, 16)), tensor("INPUT1", "INT32", (2, 16))], raw=[I16 * 2, I16 * 2], outputs=[output("OUTPUT0", {"classification": 2})])),
    ("simple_string numbers", "ModelInfer", request("simple_string", inputs=[tensor("INPUT0", "BYTES", (1, 16), bytes_contents=[b"1"] * 16), tensor("INPUT1", "BYTES", (1, 16), bytes_contents=[b"2"] * 16)])),
    ("simple_string text", "ModelInfer", request("simple_string", inputs=[tensor("INPUT0", "BYTES", (1, 16), bytes_contents=[b"x"] * 16), tensor("INPUT1", "BYTES", (1, 16), bytes_contents=[b"2"] * 16)])),
    ("seq no id", "ModelInfer", request("simple_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])])),
    ("seq start", "ModelInfer", request("simple_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": 424242, "sequence_start": True, "sequence_end": True})),
    ("seq not started", "ModelInfer", request("simple_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": 434343})),
    ("seq id 0 start", "ModelInfer", request("simple_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": 0, "sequence_start": True})),
    ("seq negative id", "ModelInfer", request("simple_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": -5, "sequence_start": True, "sequence_end": True})),
    ("str seq int id", "ModelInfer", request("simple_string_dyna_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": 5, "sequence_start": True, "sequence_end": True})),
    ("str seq str id", "ModelInfer", request("simple_string_dyna_sequence", inputs=[tensor("INPUT", "INT32", (1, 1), int_contents=[1])], params={"sequence_id": "s1", "sequence_start": True, "sequence_end": True})),
    ("ModelMetadata unknown", "ModelMetadata", pb.ModelMetadataRequest(name="nope")),
    ("ModelMetadata empty", "ModelMetadata", pb.ModelMetadataRequest(name="")),
    ("ModelMetadata version 2", "ModelMetadata", pb.ModelMetadataRequest(name="simple", version="2")),
    ("ModelMetadata version x", "ModelMetadata", pb.ModelMetadataRequest(name="simple", version="x")),
    ("ModelReady unknown", "ModelReady", pb.ModelReadyRequest(name="nope")),
    ("ModelReady version 2", "ModelReady", pb.ModelReadyRequest(name="simple", version="2")),
    ("ModelReady version x", "ModelReady", pb.ModelReadyRequest(name="simple", version="x")),
    ("ModelReady empty", "ModelReady", pb.ModelReadyRequest(name="")),
    ("ModelConfig unknown", "ModelConfig", pb.ModelConfigRequest(name="nope")),
    ("ModelConfig version 2", "ModelConfig", pb.ModelConfigRequest(name="simple", version="2")),
    ("ModelStatistics unknown", "ModelStatistics", pb.ModelStatisticsRequest(name="nope")),
    ("ModelStatistics version 2", "ModelStatistics", pb.ModelStatisticsRequest(name="simple", version="2")),
    ("ModelStatistics version x", "ModelStatistics", pb.ModelStatisticsRequest(name="simple", version="x")),
    ("ModelStatistics version only", "ModelStatistics", pb.ModelStatisticsRequest(name="", version="1")),
    ("RepositoryModelLoad", "RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="simple")),
    ("RepositoryModelUnload", "RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="simple")),
    ("RepositoryIndex repo", "RepositoryIndex", pb.RepositoryIndexRequest(repository_name="x")),
    ("SysShmStatus unknown", "SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="nope")),
    ("SysShmRegister empty", "SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest()),
    ("SysShmRegister no key", "SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="r", byte_size=16)),
    ("SysShmRegister missing key", "SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="r", key="/diff_absent_object", byte_size=16)),
    ("SysShmRegister zero size", "SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="r", key="/diff_absent_object", byte_size=0)),
    ("SysShmUnregister unknown", "SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest(name="nope")),
    ("SysShmUnregister all", "SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest()),
    ("CudaShmStatus unknown", "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="nope")),
    ("CudaShmRegister empty", "CudaSharedMemoryRegister", pb.CudaSharedMemoryRegisterRequest(name="r")),
    ("CudaShmUnregister unknown", "CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest(name="nope")),
    ("TraceSetting get", "TraceSetting", pb.TraceSettingRequest()),
    ("TraceSetting unknown model", "TraceSetting", pb.TraceSettingRequest(model_name="nope")),
    ("LogSettings get", "LogSettings", pb.LogSettingsRequest()),
]


def trace_update(name, *values):
    r = pb.TraceSettingRequest()
    r.settings[name].value.extend(values)
    return r


def log_update(name, value):
    r = pb.LogSettingsRequest()
    field = {bool: "bool_param", int: "uint32_param", str: "string_param"}[type(value)]
    setattr(r.settings[name], field, value)
    return r


cases += [
    ("trace bad level", "TraceSetting", trace_update("trace_level", "LOUD")),
    ("trace rate x", "TraceSetting", trace_update("trace_rate", "x")),
    ("trace rate two", "TraceSetting", trace_update("trace_rate", "1", "2")),
    ("trace unknown", "TraceSetting", trace_update("nope", "1")),
    ("trace count -2", "TraceSetting", trace_update("trace_count", "-2")),
    ("log info str", "LogSettings", log_update("log_info", "yes")),
    ("log verbose bool", "LogSettings", log_update("log_verbose_level", True)),
    ("log format bad", "LogSettings", log_update("log_format", "xml")),
    ("log unknown", "LogSettings", log_update("nope", True)),
]

for label, method, message in cases:
    check(label, method, message)
# Every inference again, alone on a stream (ModelStreamInfer), where errors travel in responses.
for label, method, message in cases:
    if method == "ModelInfer":
        check(f"stream {label}", "ModelStreamInfer", message)
print(f"{diffs} differences of {total}")
