#!/usr/bin/env python3
"""Sends the same requests to Triton and to the sidecar and prints where their answers differ.

Usage: tests/tools/diff_against_triton.py TRITON_HOST:PORT SIDECAR_HOST:PORT [LABEL_SUBSTRING...]

Both servers must serve the built-in catalog's models (Triton: ../shared/reference/triton/models,
client shared memory allowed). About 150 REST requests, well-formed and not: JSON shapes and
types, binary framing, datatypes, classification, shared-memory parameters, the other routes.
Prints each difference (status and body of both) and a count; an informational tool, it always
exits 0. Differences that are on purpose are listed in docs/compatibility.md; a finding worth
keeping becomes a conformance test, which then also runs against Triton (INFERGATE_ORACLE).
A request that makes Triton stop answering ends the run (Triton 2.51 dies on a few inputs).
"""

import http.client
import json
import sys


def address(text):
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


A, B = address(sys.argv[1]), address(sys.argv[2])


def req(addr, method, path, body=None, headers=None):
    c = http.client.HTTPConnection(*addr, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, data, r.getheader("Content-Type")
    except Exception as e:
        return "EXC", repr(e).encode(), None
    finally:
        c.close()


diffs = 0
total = 0
ONLY = sys.argv[3:]


def check(label, method, path, body=None, headers=None):
    global diffs, total
    if ONLY and not any(o in label for o in ONLY):
        return
    total += 1
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    a = req(A, method, path, body, headers)
    b = req(B, method, path, body, headers)
    same = a[0] == b[0] and a[1] == b[1]
    if "/generate" in path:
        # Byte for byte, with the content type: a stream of events is not JSON.
        same = same and a[2] == b[2]
    elif not same and a[0] == b[0] and a[0] == 200:
        try:
            same = json.loads(a[1]) == json.loads(b[1])
        except Exception:
            pass
    if not same:
        diffs += 1
        print(f"--- {label}: {method} {path} body={body[:200] if body else body!r}")
        print(f"  triton : {a[0]} {a[2]} {a[1][:300]!r}")
        print(f"  sidecar: {b[0]} {b[2]} {b[1][:300]!r}")
    if a[0] == "EXC":
        print("Triton stopped answering after", label)
        sys.exit(0)


def inp(name="INPUT0", dt="FP32", shape=[4], data=[1, 2, 3, 4], **kw):
    d = {"name": name, "datatype": dt, "shape": shape, "data": data}
    d.update(kw)
    return d


M = "/v2/models/identity_fp32/infer"
cases = [
    ("empty body", "POST", M, b""),
    ("not json", "POST", M, b"hello"),
    ("array", "POST", M, []),
    ("null", "POST", M, b"null"),
    ("no inputs", "POST", M, {}),
    ("inputs not array", "POST", M, {"inputs": {}}),
    ("inputs empty", "POST", M, {"inputs": []}),
    ("input not object", "POST", M, {"inputs": [1]}),
    ("missing name", "POST", M, {"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]}),
    ("missing datatype", "POST", M, {"inputs": [{"name": "INPUT0", "shape": [1], "data": [1]}]}),
    ("missing shape", "POST", M, {"inputs": [{"name": "INPUT0", "datatype": "FP32", "data": [1]}]}),
    ("missing data", "POST", M, {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1]}]}),
    ("name int", "POST", M, {"inputs": [inp(name=5)]}),
    ("datatype int", "POST", M, {"inputs": [inp(dt=5)]}),
    ("bad datatype", "POST", M, {"inputs": [inp(dt="FLOAT")]}),
    ("wrong datatype", "POST", M, {"inputs": [inp(dt="INT32")]}),
    ("shape str", "POST", M, {"inputs": [inp(shape="4")]}),
    ("shape neg", "POST", M, {"inputs": [inp(shape=[-1], data=[])]}),
    ("shape float", "POST", M, {"inputs": [inp(shape=[4.0])]}),
    ("shape 2d", "POST", M, {"inputs": [inp(shape=[2, 2])]}),
    ("shape empty", "POST", M, {"inputs": [inp(shape=[], data=[1])]}),
    ("shape zero", "POST", M, {"inputs": [inp(shape=[0], data=[])]}),
    ("shape empty no data", "POST", M, {"inputs": [inp(shape=[], data=[])]}),
    ("shape empty data obj", "POST", M, {"inputs": [inp(shape=[], data={})]}),
    ("shape zero data obj", "POST", M, {"inputs": [inp(shape=[0], data={})]}),
    ("shape zero bad datatype", "POST", M, {"inputs": [inp(shape=[0], dt="FLOAT", data=[])]}),
    ("shape zero then negative", "POST", M, {"inputs": [inp(shape=[0, -5], data=[])]}),
    ("shape negative then zero", "POST", M, {"inputs": [inp(shape=[-5, 0], data=[])]}),
    ("shape zero fp16", "POST", "/v2/models/identity_fp16/infer",
     {"inputs": [inp(shape=[0], dt="FP16", data=[])]}),
    ("data short", "POST", M, {"inputs": [inp(data=[1, 2, 3])]}),
    ("data long", "POST", M, {"inputs": [inp(data=[1, 2, 3, 4, 5])]}),
    ("data nested", "POST", M, {"inputs": [inp(data=[[1, 2], [3, 4]])]}),
    ("data nested uneven", "POST", M, {"inputs": [inp(data=[[1, 2, 3], [4]])]}),
    ("data str", "POST", M, {"inputs": [inp(data=["1", "2", "3", "4"])]}),
    ("data bool", "POST", M, {"inputs": [inp(data=[True, False, True, False])]}),
    ("data null", "POST", M, {"inputs": [inp(data=[None, 1, 2, 3])]}),
    ("data obj", "POST", M, {"inputs": [inp(data={"a": 1})]}),
    ("data scalar", "POST", M, {"inputs": [inp(shape=[1], data=1)]}),
    ("unknown input", "POST", M, {"inputs": [inp(name="X")]}),
    ("dup input", "POST", M, {"inputs": [inp(), inp()]}),
    ("unknown output", "POST", M, {"inputs": [inp()], "outputs": [{"name": "NOPE"}]}),
    ("output no name", "POST", M, {"inputs": [inp()], "outputs": [{}]}),
    ("outputs not array", "POST", M, {"inputs": [inp()], "outputs": {}}),
    ("dup output", "POST", M, {"inputs": [inp()], "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}),
    ("id int", "POST", M, {"id": 5, "inputs": [inp()]}),
    ("id str", "POST", M, {"id": "abc", "inputs": [inp()]}),
    ("params not obj", "POST", M, {"parameters": [1], "inputs": [inp()]}),
    ("params nested obj", "POST", M, {"parameters": {"a": {"b": 1}}, "inputs": [inp()]}),
    ("params null", "POST", M, {"parameters": {"a": None}, "inputs": [inp()]}),
    ("params float", "POST", M, {"parameters": {"a": 1.5}, "inputs": [inp()]}),
    ("params arr", "POST", M, {"parameters": {"a": [1]}, "inputs": [inp()]}),
    ("binary_data_output true", "POST", M, {"parameters": {"binary_data_output": True}, "inputs": [inp()]}),
    ("binary_data_output str", "POST", M, {"parameters": {"binary_data_output": "true"}, "inputs": [inp()]}),
    (
        "out binary_data str",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]},
    ),
    (
        "class str",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "2"}}]},
    ),
    (
        "class neg",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -1}}]},
    ),
    (
        "class 0",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}]},
    ),
    (
        "class 2",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}]},
    ),
    (
        "class 100",
        "POST",
        M,
        {"inputs": [inp()], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 100}}]},
    ),
    (
        "class + binary",
        "POST",
        M,
        {
            "inputs": [inp()],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2, "binary_data": True}}],
        },
    ),
    ("input binary_data_size on json", "POST", M, {"inputs": [inp(parameters={"binary_data_size": 16})]}),
    (
        "input shm bad",
        "POST",
        M,
        {"inputs": [inp(parameters={"shared_memory_region": "nope", "shared_memory_byte_size": 16})]},
    ),
    ("input shm no size", "POST", M, {"inputs": [inp(parameters={"shared_memory_region": "nope"})]}),
    (
        "output shm bad",
        "POST",
        M,
        {
            "inputs": [inp()],
            "outputs": [
                {
                    "name": "OUTPUT0",
                    "parameters": {"shared_memory_region": "nope", "shared_memory_byte_size": 16},
                }
            ],
        },
    ),
    (
        "seq id on non-seq",
        "POST",
        M,
        {"parameters": {"sequence_id": 5, "sequence_start": True}, "inputs": [inp()]},
    ),
    ("priority", "POST", M, {"parameters": {"priority": 1}, "inputs": [inp()]}),
    ("timeout", "POST", M, {"parameters": {"timeout": 1000}, "inputs": [inp()]}),
    ("nan str", "POST", M, {"inputs": [inp(data=["NaN", 1, 2, 3])]}),
    (
        "big num",
        "POST",
        M,
        b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1e39,-1e39]}]}',
    ),
    (
        "denorm",
        "POST",
        M,
        b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1e-46,1e-39]}]}',
    ),
    ("trailing garbage", "POST", M, json.dumps({"inputs": [inp()]}) + "xyz"),
    ("trailing ws", "POST", M, json.dumps({"inputs": [inp()]}) + "  \n"),
    (
        "dup key",
        "POST",
        M,
        b'{"inputs":[{"name":"INPUT0","name":"INPUT0","datatype":"FP32","shape":[1],"data":[1]}]}',
    ),
    ("GET infer", "GET", M, None),
    ("PUT infer", "PUT", M, json.dumps({"inputs": [inp()]})),
    ("version 1", "POST", "/v2/models/identity_fp32/versions/1/infer", {"inputs": [inp()]}),
    ("version 2", "POST", "/v2/models/identity_fp32/versions/2/infer", {"inputs": [inp()]}),
    ("version abc", "POST", "/v2/models/identity_fp32/versions/abc/infer", {"inputs": [inp()]}),
    ("version empty", "POST", "/v2/models/identity_fp32/versions//infer", {"inputs": [inp()]}),
    ("unknown model", "POST", "/v2/models/nope/infer", {"inputs": [inp()]}),
    ("model trailing slash", "POST", M + "/", {"inputs": [inp()]}),
]
for dt, val in [
    ("INT8", [127, -128, 128, -129]),
    ("UINT8", [0, 255, 256, -1]),
    ("INT16", [1, 2, 3, 4]),
    ("UINT32", [1, 2, 3, -4]),
    ("INT64", [1, 2, 3, 2**63]),
    ("UINT64", [1, 2, 3, 2**64]),
    ("FP16", [1.5, 70000, 2, 3]),
    ("BF16", [1.5, 1e39, 2, 3]),
    ("FP64", [1.5, 1e308, 2, 3]),
    ("BOOL", [True, False, 1, 0]),
    ("BOOL", [True, False, True, False]),
    ("BYTES", ["a", "b", "c", ""]),
    ("BYTES", [1, 2, 3, 4]),
    ("INT32", [1.5, 2, 3, 4]),
    ("INT32", [1e3, 2, 3, 4]),
    ("UINT16", [65535, 65536, 0, 1]),
]:
    cases.append(
        (
            f"dtype {dt} {val}",
            "POST",
            f"/v2/models/identity_{dt.lower()}/infer",
            {"inputs": [inp(dt=dt, data=val)]},
        )
    )
