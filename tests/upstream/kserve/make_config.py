#!/usr/bin/env python3
"""Write the sidecar's configuration for KServe's ModelServer (tests/upstream/kserve/server.py).

Usage: make_config.py --grpc-port Q --workdir DIR > sidecar.yaml

Every model of ../contracts.py is listed under backend.models (the ModelServer's gRPC has no
RepositoryIndex, so the sidecar cannot list them itself), each with:

* `config`: its Triton model configuration from the catalog, set over the one the sidecar
  synthesizes from the ModelServer's metadata (the ModelServer has no configuration endpoint):
  max_batch_size, exact dims, the classifier's label file and the sequence batching;
* `sequence: sidecar` for the sequence models: the ModelServer has no sequence batcher, so
  the sidecar runs it and adds the control tensors (START, END, READY, CORRID) as inputs;
* `labels` for the classifier: the sidecar classifies, from DIR/labels.txt (written here).

`staging_shm_bytes: 0`: the ModelServer has no system shared memory extension.
Standard library only (the output is YAML in its JSON-compatible flow form).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contracts  # noqa: E402  (tests/upstream/contracts.py)


def sidecar_config(grpc_port: int, labels_path: str) -> str:
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
    for name, config in contracts.configs().items():
        entry = {"name": name, "config": config}
        if "sequence_batching" in config:
            entry["sequence"] = "sidecar"
        if any(o.get("label_filename") for o in config["output"]):
            entry["labels"] = {
                o["name"]: labels_path for o in config["output"] if o.get("label_filename")
            }
        lines.append(f"    - {json.dumps(entry)}")
    return "\n".join(lines) + "\n"


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc-port", type=int, required=True, help="the ModelServer's gRPC port")
    parser.add_argument(
        "--workdir", type=Path, required=True, help="where to write labels.txt (absolute path)"
    )
    args = parser.parse_args(argv[1:])
    args.workdir.mkdir(parents=True, exist_ok=True)
    labels = args.workdir.resolve() / "labels.txt"
    labels.write_text(contracts.LABELS)
    sys.stdout.write(sidecar_config(args.grpc_port, str(labels)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
