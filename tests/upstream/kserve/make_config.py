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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contracts  # noqa: E402  (tests/upstream/contracts.py)


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
    sys.stdout.write(contracts.sidecar_config(args.grpc_port, lambda _model, _file: str(labels)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