S = "/v2/models/simple/infer"


def sin(n, dt="INT32", shape=[1, 16], data=None):
    return inp(name=n, dt=dt, shape=shape, data=data if data is not None else list(range(16)))


cases += [
    ("simple ok", "POST", S, {"inputs": [sin("INPUT0"), sin("INPUT1")]}),
    ("simple one input", "POST", S, {"inputs": [sin("INPUT0")]}),
    ("simple wrong shape", "POST", S, {"inputs": [sin("INPUT0", shape=[16]), sin("INPUT1", shape=[16])]}),
    (
        "simple batch 2",
        "POST",
        S,
        {
            "inputs": [
                sin("INPUT0", shape=[2, 16], data=list(range(32))),
                sin("INPUT1", shape=[2, 16], data=list(range(32))),
            ]
        },
    ),
    (
        "simple batch 0",
        "POST",
        S,
        {"inputs": [sin("INPUT0", shape=[0, 16], data=[]), sin("INPUT1", shape=[0, 16], data=[])]},
    ),
    (
        "simple batch mismatch",
        "POST",
        S,
        {"inputs": [sin("INPUT0", shape=[2, 16], data=list(range(32))), sin("INPUT1")]},
    ),
    (
        "simple batch 9",
        "POST",
        S,
        {
            "inputs": [
                sin("INPUT0", shape=[9, 16], data=list(range(144))),
                sin("INPUT1", shape=[9, 16], data=list(range(144))),
            ]
        },
    ),
    (
        "simple one output",
        "POST",
        S,
        {"inputs": [sin("INPUT0"), sin("INPUT1")], "outputs": [{"name": "OUTPUT1"}]},
    ),
    (
        "simple overflow",
        "POST",
        S,
        {"inputs": [sin("INPUT0", data=[2**31 - 1] * 16), sin("INPUT1", data=[1] * 16)]},
    ),
    (
        "simple class",
        "POST",
        S,
        {
            "inputs": [sin("INPUT0"), sin("INPUT1")],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 3}}],
        },
    ),
    ("simple wrong dt", "POST", S, {"inputs": [sin("INPUT0", dt="FP32"), sin("INPUT1", dt="FP32")]}),
    (
        "simple_string ok",
        "POST",
        "/v2/models/simple_string/infer",
        {
            "inputs": [
                sin("INPUT0", dt="BYTES", data=[str(i) for i in range(16)]),
                sin("INPUT1", dt="BYTES", data=["1"] * 16),
            ]
        },
    ),
    (
        "simple_string nonnum",
        "POST",
        "/v2/models/simple_string/infer",
        {"inputs": [sin("INPUT0", dt="BYTES", data=["x"] * 16), sin("INPUT1", dt="BYTES", data=["1"] * 16)]},
    ),
]
for method, path, body in [
    ("GET", "/v2", None),
    ("GET", "/v2/", None),
    ("POST", "/v2", b"{}"),
    ("GET", "/v2/health/live", None),
    ("POST", "/v2/health/live", None),
    ("GET", "/v2/health/ready", None),
    ("GET", "/v2/models/identity_fp32", None),
    ("GET", "/v2/models/identity_fp32/versions/1", None),
    ("GET", "/v2/models/identity_fp32/versions/3", None),
    ("GET", "/v2/models/nope", None),
    ("GET", "/v2/models/nope/ready", None),
    ("GET", "/v2/models/identity_fp32/ready", None),
    ("GET", "/v2/models/identity_fp32/versions/7/ready", None),
    ("GET", "/v2/models/simple/config", None),
    ("GET", "/v2/models/nope/config", None),
    ("GET", "/v2/models/simple/versions/1/config", None),
    ("GET", "/v2/models/nope/stats", None),
    ("GET", "/v2/models/simple/versions/9/stats", None),
    ("POST", "/v2/repository/index", None),
    ("POST", "/v2/repository/index", b'{"ready":true}'),
    ("POST", "/v2/repository/index", b"[]"),
    ("POST", "/v2/repository/index", b'{"ready":"x"}'),
    ("GET", "/v2/repository/index", None),
    ("POST", "/v2/repository/models/nope/load", None),
    ("GET", "/v2/systemsharedmemory/status", None),
    ("GET", "/v2/systemsharedmemory/region/nope/status", None),
    ("POST", "/v2/systemsharedmemory/region/r/register", b"{}"),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key":"/nokey","offset":0,"byte_size":16}'),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key":5,"offset":0,"byte_size":16}'),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key":"/nokey","offset":-1,"byte_size":16}'),
    ("POST", "/v2/systemsharedmemory/region/r/register", b"not json"),
    ("POST", "/v2/systemsharedmemory/region/nope/unregister", None),
    ("POST", "/v2/systemsharedmemory/unregister", None),
    ("GET", "/v2/cudasharedmemory/status", None),
    ("POST", "/v2/cudasharedmemory/region/r/register", b"{}"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister", None),
    ("GET", "/v2/logging", None),
    ("POST", "/v2/logging", b'{"log_verbose_level":"x"}'),
    ("POST", "/v2/logging", b'{"nope":1}'),
    ("POST", "/v2/logging", b"[]"),
    ("GET", "/v2/trace/setting", None),
    ("GET", "/v2/models/simple/trace/setting", None),
    ("GET", "/nope", None),
    ("GET", "/v2/nope", None),
    ("GET", "/v2/models", None),
    ("GET", "/v2/models/", None),
    ("POST", "/v2/models/simple/generate", b"{}"),
    ("POST", "/v2/models/simple/generate_stream", b"{}"),
]:
    cases.append((f"route {method} {path} {body!r}", method, path, body))

