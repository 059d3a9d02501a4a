"""KServe's own Python client (kserve.InferenceRESTClient, InferenceGRPCClient) against the sidecar.

Usage: python client_check.py HTTP_HOST:PORT GRPC_HOST:PORT   (with the kserve package installed)

Run by tests/upstream/run-kserve.sh with the ModelServer's venv, against the sidecar in front of
the ModelServer: what a KServe user's code does, unmodified. Prints each check, exits 1 on the first
failure. Not checked: the REST client's is_server_live / is_server_ready, which parse a JSON body
({"live": ...}) that the protocol says is empty and that neither Triton nor the sidecar sends (its
gRPC client's are checked, and the REST is_model_ready, which reads the status only).
"""

import asyncio
import sys

import grpc
import httpx
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

HTTP, GRPC = sys.argv[1], sys.argv[2]
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)
FLOATS = np.random.default_rng(7).random(100_000, dtype=np.float32)


def check(label, condition, detail=""):
    if not condition:
        print(f"FAIL {label} {detail}")
        sys.exit(1)
    print(f"ok   {label}")


def simple_inputs(binary):
    inputs = []
    for name, value in (("INPUT0", A), ("INPUT1", B)):
        tensor = InferInput(name, list(value.shape), "INT32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return inputs


def string_inputs():
    inputs = []
    for name, value in (("INPUT0", A), ("INPUT1", B)):
        tensor = InferInput(name, list(value.shape), "BYTES")
        tensor.set_data_from_numpy(np.vectorize(lambda v: str(v).encode(), otypes=[object])(value))
        inputs.append(tensor)
    return inputs


def fp32_input(count, binary):
    tensor = InferInput("INPUT0", [count], "FP32")
    tensor.set_data_from_numpy(FLOATS[:count], binary_data=binary)
    return tensor


def outputs(response):
    return {o.name: o.as_numpy() for o in response.outputs}


async def rest():
    base = f"http://{HTTP}"
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=1, timeout=30))
    try:
        check("REST is_model_ready(simple)", await client.is_model_ready(base, "simple") is True)
        check("REST is_model_ready(unknown)", await client.is_model_ready(base, "no_such_model") is False)
        for binary in (False, True):
            request = InferRequest(model_name="simple", infer_inputs=simple_inputs(binary), request_id="kserve-1")
            response = await client.infer(base, request, model_name="simple")
            out = outputs(response)
            check(f"REST infer simple (binary={binary})",
                  np.array_equal(out["OUTPUT0"], A + B) and np.array_equal(out["OUTPUT1"], A - B)
                  and response.id == "kserve-1", out)
        response = await client.infer(
            base, InferRequest(model_name="simple_string", infer_inputs=string_inputs()), model_name="simple_string")
        sums = [int(v) for v in outputs(response)["OUTPUT0"].reshape(-1)]
        check("REST infer simple_string", sums == (A + B).reshape(-1).tolist(), sums)
        for count, binary in ((100_000, True), (1_000, False)):
            request = InferRequest(model_name="identity_fp32", infer_inputs=[fp32_input(count, binary)])
            response = await client.infer(base, request, model_name="identity_fp32")
            check(f"REST identity_fp32 {count} (binary={binary})",
                  np.array_equal(outputs(response)["OUTPUT0"], FLOATS[:count]))
        try:
            await client.infer(base, InferRequest(model_name="no_such_model", infer_inputs=[fp32_input(4, True)]),
                               model_name="no_such_model")
            check("REST unknown model fails", False)
        except httpx.HTTPStatusError as e:
            check("REST unknown model: 404 with the server's message",
                  e.response.status_code == 404 and "Request for unknown model: 'no_such_model'" in str(e), e)
    finally:
        await client.close()


async def grpc_checks():
    client = InferenceGRPCClient(GRPC, timeout=30)
    try:
        check("gRPC is_server_live", await client.is_server_live() is True)
        check("gRPC is_server_ready", await client.is_server_ready() is True)
        check("gRPC is_model_ready(simple)", await client.is_model_ready("simple") is True)
        response = await client.infer(InferRequest(model_name="simple", infer_inputs=simple_inputs(False),
                                                   request_id="kserve-2"))
        out = outputs(response)
        check("gRPC infer simple", np.array_equal(out["OUTPUT0"], A + B)
              and np.array_equal(out["OUTPUT1"], A - B) and response.id == "kserve-2", out)
        response = await client.infer(InferRequest(model_name="simple_string", infer_inputs=string_inputs()))
        sums = [int(v) for v in outputs(response)["OUTPUT0"].reshape(-1)]
        check("gRPC infer simple_string", sums == (A + B).reshape(-1).tolist(), sums)
        response = await client.infer(InferRequest(model_name="identity_fp32",
                                                   infer_inputs=[fp32_input(100_000, False)]))
        check("gRPC identity_fp32 100000", np.array_equal(outputs(response)["OUTPUT0"], FLOATS))
        try:
            await client.infer(InferRequest(model_name="no_such_model", infer_inputs=[fp32_input(4, False)]))
            check("gRPC unknown model fails", False)
        except grpc.aio.AioRpcError as e:
            check("gRPC unknown model: NOT_FOUND with the server's message",
                  e.code() == grpc.StatusCode.NOT_FOUND
                  and e.details() == "Request for unknown model: 'no_such_model' is not found", e)
    finally:
        await client.close()


asyncio.run(rest())
asyncio.run(grpc_checks())
print("KServe's client: every check passed")
