#!/usr/bin/env python3
"""Write an MLServer model repository with the contracts of the sidecar's built-in catalog, and
the sidecar configuration that fronts it.

Usage: make_repo.py OUTDIR [--grpc-port N] [--http-port N] [--sidecar-config FILE]

OUTDIR gets:
  settings.json                server settings: loopback, the given ports, metrics off, models
                               in the main process (parallel_workers 0, so that sequence state
                               lives in one process), gRPC messages up to 2 GiB
  infergate_runtimes.py        the MLModel classes (a copy of runtimes.py beside this script)
  <model>/model-settings.json  one per model: implementation, version "1", metadata
  classifier/labels.txt        the classifier's labels (the sidecar classifies)

The 22 models are those of sidecar/src/backend/builtin/catalog.rs (the arithmetic is
compute.rs's): simple, simple_string, simple_identity, identity_<dtype> for the 14 datatypes,
classifier, simple_sequence, simple_dyna_sequence, sequence_accumulator and
simple_string_dyna_sequence.

MLServer has no model-configuration endpoint, so the sidecar configuration carries, per model,
the built-in model's configuration (`config`: max_batch_size, inputs, outputs, sequence
batching) over what the sidecar synthesizes from MLServer's metadata, and `sequence: sidecar`
for the sequence models: the sidecar runs their sequence batcher and adds the control tensors
as inputs. MLServer has no system shared memory: `staging_shm_bytes: 0`.

MLServer's datatypes do not include BF16 (mlserver.types.Datatype), so identity_bf16 declares
no tensors in its MLServer metadata; its BF16 contract comes from the sidecar configuration.

Standard library only; OUTDIR is created (existing model folders are replaced).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME_MODULE = "infergate_runtimes"

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
CONFIG_TO_PROTOCOL = {v: k for k, v in DTYPES.items()}

# Datatypes mlserver.types.Datatype knows (it has no BF16).
MLSERVER_DTYPES = set(DTYPES) - {"BF16"}

LABELS = "label0\nlabel1\nlabel2\nlabel3\n"


# --------------------------------------------------------------------------- configurations
# The built-in configurations in the JSON form of GET /v2/models/<m>/config.
def tensor(name: str, data_type: str, dims, label_filename: str = "") -> dict:
    out = {"name": name, "data_type": data_type, "dims": list(dims)}
    if label_filename:
        out["label_filename"] = label_filename
    return out


def io_config(max_batch_size: int, inputs, outputs) -> dict:
    return {"max_batch_size": max_batch_size, "input": inputs, "output": outputs}


def control(name: str, kind: str, data_type: str = "") -> dict:
    spec = {"kind": kind}
    if data_type:
        spec["data_type"] = data_type
    else:
        spec["int32_false_true"] = [0, 1]
    return {"name": name, "control": [spec]}


START = control("START", "CONTROL_SEQUENCE_START")
END = control("END", "CONTROL_SEQUENCE_END")
READY = control("READY", "CONTROL_SEQUENCE_READY")
CORRID_U64 = control("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_UINT64")
CORRID_STRING = control("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_STRING")
OLDEST = {"max_candidate_sequences": 64, "max_queue_delay_microseconds": 1000}


def sequence_config(controls, oldest: bool) -> dict:
    batching = {"max_sequence_idle_microseconds": 5000000, "control_input": controls}
    if oldest:
        batching["oldest"] = dict(OLDEST)
    config = io_config(
        8, [tensor("INPUT", "TYPE_INT32", [1])], [tensor("OUTPUT", "TYPE_INT32", [1])]
    )
    config["sequence_batching"] = batching
    return config


def catalog() -> dict:
    """name -> (runtime class, configuration); the order of catalog.rs."""
    int16 = [tensor(n, "TYPE_INT32", [16]) for n in ("INPUT0", "INPUT1")]
    out16 = [tensor(n, "TYPE_INT32", [16]) for n in ("OUTPUT0", "OUTPUT1")]
    str16 = [tensor(n, "TYPE_STRING", [16]) for n in ("INPUT0", "INPUT1")]
    strout16 = [tensor(n, "TYPE_STRING", [16]) for n in ("OUTPUT0", "OUTPUT1")]
    models = {
        "simple": ("AddSubInt32", io_config(8, int16, out16)),
        "simple_string": ("AddSubString", io_config(8, str16, strout16)),
        "simple_identity": (
            "Identity",
            io_config(
                8,
                [tensor("INPUT0", "TYPE_STRING", [-1])],
                [tensor("OUTPUT0", "TYPE_STRING", [-1])],
            ),
        ),
        "simple_sequence": ("SequenceSimple", sequence_config([START, READY], oldest=False)),
        "simple_dyna_sequence": (
            "SequenceDyna",
            sequence_config([START, END, READY, CORRID_U64], oldest=True),
        ),
        "sequence_accumulator": (
            "Accumulate",
            sequence_config([START, END, READY, CORRID_U64], oldest=False),
        ),
        "simple_string_dyna_sequence": (
            "AccumulateStringId",
            sequence_config([START, END, READY, CORRID_STRING], oldest=True),
        ),
        "classifier": (
            "Identity",
            io_config(
                8,
                [tensor("INPUT0", "TYPE_FP32", [4])],
                [tensor("OUTPUT0", "TYPE_FP32", [4], label_filename="labels.txt")],
            ),
        ),
    }
    for dtype, config_type in DTYPES.items():
        models[f"identity_{dtype.lower()}"] = (
            "Identity",
            io_config(0, [tensor("INPUT0", config_type, [-1])], [tensor("OUTPUT0", config_type, [-1])]),
        )
    return models


# --------------------------------------------------------------------------- MLServer side
def metadata_tensors(tensors, max_batch_size: int):
    """MLServer metadata for configuration tensors: protocol datatype, batch dimension first."""
    out = []
    for t in tensors:
        datatype = CONFIG_TO_PROTOCOL[t["data_type"]]
        if datatype not in MLSERVER_DTYPES:
            return []  # MLServer cannot declare it; the sidecar configuration does
        shape = ([-1] if max_batch_size > 0 else []) + t["dims"]
        out.append({"name": t["name"], "datatype": datatype, "shape": shape})
    return out


def model_settings(name: str, runtime: str, config: dict) -> dict:
    mbs = config["max_batch_size"]
    return {
        "name": name,
        "implementation": f"{RUNTIME_MODULE}.{runtime}",
        "platform": "mlserver",
        "versions": ["1"],
        "parameters": {"version": "1"},
        # The clients' tensors only: the sequence controls are added by the sidecar.
        "inputs": metadata_tensors(config["input"], mbs),
        "outputs": metadata_tensors(config["output"], mbs),
    }


def server_settings(http_port: int, grpc_port: int) -> dict:
    return {
        "debug": False,
        "host": "127.0.0.1",
        "http_port": http_port,
        "grpc_port": grpc_port,
        # Both directions; gRPC's own default (4 MiB received) is too small for large tensors.
        "grpc_max_message_length": 2**31 - 1,
        # No metrics server (it would need a third port); the sidecar has its own metrics.
        "metrics_endpoint": None,
        # Models run in the server process: a sequence model's state must see every step.
        "parallel_workers": 0,
        "load_models_at_startup": True,
    }


def write_repository(outdir: Path, http_port: int, grpc_port: int) -> list:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "settings.json").write_text(
        json.dumps(server_settings(http_port, grpc_port), indent=2) + "\n"
    )
    shutil.copyfile(HERE / "runtimes.py", outdir / f"{RUNTIME_MODULE}.py")
    names = []
    for name, (runtime, config) in catalog().items():
        model_dir = outdir / name
        if model_dir.exists():
            shutil.rmtree(model_dir)
        model_dir.mkdir()
        (model_dir / "model-settings.json").write_text(
            json.dumps(model_settings(name, runtime, config), indent=2) + "\n"
        )
        if any(o.get("label_filename") for o in config["output"]):
            (model_dir / "labels.txt").write_text(LABELS)
        names.append(name)
    return names


# --------------------------------------------------------------------------- sidecar side
def sidecar_config(outdir: Path, grpc_port: int) -> str:
    """The sidecar's YAML configuration (JSON flow values are valid YAML)."""
    lines = [
        "server: {host: 127.0.0.1, http_port: 0, grpc_port: 0, metrics_port: 0, admin_port: 0, "
        "allow_client_shm: true, log_format: json}",
        "backend:",
        "  kind: upstream",
        f"  url: grpc://127.0.0.1:{grpc_port}",
        "  probe_interval_seconds: 1",
        "  staging_shm_bytes: 0",
        "  models:",
    ]
    for name, (_, config) in sorted(catalog().items()):
        entry = {"name": name, "config": config}
        labelled = [o for o in config["output"] if o.get("label_filename")]
        if labelled:
            entry["labels"] = {
                o["name"]: str((outdir / name / o["label_filename"]).resolve()) for o in labelled
            }
        if "sequence_batching" in config:
            entry["sequence"] = "sidecar"
        lines.append(f"    - {json.dumps(entry)}")
    return "\n".join(lines) + "\n"


def main(argv) -> int:
    parser = argparse.ArgumentParser(
        description="Write an MLServer repository with the sidecar's built-in model contracts."
    )
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--grpc-port", type=int, default=8081, help="MLServer's gRPC port")
    parser.add_argument("--http-port", type=int, default=8080, help="MLServer's HTTP port")
    parser.add_argument(
        "--sidecar-config", type=Path, help="also write the sidecar configuration to this file"
    )
    args = parser.parse_args(argv[1:])
    names = write_repository(args.outdir, args.http_port, args.grpc_port)
    print(f"wrote {len(names)} models to {args.outdir}", file=sys.stderr)
    if args.sidecar_config:
        args.sidecar_config.write_text(sidecar_config(args.outdir, args.grpc_port))
        print(f"wrote {args.sidecar_config}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
