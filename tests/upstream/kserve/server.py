#!/usr/bin/env python3
"""KServe's Python ModelServer serving the sidecar's built-in model contracts over V2.

Usage: server.py --http-port P --grpc-port Q [ModelServer flags...]

Starts one `kserve.ModelServer` (REST on P, gRPC on Q) with one `kserve.Model` per contract of
../contracts.py: simple, simple_int8, simple_string, simple_identity, classifier, identity_<dtype> for the 14
datatypes and the four sequence models. The arithmetic is that of
sidecar/src/backend/builtin/compute.rs, so the conformance suite (tests/conformance) can run
against the sidecar in front of this server (tests/upstream/run-kserve.sh).

The ModelServer has no sequence batcher: the sidecar runs the sequences (`sequence: sidecar`
in its configuration) and adds the control tensors START, END, READY and CORRID to the inputs
it sends, exactly as Triton's sequence batcher feeds a model. The sequence models read those
inputs and keep their per-sequence state keyed by CORRID.

Flags after --http-port/--grpc-port are the ModelServer's own (e.g. --max_threads 8).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import threading
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contracts  # noqa: E402  (tests/upstream/contracts.py)

# The largest gRPC message either way. The ModelServer's default (8 MiB) is smaller than the
# tensors the conformance suite sends; the sidecar accepts up to 2 GiB.
MAX_MESSAGE_BYTES = 2**31 - 1


def parse_args(argv: list) -> tuple:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http-port", type=int, required=True, help="REST port")
    parser.add_argument("--grpc-port", type=int, required=True, help="V2 gRPC port")
    return parser.parse_known_args(argv)


# The ModelServer reads its own flags from sys.argv when kserve is imported (module-level
# argparse in kserve.model_server), and its gRPC message limits only from there: hand it the
# flags it knows before importing it.
ARGS, MODEL_SERVER_FLAGS = parse_args(sys.argv[1:])
sys.argv = [
    sys.argv[0],
    "--grpc_max_send_message_length", str(MAX_MESSAGE_BYTES),
    "--grpc_max_receive_message_length", str(MAX_MESSAGE_BYTES),
    *MODEL_SERVER_FLAGS,
]

import kserve  # noqa: E402
from kserve.errors import InvalidInput  # noqa: E402
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse  # noqa: E402

DECIMAL = re.compile(r"[+-]?[0-9]+")


def _wrap(value: int, bits: int) -> int:
    """Two's-complement truncation to `bits` bits (Rust's `as i32` / wrapping i64)."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


class ContractModel(kserve.Model):
    """A model whose metadata comes from its contract and whose outputs from `compute`."""

    def __init__(self, name: str, config: dict):
        super().__init__(name)
        self.config = config
        self.output_types = {t["name"]: t["datatype"] for t in self.get_output_types()}
        self.load()

    def get_input_types(self) -> list:
        return contracts.metadata_tensors(self.config, "input")

    def get_output_types(self) -> list:
        return contracts.metadata_tensors(self.config, "output")

    def compute(self, inputs: dict) -> dict:
        """{input name: array} -> {output name: array}."""
        raise NotImplementedError

    def predict(self, payload: InferRequest, headers: dict = None) -> InferResponse:
        inputs = {t.name: t.as_numpy() for t in payload.inputs}
        results = self.compute(inputs)
        # Only the outputs the request names, when it names any (as Triton answers).
        wanted = [o.name for o in payload.request_outputs or []] or list(results)
        outputs = []
        for name in wanted:
            if name not in results:
                raise InvalidInput(f"unexpected inference output '{name}' for model '{self.name}'")
            array = results[name]
            output = InferOutput(
                name=name, shape=list(array.shape), datatype=self.output_types[name]
            )
            # Encoded here, so every datatype leaves in raw_output_contents: given NumPy `data`,
            # InferResponse.to_grpc tests the array's truth value when any output is FP16, a
            # ValueError for more than one element.
            output.set_data_from_numpy(array, binary_data=True)
            outputs.append(output)
        return InferResponse(
            response_id=payload.id or "", model_name=self.name, infer_outputs=outputs
        )


def _input(inputs: dict, name: str, model: str) -> np.ndarray:
    try:
        return inputs[name]
    except KeyError:
        raise InvalidInput(f"model '{model}' expects input '{name}'") from None


class Identity(ContractModel):
    """OUTPUT0 = INPUT0: same datatype, shape and bytes (the identity models, classifier)."""

    def compute(self, inputs):
        return {"OUTPUT0": _input(inputs, "INPUT0", self.name)}


