"""The 23 model contracts of the sidecar's built-in catalog, as Triton model configurations.

Shared by the KServe run (tests/upstream/run-kserve.sh) and the MLServer run
(mlserver/make_repo.py hands each configuration to the sidecar and derives MLServer's metadata
from it). For KServe it is one source for both sides:

* kserve/server.py publishes each model's V2 metadata from it (the ModelServer has no configuration
  endpoint, so metadata is all the sidecar can learn from it);
* kserve/make_config.py hands each configuration to the sidecar as `backend.models[].config`, so that
  the configuration the sidecar serves (and validates requests against) is exactly the one of
  sidecar/src/backend/builtin/catalog.rs: names, datatypes, dims, max_batch_size, sequence
  batching with its control inputs, strategy and idle timeout.

The configurations are in the JSON form of `GET /v2/models/<name>/config` (what the built-in
sidecar answers for its catalog), limited to the fields the catalog sets. Standard library only.
"""

from __future__ import annotations

import json

# Datatypes of identity_<dtype>: protocol name -> configuration name (catalog.rs: DataType::ALL).
DTYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BF16": "TYPE_BF16",
    "BYTES": "TYPE_STRING",
}
CONFIG_TO_PROTOCOL = {config: protocol for protocol, config in DTYPES.items()}

LABELS = "label0\nlabel1\nlabel2\nlabel3\n"


def _tensor(name: str, data_type: str, dims: list) -> dict:
    return {"name": name, "data_type": data_type, "dims": list(dims)}


def _add_sub(data_type: str) -> dict:
    return {
        "max_batch_size": 8,
        "input": [_tensor("INPUT0", data_type, [16]), _tensor("INPUT1", data_type, [16])],
        "output": [_tensor("OUTPUT0", data_type, [16]), _tensor("OUTPUT1", data_type, [16])],
    }


def _control(name: str, kind: str, data_type: str = "") -> dict:
    control = {"kind": kind}
    if data_type:
        control["data_type"] = data_type
    else:
        control["int32_false_true"] = [0, 1]
    return {"name": name, "control": [control]}


START = _control("START", "CONTROL_SEQUENCE_START")
END = _control("END", "CONTROL_SEQUENCE_END")
READY = _control("READY", "CONTROL_SEQUENCE_READY")
CORRID_U64 = _control("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_UINT64")
CORRID_STRING = _control("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_STRING")
OLDEST = {"max_candidate_sequences": 64, "max_queue_delay_microseconds": 1000}


def _sequence(controls: list, oldest: bool) -> dict:
    batching = {"max_sequence_idle_microseconds": 5000000, "control_input": controls}
    if oldest:
        batching["oldest"] = dict(OLDEST)
    return {
        "max_batch_size": 8,
        "sequence_batching": batching,
        "input": [_tensor("INPUT", "TYPE_INT32", [1])],
        "output": [_tensor("OUTPUT", "TYPE_INT32", [1])],
        # The catalog gives its sequence models one CPU instance explicitly.
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
    }


def configs() -> dict:
    """name -> Triton model configuration (JSON form), in the catalog's order."""
    out = {
        "simple": _add_sub("TYPE_INT32"),
        "simple_int8": _add_sub("TYPE_INT8"),
        "simple_string": _add_sub("TYPE_STRING"),
        "simple_identity": {
            "max_batch_size": 8,
            "input": [_tensor("INPUT0", "TYPE_STRING", [-1])],
            "output": [_tensor("OUTPUT0", "TYPE_STRING", [-1])],
        },
        "simple_sequence": _sequence([START, READY], oldest=False),
        "simple_dyna_sequence": _sequence([START, END, READY, CORRID_U64], oldest=True),
        "sequence_accumulator": _sequence([START, END, READY, CORRID_U64], oldest=False),
        "simple_string_dyna_sequence": _sequence(
            [START, END, READY, CORRID_STRING], oldest=True
        ),
        "classifier": {
            "max_batch_size": 8,
            "input": [_tensor("INPUT0", "TYPE_FP32", [4])],
            # The sidecar classifies; it reads the labels from backend.models[].labels.
            "output": [dict(_tensor("OUTPUT0", "TYPE_FP32", [4]), label_filename="labels.txt")],
        },
    }
    for protocol, config_type in DTYPES.items():
        out[f"identity_{protocol.lower()}"] = {
            "max_batch_size": 0,
            "input": [_tensor("INPUT0", config_type, [-1])],
            "output": [_tensor("OUTPUT0", config_type, [-1])],
        }
    return out


def metadata_tensors(config: dict, key: str) -> list:
    """V2 metadata tensors ({name, datatype, shape}) of a configuration's inputs or outputs.

    As Triton reports them: a batching model's shapes start with the variable batch dimension.
    """
    batch = [-1] if config.get("max_batch_size", 0) > 0 else []
    return [
        {
            "name": t["name"],
            "datatype": CONFIG_TO_PROTOCOL[t["data_type"]],
            "shape": batch + list(t["dims"]),
        }
        for t in config[key]
    ]


# The models the sidecar batches for the model server in the upstream runs.
SIDECAR_BATCHED = ("simple",)


def sidecar_config(grpc_port: int, labels_path) -> str:
    """The sidecar's YAML configuration in front of an upstream without a configuration endpoint
    or system shared memory: every model with its configuration, the sequence models run by the
    sidecar, labelled outputs read from labels_path(model, filename). JSON flow values are YAML."""
    lines = [
        "server: {host: 127.0.0.1, http_port: 0, grpc_port: 0, metrics_port: 0, admin_port: 0, "
        "allow_client_shm: true, model_control_mode: explicit, log_format: json}",
        "backend:",
        "  kind: upstream",
        f"  url: grpc://127.0.0.1:{grpc_port}",
        "  probe_interval_seconds: 1",
        "  staging_shm_bytes: 0",
        "  models:",
    ]
    for name, config in configs().items():
        config = dict(config)
        if name in SIDECAR_BATCHED:
            # The model server has no batcher: the sidecar's (no delay, so nothing waits; batches
            # form while the model is busy). tests/conformance/test_dynamic_batching.py.
            config["dynamic_batching"] = {}
        entry = {"name": name, "config": config}
        labelled = [o for o in config["output"] if o.get("label_filename")]
        if labelled:
            entry["labels"] = {o["name"]: labels_path(name, o["label_filename"]) for o in labelled}
        if "sequence_batching" in config:
            entry["sequence"] = "sidecar"
        lines.append(f"    - {json.dumps(entry)}")
    return "\n".join(lines) + "\n"
