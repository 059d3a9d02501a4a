"""Conformance tests that cannot pass through MLServer (INFERGATE_BACKEND=upstream-mlserver).

tests/conformance/conftest.py loads LABEL and SKIPS from here; each key is
"file.py::test name" as an fnmatch pattern ("[[]" matches a literal "["), each value the
reason, as observed against the version in LABEL (tests/upstream/run-mlserver.sh).

Only MLServer's own limitations belong here. Wrong behaviour of the sidecar in front of
MLServer is not skipped: it fails.
"""

LABEL = "upstream MLServer 1.7.1"

# mlserver.types.Datatype has the V2 datatypes except BF16. MLServer's gRPC front end unpacks
# raw_input_contents with `struct` by datatype (mlserver/raw.py) before any model code runs, so
# every BF16 request fails inside MLServer: gRPC INTERNAL "'BF16' is not a valid Datatype",
# which the sidecar passes on as HTTP 500 / gRPC INTERNAL. (The model itself is listed: the
# sidecar configuration declares its BF16 tensors, since MLServer's metadata cannot.)
_NO_BF16 = (
    "MLServer has no BF16 datatype: it fails every BF16 inference before the model runs, with "
    "gRPC INTERNAL \"'BF16' is not a valid Datatype\" (mlserver/raw.py unpacks raw tensor "
    "contents by mlserver.types.Datatype, which lacks BF16)"
)

SKIPS = {
    # repeat_int32 is the built-in catalog's decoupled model; make_triton_repo.py mirrors it for
    # Triton, but contracts.py (this server's catalog) has none: the server has no decoupled
    # (many responses per request) models in the V2 protocol.
    "test_decoupled.py::*": (
        "MLServer serves no decoupled model: repeat_int32 is not in its catalog "
        "(tests/upstream/contracts.py)"
    ),
    "test_generate.py::*decoupled*": (
        "MLServer serves no decoupled model: repeat_int32 is not in its catalog "
        "(tests/upstream/contracts.py)"
    ),
    "test_infer_grpc.py::test_custom_identity_int32_like_memory_growth_test[[]*]": (
        "custom_identity_int32 is mirrored for Triton only (make_triton_repo.py), not in "
        "this server's catalog (tests/upstream/contracts.py)"
    ),
    "test_datatypes.py::test_http_binary_roundtrip[[]BF16]": _NO_BF16,
    "test_datatypes.py::test_grpc_roundtrip[[]BF16]": _NO_BF16,
    "test_datatypes.py::test_http_binary_bytes_preserved[[]BF16-*": _NO_BF16,
    # The sidecar refuses BF16 in JSON (or classifies) only once the model has produced the
    # output; MLServer fails the inference first, so the answer is its 500, not the 400.
    "test_datatypes.py::test_json_output_rejected_for_half_types[[]*-BF16]": _NO_BF16
    + "; the sidecar's 400 for a BF16 JSON output needs that output",
    "test_classification.py::test_unsupported_datatype[[]BF16]": _NO_BF16
    + "; the sidecar's 400 for classifying a BF16 output needs that output",
}