class AddSubInt32(ContractModel):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over INT32, wrapping on overflow."""

    def compute(self, inputs):
        a = _input(inputs, "INPUT0", self.name).astype(np.int64)
        b = _input(inputs, "INPUT1", self.name).astype(np.int64)
        # int64 arithmetic, then the low 32 bits: i32 wrapping_add / wrapping_sub.
        return {"OUTPUT0": (a + b).astype(np.int32), "OUTPUT1": (a - b).astype(np.int32)}


class AddSubInt8(ContractModel):
    """The same over INT8 (simple_int8), wrapping on overflow."""

    def compute(self, inputs):
        a = _input(inputs, "INPUT0", self.name).astype(np.int64)
        b = _input(inputs, "INPUT1", self.name).astype(np.int64)
        return {"OUTPUT0": (a + b).astype(np.int8), "OUTPUT1": (a - b).astype(np.int8)}


class AddSubString(ContractModel):
    """The same arithmetic over BYTES elements holding decimal integers (as text).

    An element that is not a decimal i32 (after trimming white space) fails the request with
    the sidecar's built-in text, as INVALID_ARGUMENT.
    """

    def _parse(self, element, name: str) -> int:
        raw = element if isinstance(element, bytes) else str(element).encode()
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = None
        if text is not None and DECIMAL.fullmatch(text):
            value = int(text)
            if -(2**31) <= value < 2**31:
                return value
        shown = raw.decode("utf-8", errors="replace")
        raise InvalidInput(
            f"model '{self.name}' expects decimal integers in input '{name}', got '{shown}'"
        )

    def compute(self, inputs):
        a = _input(inputs, "INPUT0", self.name)
        b = _input(inputs, "INPUT1", self.name)
        total = np.empty(a.shape, dtype=np.object_)
        difference = np.empty(a.shape, dtype=np.object_)
        for index in np.ndindex(a.shape):
            x = self._parse(a[index], "INPUT0")
            y = self._parse(b[index], "INPUT1")
            total[index] = str(_wrap(x + y, 32)).encode()
            difference[index] = str(_wrap(x - y, 32)).encode()
        return {"OUTPUT0": total, "OUTPUT1": difference}


class SequenceModel(ContractModel):
    """A sequence model fed by the sidecar's sequence batcher.

    Each request carries, besides INPUT, the control inputs of the configuration (START, END,
    READY, CORRID), one row per sequence in the batch. `step` gives one row's value; the output
    row has INPUT's row shape, filled with it, as INT32 (truncated like the sidecar's `as i32`).
    """

    def __init__(self, name: str, config: dict):
        super().__init__(name, config)
        self.controls = [c["name"] for c in config["sequence_batching"]["control_input"]]
        # Running sums by sequence id. The ModelServer calls a synchronous predict on its event
        # loop, one request at a time; the lock keeps each step whole should that change.
        self.sums: dict = {}
        self.lock = threading.Lock()

    def step(self, x: int, start: int, end: int, ready: int, corrid) -> int:
        raise NotImplementedError

    def compute(self, inputs):
        data = _input(inputs, "INPUT", self.name)
        controls = {name: _input(inputs, name, self.name) for name in self.controls}
        out = np.empty(data.shape, dtype=np.int32)
        for row in range(data.shape[0]):
            value = self.step(
                int(_first(data, row)),
                int(_first(controls.get("START"), row, 0)),
                int(_first(controls.get("END"), row, 0)),
                int(_first(controls.get("READY"), row, 0)),
                _first(controls.get("CORRID"), row, None),
            )
            out[row] = _wrap(value, 32)
        return {"OUTPUT": out}


def _first(tensor, row: int, default=None):
    """First element of one batch row of a tensor (`default` when there is none)."""
    if tensor is None:
        return default
    values = tensor[row].reshape(-1)
    return values[0] if values.size else default


class SequenceSimple(SequenceModel):
    """OUTPUT = (INPUT + START) * READY (stateless; Triton's example contract)."""

    def step(self, x, start, end, ready, corrid):
        return (x + start) * ready


class SequenceDyna(SequenceModel):
    """OUTPUT = (INPUT + START + END * CORRID) * READY, CORRID being the UINT64 sequence id."""

    def step(self, x, start, end, ready, corrid):
        # The sidecar multiplies by the id read as an i64, wrapping.
        corrid = _wrap(int(corrid or 0), 64)
        return (x + start + _wrap(end * corrid, 64)) * ready


class Accumulate(SequenceModel):
    """Running sum of INPUT per sequence: START resets it, END forgets it."""

    string_id = False

    def step(self, x, start, end, ready, corrid):
        key = bytes(corrid) if isinstance(corrid, (bytes, np.bytes_)) else int(corrid or 0)
        with self.lock:
            total = 0 if start else self.sums.get(key, 0)
            total += x
            self.sums[key] = total
            if end:
                del self.sums[key]
        if end and self.string_id:
            total += _id_value(key)
        return total


class AccumulateStringId(Accumulate):
    """The running sum; the END response also adds the integer value of the string id."""

    string_id = True


def _id_value(key) -> int:
    """The integer a string sequence id spells (0 when it is not a decimal i64)."""
    text = key.decode("utf-8", errors="replace") if isinstance(key, bytes) else str(key)
    if not DECIMAL.fullmatch(text):
        return 0
    value = int(text)
    return value if -(2**63) <= value < 2**63 else 0


IMPLEMENTATIONS = {
    "simple": AddSubInt32,
    "simple_int8": AddSubInt8,
    "simple_string": AddSubString,
    "simple_identity": Identity,
    "classifier": Identity,
    "simple_sequence": SequenceSimple,
    "simple_dyna_sequence": SequenceDyna,
    "sequence_accumulator": Accumulate,
    "simple_string_dyna_sequence": AccumulateStringId,
}


def models() -> list:
    return [
        IMPLEMENTATIONS.get(name, Identity)(name, config)
        for name, config in contracts.configs().items()
    ]


def main() -> None:
    kserve.logging.configure_logging()
    # The ModelServer logs every gRPC call at INFO (the sidecar probes readiness every second)
    # and every request's latency: keep warnings and errors only.
    for name in ("kserve", "kserve.trace", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    server = kserve.ModelServer(
        http_port=ARGS.http_port,
        grpc_port=ARGS.grpc_port,
        enable_latency_logging=False,
        # Stop within seconds on SIGTERM (the restart check stops and starts this server).
        grace_period=2,
    )
    print(
        f"kserve {metadata.version('kserve')} ModelServer: http {ARGS.http_port}, "
        f"grpc {ARGS.grpc_port}, {len(contracts.configs())} models",
        file=sys.stderr,
        flush=True,
    )
    server.start(models())


if __name__ == "__main__":
    main()