# The generate extension: flat JSON objects whose keys are inputs or parameters, one answer
# (/generate) or Server-Sent Events (/generate_stream).
SIXTEEN = list(range(16))
GEN = [
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16}),
    ("simple", {"INPUT0": SIXTEEN + SIXTEEN, "INPUT1": [1] * 32}),
    ("simple", {"id": "42", "INPUT0": SIXTEEN, "INPUT1": [1] * 16, "temperature": 0.5}),
    ("simple", {"id": 42, "INPUT0": SIXTEEN, "INPUT1": [1] * 16}),
    ("simple", {"INPUT0": SIXTEEN}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 15}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [[1] * 16]}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": ["1"] * 16}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1.5] * 16}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": []}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": 1}),
    ("simple", {"parameters": {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "p": True}}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "parameters": 1}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "parameters": {"nested": {"a": 1}}}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "parameters": {"n": None}}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "p": [1]}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "p": None}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "big": 2**64 - 1, "neg": -1, "s": "x"}),
    ("simple", {"INPUT0": SIXTEEN, "INPUT1": [1] * 16, "sequence_id": 7, "priority": 1}),
    ("simple", '{"INPUT0": %s, "INPUT1": %s, "INPUT0": [0]}' % (SIXTEEN, [1] * 16)),
    ("simple", '{"INPUT0": %s, "parameters": {"INPUT0": [0]}}' % SIXTEEN),
    ("simple", {}),
    ("simple", []),
    ("simple", b""),
    ("simple", b"{"),
    ("simple", b"null"),
    ("nope", {"INPUT0": [1]}),
    ("identity_fp32", {"INPUT0": [1.5, 2, -3]}),
    ("identity_fp32", {"INPUT0": 2.5}),
    ("identity_fp32", {"INPUT0": [[1, 2], [3]]}),
    ("identity_fp32", {"INPUT0": [[]]}),
    ("identity_fp32", {"INPUT0": [True]}),
    ("identity_bool", {"INPUT0": [True, False]}),
    ("identity_bool", {"INPUT0": "true"}),
    ("identity_bytes", {"INPUT0": ["a", "bc"]}),
    ("identity_bytes", {"INPUT0": "hello"}),
    ("identity_bytes", {"INPUT0": [["a"], ["b", "c"]]}),
    ("identity_bytes", {"INPUT0": [1]}),
    ("identity_bytes", {"INPUT0": [""]}),
    ("identity_fp16", {"INPUT0": [1.0]}),
    ("identity_uint8", {"INPUT0": [-1]}),
    ("identity_int64", {"INPUT0": [2**63 - 1, -(2**63)]}),
    ("identity_fp64", {"INPUT0": [0.1, 1e300]}),
    ("simple_identity", {"INPUT0": ["x", "y", "z"]}),
    ("classifier", {"INPUT0": [1, 2, 3, 4]}),
    ("classifier", {"INPUT0": [1, 2, 3]}),
    ("custom_identity_int32", {"INPUT0": [5, 6]}),
    ("simple_sequence", {"INPUT": 1}),
    ("simple_sequence", {"INPUT": 1, "sequence_id": 5, "sequence_start": True}),
    ("repeat_int32", {"IN": [4, 5, 6], "DELAY": [0, 0, 0], "WAIT": 0}),
    ("repeat_int32", {"IN": [4], "DELAY": [0], "WAIT": 0}),
    ("repeat_int32", {"IN": [], "DELAY": [], "WAIT": 0}),
    ("repeat_int32", {"IN": [4, 5], "DELAY": [0], "WAIT": 0}),
]
for model, body in GEN:
    for route in ("generate", "generate_stream"):
        label = f"{route} {model} {body if isinstance(body, (str, bytes)) else json.dumps(body)[:120]}"
        cases.append((label, "POST", f"/v2/models/{model}/{route}", body))
cases.append(("generate gzip", "POST", "/v2/models/simple/generate", {"INPUT0": [1]}))
cases.append(("generate GET", "GET", "/v2/models/simple/generate", None))
cases.append(("generate version", "POST", "/v2/models/simple/versions/1/generate",
              {"INPUT0": SIXTEEN, "INPUT1": [1] * 16}))
cases.append(("generate_stream version 2", "POST", "/v2/models/simple/versions/2/generate_stream",
              {"INPUT0": SIXTEEN, "INPUT1": [1] * 16}))
for label, method, path, body in cases:
    headers = {"Content-Encoding": "gzip"} if label == "generate gzip" else None
    check(label, method, path, body, headers)
print(f"{diffs} differences of {total}")
