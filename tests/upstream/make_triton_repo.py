#!/usr/bin/env python3
"""Write a Triton model repository with the same contracts as the sidecar's built-in catalog.

Usage: make_triton_repo.py OUTDIR

Every model uses Triton's python backend (config.pbtxt + 1/model.py). Names, datatypes, dims,
max_batch_size, sequence-batching controls and idle timeouts are those of
sidecar/src/backend/builtin/catalog.rs, and the arithmetic is that of
sidecar/src/backend/builtin/compute.rs, so the conformance suite
(tests/conformance) can run against the sidecar in front of this repository
(tests/upstream/run-triton.sh). The only additions are `backend: "python"` and an explicit
`instance_group [ { count: 1 kind: KIND_CPU } ]` (what the sidecar reports for its built-in
models anyway), so that Triton runs one CPU instance per model on any machine.

`repeat_int32`, the catalog's decoupled model, is here but not in contracts.py: KServe's
ModelServer and MLServer have no decoupled models. `custom_identity_int32` (an INT32 identity
that waits its `execute_delay_ms` parameter) is here too, for the same tests.

Two models are not in the catalog: `countdown_int32` (decoupled: IN = n gives n responses, OUT
= n, n-1, ..., 1, the last one carrying the FINAL flag with its data, as python-backend and LLM
models answer), used by test_decoupled_upstream.py, and `slow_identity` (FP32 identity that takes 2 s per batch, with a
dynamic batcher so that concurrent requests share the wait), used by fault_check.py to have
requests in flight inside the upstream when it is killed or the sidecar is stopped.

Standard library only; OUTDIR is created (existing model folders are replaced).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# Datatypes of identity_<dtype>: protocol name -> config name (one table for every upstream run).
from contracts import DTYPES  # noqa: E402  (beside this script)

LABELS = "label0\nlabel1\nlabel2\nlabel3\n"
CPU_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"

# --------------------------------------------------------------------------- configs
SIMPLE = """name: "simple"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
""" + CPU_INSTANCE

SIMPLE_INT8 = SIMPLE.replace('"simple"', '"simple_int8"').replace("TYPE_INT32", "TYPE_INT8")

SIMPLE_STRING = """name: "simple_string"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
""" + CPU_INSTANCE

SIMPLE_IDENTITY = """name: "simple_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
""" + CPU_INSTANCE

CLASSIFIER = """name: "classifier"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
""" + CPU_INSTANCE


REPEAT_INT32 = """name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
""" + CPU_INSTANCE


CUSTOM_IDENTITY_INT32 = """name: "custom_identity_int32"
backend: "python"
max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [ { key: "execute_delay_ms" value: { string_value: "0" } } ]
""" + CPU_INSTANCE


COUNTDOWN_INT32 = """name: "countdown_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
""" + CPU_INSTANCE

COUNTDOWN_INT32_PY = '''"""Decoupled: IN = n gives n responses OUT = n, n-1, ..., 1; the last carries the FINAL flag
with its data (no separate empty completion)."""
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            if n <= 0:
                sender.send(flags=FINAL)
                continue
            for value in range(n, 0, -1):
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[out]),
                    flags=FINAL if value == 1 else 0,
                )
        return None
'''


def identity_config(name: str, config_type: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
        + CPU_INSTANCE
    )


START = ("START", "kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]")
END = ("END", "kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ]")
READY = ("READY", "kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ]")
CORRID_U64 = ("CORRID", "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64")
CORRID_STRING = ("CORRID", "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING")
OLDEST = "oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 1000 }"


def sequence_config(name: str, strategy: str, controls) -> str:
    control_text = ",\n    ".join(
        f'{{ name: "{inp}" control [ {{ {ctl} }} ] }}' for inp, ctl in controls
    )
    strategy_line = f"  {strategy}\n" if strategy else ""
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        "sequence_batching {\n"
        "  max_sequence_idle_microseconds: 5000000\n"
        f"{strategy_line}"
        f"  control_input [\n    {control_text}\n  ]\n"
        "}\n"
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        + CPU_INSTANCE
    )


# --------------------------------------------------------------------------- model code
# Each model.py is self-contained (the python backend loads it by path).

IDENTITY_PY = '''"""OUTPUT0 = INPUT0: same datatype, shape and bytes (sidecar: Implementation::Identity)."""
import triton_python_backend_utils as pb_utils

# NumPy has no bfloat16: a BF16 tensor goes through DLPack, which the python backend maps
# to and from TYPE_BF16 without a copy into NumPy.
THROUGH_DLPACK = {through_dlpack}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if THROUGH_DLPACK:
                output = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor.to_dlpack())
            else:
                output = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''

SIMPLE_PY = '''"""OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over {DTYPE}, wrapping on overflow."""
import numpy as np
import triton_python_backend_utils as pb_utils


def _wide(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(np.int64)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = _wide(request, "INPUT0")
            b = _wide(request, "INPUT1")
            # int64 arithmetic, then the low bits: the same as Rust's wrapping_add/sub.
            total = (a + b).astype(np.{dtype})
            difference = (a - b).astype(np.{dtype})
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", total),
                        pb_utils.Tensor("OUTPUT1", difference),
                    ]
                )
            )
        return responses
'''


def simple_py(dtype: str) -> str:
    """The add/sub model over INT32 (simple) or INT8 (simple_int8)."""
    return SIMPLE_PY.replace("{DTYPE}", dtype.upper()).replace("{dtype}", dtype)


REPEAT_INT32_PY = '''"""Decoupled: one response per IN element (OUT = IN[i], IDX = i), each DELAY[i] ms after the
one before, the request complete WAIT ms after the last (sidecar: Implementation::Repeat, as
Triton's repeat backend). Each request is answered from a thread of its own, so that requests
overlap as they do in the repeat backend."""
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _shape(array):
    return "[" + ",".join(str(d) for d in array.shape) + "]"


def _answer(sender, values, delays, wait_ms):
    for index, (value, delay) in enumerate(zip(values, delays)):
        time.sleep(int(delay) / 1000.0)
        sender.send(
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]
            )
        )
    time.sleep(int(wait_ms) / 1000.0)
    sender.send(flags=FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            if values.shape != delays.shape:
                error = pb_utils.TritonError(
                    f"expected IN and DELAY shape to match, got {_shape(values)} and {_shape(delays)}"
                )
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            wait_ms = int(wait.reshape(-1)[0]) if wait.size else 0
            threading.Thread(
                target=_answer, args=(sender, values, delays, wait_ms), daemon=True
            ).start()
        return None
'''

DELAYED_IDENTITY_PY = '''"""OUTPUT0 = INPUT0, answered execute_delay_ms (a configuration parameter) after the
request (sidecar: Implementation::DelayedIdentity, as Triton's identity backend)."""
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        value = parameters.get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(value) / 1000.0 if value.strip().isdigit() else 0.0

    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(self.delay_s)
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            output = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''

SIMPLE_STRING_PY = '''"""The "simple" arithmetic over BYTES elements holding decimal integers (as text).

An element that is not a decimal i32 (after trimming white space) fails the request with
INVALID_ARG and the sidecar's built-in text.
"""
import re

import numpy as np
import triton_python_backend_utils as pb_utils

MODEL = "simple_string"
DECIMAL = re.compile(r"[+-]?[0-9]+")


def _wrap32(value):
    return (value + 2**31) % 2**32 - 2**31


def _parse(element, name):
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
    raise ValueError(f"model '{MODEL}' expects decimal integers in input '{name}', got '{shown}'")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total = np.empty(a.shape, dtype=np.object_)
            difference = np.empty(a.shape, dtype=np.object_)
            try:
                for index in np.ndindex(a.shape):
                    x = _parse(a[index], "INPUT0")
                    y = _parse(b[index], "INPUT1")
                    total[index] = str(_wrap32(x + y)).encode()
                    difference[index] = str(_wrap32(x - y)).encode()
            except ValueError as e:
                error = pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", total),
                        pb_utils.Tensor("OUTPUT1", difference),
                    ]
                )
            )
        return responses
'''

# Sequence models. Triton's sequence batcher supplies the control tensors (START, END,
# READY, CORRID) and sends one request of a sequence at a time with batch size 1; the
# arithmetic is the sidecar's (compute.rs), computed in Python integers and truncated to
# INT32 like the sidecar's `as i32`.
SEQUENCE_COMMON = '''import numpy as np
import triton_python_backend_utils as pb_utils


def _wrap32(value):
    return (value + 2**31) % 2**32 - 2**31


def _first(request, name):
    """First element of an input (None when the input is absent)."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy().reshape(-1)
    return array[0] if array.size else None


def _int(request, name):
    value = _first(request, name)
    return 0 if value is None else int(value)


def _respond(request, value):
    shape = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().shape
    out = np.full(shape, _wrap32(value), dtype=np.int32)
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)])
'''

SIMPLE_SEQUENCE_PY = '''"""OUTPUT = (INPUT + START) * READY (stateless; Triton's example contract)."""
''' + SEQUENCE_COMMON + '''

class TritonPythonModel:
    def execute(self, requests):
        return [
            _respond(r, (_int(r, "INPUT") + _int(r, "START")) * _int(r, "READY"))
            for r in requests
        ]
'''

SIMPLE_DYNA_SEQUENCE_PY = '''"""OUTPUT = (INPUT + START + END * CORRID) * READY, CORRID being the UINT64 sequence id."""
''' + SEQUENCE_COMMON + '''

def _signed64(value):
    # The sidecar multiplies by the id as an i64 (wrapping); only the low 32 bits survive.
    return (value + 2**63) % 2**64 - 2**63


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            corrid = _signed64(_int(r, "CORRID"))
            value = (_int(r, "INPUT") + _int(r, "START") + _int(r, "END") * corrid) * _int(r, "READY")
            responses.append(_respond(r, value))
        return responses
'''

ACCUMULATOR_PY = '''"""Running sum of INPUT per sequence: START resets it, END forgets it.{extra_doc}"""
import re

''' + SEQUENCE_COMMON + '''

STRING_ID = {string_id}


def _key(request):
    value = _first(request, "CORRID")
    if value is None:
        value = request.correlation_id()
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return int(value)


def _id_value(key):
    """The END response adds the integer value of a string id (0 when not a number)."""
    text = key.decode("utf-8", errors="replace") if isinstance(key, bytes) else str(key)
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return 0
    value = int(text)
    return value if -(2**63) <= value < 2**63 else 0


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {{}}

    def execute(self, requests):
        responses = []
        for r in requests:
            if not _int(r, "READY"):
                responses.append(_respond(r, 0))
                continue
            key = _key(r)
            if _int(r, "START"):
                self.sums[key] = 0
            total = self.sums.get(key, 0) + _int(r, "INPUT")
            self.sums[key] = total
            if _int(r, "END"):
                del self.sums[key]
                if STRING_ID:
                    total += _id_value(key)
            responses.append(_respond(r, total))
        return responses
'''


def accumulator_py(string_id: bool) -> str:
    extra = (
        "\n\nThe END response also adds the integer value of the string sequence id."
        if string_id
        else ""
    )
    # SEQUENCE_COMMON holds literal braces; format only the two placeholders.
    return ACCUMULATOR_PY.replace("{extra_doc}", extra).replace(
        "{string_id}", repr(string_id)
    ).replace("{{", "{").replace("}}", "}")


# --------------------------------------------------------------------------- repository
SLOW_IDENTITY = (
    'name: "slow_identity"\nbackend: "python"\nmax_batch_size: 8\n'
    "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' + CPU_INSTANCE
)

SLOW_IDENTITY_PY = '''"""OUTPUT0 = INPUT0 after 2 s per batch: requests stay in flight long enough to fault."""
import time

import triton_python_backend_utils as pb_utils

DELAY_S = 2.0


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(DELAY_S)
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            output = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''


def models() -> dict:
    """name -> (config.pbtxt text, model.py text, extra files {relative path: text})."""
    out = {
        "simple": (SIMPLE, simple_py("int32"), {}),
        "simple_int8": (SIMPLE_INT8, simple_py("int8"), {}),
        "simple_string": (SIMPLE_STRING, SIMPLE_STRING_PY, {}),
        "simple_identity": (
            SIMPLE_IDENTITY,
            IDENTITY_PY.replace("{through_dlpack}", "False"),
            {},
        ),
        "classifier": (
            CLASSIFIER,
            IDENTITY_PY.replace("{through_dlpack}", "False"),
            {"labels.txt": LABELS},
        ),
        "simple_sequence": (
            sequence_config("simple_sequence", "", [START, READY]),
            SIMPLE_SEQUENCE_PY,
            {},
        ),
        "simple_dyna_sequence": (
            sequence_config("simple_dyna_sequence", OLDEST, [START, END, READY, CORRID_U64]),
            SIMPLE_DYNA_SEQUENCE_PY,
            {},
        ),
        "sequence_accumulator": (
            sequence_config("sequence_accumulator", "", [START, END, READY, CORRID_U64]),
            accumulator_py(string_id=False),
            {},
        ),
        "simple_string_dyna_sequence": (
            sequence_config(
                "simple_string_dyna_sequence", OLDEST, [START, END, READY, CORRID_STRING]
            ),
            accumulator_py(string_id=True),
            {},
        ),
    }
    out["repeat_int32"] = (REPEAT_INT32, REPEAT_INT32_PY, {})
    out["custom_identity_int32"] = (CUSTOM_IDENTITY_INT32, DELAYED_IDENTITY_PY, {})
    out["countdown_int32"] = (COUNTDOWN_INT32, COUNTDOWN_INT32_PY, {})
    out["slow_identity"] = (SLOW_IDENTITY, SLOW_IDENTITY_PY, {})
    for dtype, config_type in DTYPES.items():
        name = f"identity_{dtype.lower()}"
        code = IDENTITY_PY.replace("{through_dlpack}", repr(dtype == "BF16"))
        out[name] = (identity_config(name, config_type), code, {})
    return out


def write_repository(outdir: Path) -> list:
    outdir.mkdir(parents=True, exist_ok=True)
    names = []
    for name, (config, code, extra) in models().items():
        model_dir = outdir / name
        if model_dir.exists():
            shutil.rmtree(model_dir)
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(config)
        (model_dir / "1" / "model.py").write_text(code)
        for relative, text in extra.items():
            (model_dir / relative).write_text(text)
        names.append(name)
    return names


def main(argv) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    names = write_repository(Path(argv[1]))
    print(f"wrote {len(names)} models to {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
