"""Conformance tests that cannot pass with KServe's ModelServer as the sidecar's upstream.

Loaded by tests/conformance/conftest.py when INFERGATE_BACKEND=upstream-kserve
(tests/upstream/run-kserve.sh). Patterns are `file.py::test name` (fnmatch; `[[]` is a
literal `[`), each with the behaviour observed from the ModelServer itself.
"""

LABEL = "upstream KServe ModelServer 0.21.0"

# The sidecar forwards a BF16 tensor as V2 gRPC ModelInferRequest
# {inputs: [{name: "INPUT0", datatype: "BF16", shape: [...]}], raw_input_contents: [<bytes>]}.
# The ModelServer refuses it before any model code runs: InferRequest.from_grpc calls
# get_content(datatype, contents) for every input, which knows no BF16 (nor does its NumPy
# codec, kserve.utils.numpy_codec.to_np_dtype), and answers INVALID_ARGUMENT
# "invalid content type". The same request sent straight to the ModelServer gets the same answer.
# The sidecar passes it through as HTTP 400 / INVALID_ARGUMENT "invalid content type", so BF16
# never reaches identity_bf16 and every test that needs a BF16 inference cannot pass.
_NO_BF16 = (
    "the ModelServer cannot carry BF16: it refuses any BF16 input over V2 gRPC with "
    "INVALID_ARGUMENT \"invalid content type\" (kserve.protocol.infer_type.get_content has no "
    "BF16 branch) before the model runs, so identity_bf16 never answers"
)

SKIPS = {
    # repeat_int32 is the built-in catalog's decoupled model; make_triton_repo.py mirrors it for
    # Triton, but contracts.py (this server's catalog) has none: the server has no decoupled
    # (many responses per request) models in the V2 protocol.
    "test_decoupled.py::*": (
        "KServe's ModelServer serves no decoupled model: repeat_int32 is not in its catalog "
        "(tests/upstream/contracts.py)"
    ),
    "test_generate.py::*decoupled*": (
        "KServe's ModelServer serves no decoupled model: repeat_int32 is not in its catalog "
        "(tests/upstream/contracts.py)"
    ),
    "test_infer_grpc.py::test_custom_identity_int32_like_memory_growth_test[[]*]": (
        "custom_identity_int32 is mirrored for Triton only (make_triton_repo.py), not in "
        "this server's catalog (tests/upstream/contracts.py)"
    ),
    "test_datatypes.py::test_http_binary_roundtrip[[]BF16]": _NO_BF16,
    "test_datatypes.py::test_grpc_roundtrip[[]BF16]": _NO_BF16,
    "test_datatypes.py::test_http_binary_bytes_preserved[[]BF16-*": _NO_BF16,
    # The sidecar checks an output's JSON form once the upstream has answered; the ModelServer's
    # refusal of the BF16 input comes first.
    "test_datatypes.py::test_json_output_rejected_for_half_types[[]*-BF16]": _NO_BF16,
    # The classification check of a BF16 output, too, needs the upstream's answer first.
    "test_classification.py::test_unsupported_datatype[[]BF16]": _NO_BF16,
}
