"""gRPC requests compressed with gzip or deflate (tritonclient's `compression_algorithm`): Triton
accepts both and answers uncompressed by default."""

import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from support import SIMPLE_A, SIMPLE_B, assert_serving


@pytest.fixture(autouse=True)
def _still_serving(http_url):
    yield
    assert_serving(http_url)


def _inputs():
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(SIMPLE_A)
    inputs[1].set_data_from_numpy(SIMPLE_B)
    return inputs


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_infer(grpc_client, algorithm):
    result = grpc_client.infer("simple", _inputs(), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), SIMPLE_A - SIMPLE_B)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_large_infer(grpc_client, algorithm):
    """A megabyte of FP32 that compresses well: the limit holds for what it inflates to, which here
    fits."""
    x = np.zeros(1 << 18, dtype=np.float32)
    i = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    result = grpc_client.infer("identity_fp32", [i], compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_stream(grpc_url, algorithm):
    client = grpcclient.InferenceServerClient(grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)),
                        compression_algorithm=algorithm)
    try:
        client.async_stream_infer("simple", _inputs())
        result, error = answers.get(timeout=30)
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SIMPLE_A + SIMPLE_B)
    finally:
        client.stop_stream()
        client.close()


def test_compressed_metadata_call(grpc_stub):
    """Any RPC of the service may be compressed, not only inference."""
    response = grpc_stub.ServerMetadata(service_pb2.ServerMetadataRequest(),
                                        compression=grpc.Compression.Gzip)
    assert response.name


def test_answers_are_not_compressed_unless_configured(grpc_url):
    """The client accepts gzip; the server still answers uncompressed (Triton's default)."""
    channel = grpc.insecure_channel(grpc_url, compression=grpc.Compression.Gzip)
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ServerLive",
        request_serializer=service_pb2.ServerLiveRequest.SerializeToString,
        response_deserializer=service_pb2.ServerLiveResponse.FromString,
    )
    response, info = call.with_call(service_pb2.ServerLiveRequest())
    assert response.live
    encoding = dict(info.initial_metadata()).get("grpc-encoding", "identity")
    assert encoding == "identity", info.initial_metadata()
    channel.close()
