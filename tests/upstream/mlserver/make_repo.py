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

The 23 models are those of sidecar/src/backend/builtin/catalog.rs (the arithmetic is
compute.rs's): simple, simple_int8, simple_string, simple_identity, identity_<dtype> for the 14 datatypes,
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

# The 23 contracts, shared with the KServe run (tests/upstream/contracts.py).
sys.path.insert(0, str(HERE.parent))
from contracts import CONFIG_TO_PROTOCOL, DTYPES, LABELS, configs, sidecar_config  # noqa: E402

# Datatypes mlserver.types.Datatype knows (it has no BF16).
MLSERVER_DTYPES = set(DTYPES) - {"BF16"}

# The MLModel class (runtimes.py) of each model; every other model is an identity.
RUNTIMES = {
    "simple": "AddSubInt32",
    "simple_int8": "AddSubInt8",
    "simple_string": "AddSubString",
    "simple_sequence": "SequenceSimple",
    "simple_dyna_sequence": "SequenceDyna",
    "sequence_accumulator": "Accumulate",
    "simple_string_dyna_sequence": "AccumulateStringId",
}


def catalog() -> dict:
    """name -> (runtime class, configuration in the JSON form of GET /v2/models/<m>/config)."""
    return {name: (RUNTIMES.get(name, "Identity"), config) for name, config in configs().items()}


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
        args.sidecar_config.write_text(
            sidecar_config(
                args.grpc_port, lambda model, file: str((args.outdir / model / file).resolve())
            )
        )
        print(f"wrote {args.sidecar_config}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
