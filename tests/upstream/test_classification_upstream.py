"""Classification through the sidecar in front of Triton (run by run-triton.sh after the
conformance suite, against the same two servers): every answer equals Triton's own.

Triton lists the classification extension, so the sidecar, which run-triton.sh configures with no
labels, leaves classification to it: Triton knows the labels of its `label_filename`, the sidecar
does not. The answers, label text included, and the errors must be Triton's, over both protocols,
whether the sidecar reaches Triton over gRPC or REST.

Environment: INFERGATE_HTTP_URL and INFERGATE_GRPC_URL (the sidecar), INFERGATE_TRITON_HTTP_URL
and INFERGATE_TRITON_GRPC_URL (Triton itself).
"""

import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

SIDECAR = (os.environ["INFERGATE_HTTP_URL"], os.environ["INFERGATE_GRPC_URL"])
TRITON = (os.environ["INFERGATE_TRITON_HTTP_URL"], os.environ["INFERGATE_TRITON_GRPC_URL"])

# The classifier's input: four scores per row, with ties and a negative score.
ROWS = np.array([[0.5, 3.25, -1.0, 3.25], [9.0, 0.0, 2.5, 7.75], [1.0, 1.0, 1.0, 1.0]],
                dtype=np.float32)


def classify(urls, protocol, batch, k, binary=True, model="classifier", output="OUTPUT0"):
    """(answer, None) or (None, error text): the classes `k` of `batch` rows."""
    data = ROWS[:batch]
    if protocol == "http":
        client = httpclient.InferenceServerClient(urls[0])
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, binary_data=binary)
        wanted = httpclient.InferRequestedOutput(output, binary_data=binary, class_count=k)
    else:
        client = grpcclient.InferenceServerClient(urls[1])
        tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        wanted = grpcclient.InferRequestedOutput(output, class_count=k)
    try:
        result = client.infer(model, [tensor], outputs=[wanted])
    except InferenceServerException as e:
        return None, e.message()
    return result.as_numpy(output).tolist(), None


@pytest.mark.parametrize("protocol,binary", [("http", True), ("http", False), ("grpc", True)],
                         ids=["http-binary", "http-json", "grpc"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("k", [1, 2, 4, 9])
def test_classes_and_labels_are_tritons(protocol, binary, batch, k):
    theirs = classify(TRITON, protocol, batch, k, binary)
    ours = classify(SIDECAR, protocol, batch, k, binary)
    assert theirs[1] is None, theirs
    assert ours == theirs
    # Triton's labels are there: the sidecar has none of its own for this model.
    assert all(entry.count(b":" if isinstance(entry, bytes) else ":") == 2
               for row in ours[0] for entry in row), ours


def test_an_output_without_labels_has_index_only_as_triton_answers():
    # identity_fp32 has no label file: "value:index" only, from Triton.
    def answer(urls):
        client = grpcclient.InferenceServerClient(urls[1])
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(ROWS[1])
        wanted = grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)
        return client.infer("identity_fp32", [tensor], outputs=[wanted]).as_numpy("OUTPUT0").tolist()

    assert answer(SIDECAR) == answer(TRITON) == [b"9.000000:0", b"7.750000:3"]
