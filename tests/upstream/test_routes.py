"""Which protocol each inference call to Triton goes over (run by run-triton.sh after the
conformance suite, against the same two servers), read from the sidecar's
`infergate_upstream_calls_total{protocol=...}` counters.

- grpc: every call over gRPC; http: every call over REST;
- grpc+rest (`rest_url` beside the gRPC url): calls that carry at most 64 KiB of tensor data over
  the socket (inputs sent inline, outputs not placed in a region) go over REST, larger ones over
  gRPC, with the same answers either way; tensors in the staging pool do not count.

Environment: INFERGATE_HTTP_URL, INFERGATE_GRPC_URL, INFERGATE_METRICS_URL (the sidecar) and
INFERGATE_UPSTREAM_PROTOCOL (how run-triton.sh configured it).
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
MODE = os.environ.get("INFERGATE_UPSTREAM_PROTOCOL", "grpc")

# With run-triton.sh's staging_min_bytes of 0 the inputs travel through the staging pool, and so
# do outputs of a known element size; BYTES outputs never do.
SMALL = b"x" * 16
LARGE = b"x" * (100 << 10)
STAGED_ELEMENTS = 64 << 10  # FP32: 256 KiB each way, all of it in the staging pool


def calls():
    text = requests.get(f"http://{METRICS}/metrics", timeout=10).text
    counts = {}
    for protocol in ("grpc", "rest"):
        pattern = rf'^infergate_upstream_calls_total\{{protocol="{protocol}"\}} (\d+)$'
        found = re.search(pattern, text, re.MULTILINE)
        assert found, f"infergate_upstream_calls_total{{protocol=\"{protocol}\"}} not in the metrics"
        counts[protocol] = int(found.group(1))
    return counts


def infer(protocol, model, datatype, data):
    """One call to `model` with `data` as INPUT0, binary over HTTP; OUTPUT0 back."""
    module, url = (httpclient, HTTP) if protocol == "http" else (grpcclient, GRPC)
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("INPUT0", list(data.shape), datatype)
    if protocol == "http":
        tensor.set_data_from_numpy(data, binary_data=True)
    else:
        tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor]).as_numpy("OUTPUT0")


def assert_one_call_over(route, before, after):
    other = "grpc" if route == "rest" else "rest"
    assert after[route] - before[route] == 1, (before, after)
    assert after[other] == before[other], (before, after)


def expected_route(element):
    if MODE == "grpc":
        return "grpc"
    if MODE == "http":
        return "rest"
    # 16 bytes in and out go over REST. 100 KiB in goes through the staging pool, but as much is
    # expected back over the socket (a BYTES output is never staged; its size, unknown
    # beforehand, is taken as the largest input's): over the 64 KiB limit.
    return "rest" if element is SMALL else "grpc"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("element", [SMALL, LARGE], ids=["16B", "100KiB"])
def test_each_call_goes_over_the_protocol_its_size_picks(protocol, element):
    before = calls()
    answer = infer(protocol, "identity_bytes", "BYTES", np.array([element], dtype=np.object_))
    after = calls()
    assert answer[0] == element
    assert_one_call_over(expected_route(element), before, after)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_call_with_its_tensors_in_the_staging_pool_counts_only_what_crosses_the_socket(protocol):
    data = np.arange(STAGED_ELEMENTS, dtype=np.float32)
    before = calls()
    answer = infer(protocol, "identity_fp32", "FP32", data)
    after = calls()
    np.testing.assert_array_equal(answer, data)
    # 256 KiB each way, far over the limit, but none of it on the socket to the upstream.
    assert_one_call_over("grpc" if MODE == "grpc" else "rest", before, after)
