"""MLServer runtimes with the contracts of the sidecar's built-in catalog.

make_repo.py copies this file into the model repository (as infergate_runtimes.py); each
model's model-settings.json names one of the classes below as its `implementation`. The
arithmetic is that of sidecar/src/backend/builtin/compute.rs.

MLServer's gRPC front end has already turned every input into a flat Python list (it unpacks
`raw_input_contents` with `struct`), and it packs each output's flat list back into raw bytes
when the request came with raw contents, as the sidecar's requests do. So the runtimes work on
flat lists and never go through NumPy codecs: values come back bit for bit as they arrived.

Sequence models are run with `sequence: sidecar`: the sidecar schedules the sequences and adds
the control tensors of the configuration's `sequence_batching.control_input` (START, END,
READY: INT32 0/1; CORRID: UINT64 or BYTES) to every request as extra inputs, the way Triton's
sequence batcher feeds a python-backend model. State is kept per CORRID value.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from mlserver import MLModel
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput

DECIMAL = re.compile(r"[+-]?[0-9]+")
INT32_MIN, INT32_MAX = -(2**31), 2**31


def _wrap8(value: int) -> int:
    """The low 8 bits as a signed integer: Rust's wrapping i8 arithmetic."""
    return (value + 2**7) % 2**8 - 2**7


def _wrap32(value: int) -> int:
    """The low 32 bits as a signed integer: Rust's wrapping i32 arithmetic and `as i32`."""
    return (value + 2**31) % 2**32 - 2**31


def _wrap64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def _input(payload: InferenceRequest, name: str) -> Optional[RequestInput]:
    for tensor in payload.inputs:
        if tensor.name == name:
            return tensor
    return None


def _values(payload: InferenceRequest, name: str) -> list:
    tensor = _input(payload, name)
    if tensor is None:
        raise InferenceError(f"input '{name}' is missing")
    return list(tensor.data)


def _response(model: MLModel, payload: InferenceRequest, outputs: List[ResponseOutput]) -> InferenceResponse:
    # Like Triton, answer only the outputs the request names (all of them when it names none).
    if payload.outputs:
        wanted = {o.name for o in payload.outputs}
        outputs = [o for o in outputs if o.name in wanted]
    return InferenceResponse(model_name=model.name, model_version=model.version, outputs=outputs)


class Identity(MLModel):
    """OUTPUT0 = INPUT0: same datatype, shape and values (every datatype MLServer carries)."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = _input(payload, "INPUT0")
        if tensor is None:
            raise InferenceError("input 'INPUT0' is missing")
        output = ResponseOutput(
            name="OUTPUT0", shape=tensor.shape, datatype=tensor.datatype, data=list(tensor.data)
        )
        return _response(self, payload, [output])


class AddSubInt32(MLModel):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over INT32, wrapping on overflow."""

    DATATYPE = "INT32"
    WRAP = staticmethod(_wrap32)

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        a, b = _values(payload, "INPUT0"), _values(payload, "INPUT1")
        shape = _input(payload, "INPUT0").shape
        total = [self.WRAP(x + y) for x, y in zip(a, b)]
        difference = [self.WRAP(x - y) for x, y in zip(a, b)]
        return _response(
            self,
            payload,
            [
                ResponseOutput(name="OUTPUT0", shape=shape, datatype=self.DATATYPE, data=total),
                ResponseOutput(
                    name="OUTPUT1", shape=shape, datatype=self.DATATYPE, data=difference
                ),
            ],
        )


class AddSubInt8(AddSubInt32):
    """The same over INT8 (simple_int8), wrapping on overflow."""

    DATATYPE = "INT8"
    WRAP = staticmethod(_wrap8)


class AddSubString(MLModel):
    """The "simple" arithmetic over BYTES elements holding decimal integers (as text).

    An element that is not a decimal i32 (after trimming white space) fails the request with
    the built-in model's message; MLServer answers InferenceError as INVALID_ARGUMENT.
    """

    def _parse(self, element, name: str) -> int:
        raw = element if isinstance(element, bytes) else str(element).encode()
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = None
        if text is not None and DECIMAL.fullmatch(text):
            value = int(text)
            if INT32_MIN <= value < INT32_MAX:
                return value
        shown = raw.decode("utf-8", errors="replace")
        raise InferenceError(
            f"model '{self.name}' expects decimal integers in input '{name}', got '{shown}'"
        )

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        a, b = _values(payload, "INPUT0"), _values(payload, "INPUT1")
        shape = _input(payload, "INPUT0").shape
        total, difference = [], []
        for x, y in zip(a, b):
            x, y = self._parse(x, "INPUT0"), self._parse(y, "INPUT1")
            total.append(str(_wrap32(x + y)).encode())
            difference.append(str(_wrap32(x - y)).encode())
        return _response(
            self,
            payload,
            [
                ResponseOutput(name="OUTPUT0", shape=shape, datatype="BYTES", data=total),
                ResponseOutput(name="OUTPUT1", shape=shape, datatype="BYTES", data=difference),
            ],
        )


class _Sequence(MLModel):
    """Common part of the sequence models: INPUT/OUTPUT INT32 [batch, 1] plus the controls.

    The sidecar sends one step of a sequence per request; each batch row is computed on its
    own anyway, from the row's INPUT and control values.
    """

    def _control(self, payload: InferenceRequest, name: str, rows: int) -> list:
        tensor = _input(payload, name)
        if tensor is None:
            # A control the configuration does not name (e.g. END of simple_sequence).
            return [0] * rows
        values = list(tensor.data)
        if len(values) != rows:
            raise InferenceError(
                f"control input '{name}' has {len(values)} elements for {rows} batch rows"
            )
        return values

    def step(self, x: int, start: int, end: int, ready: int, corrid) -> int:
        raise NotImplementedError

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = _input(payload, "INPUT")
        if tensor is None:
            raise InferenceError("input 'INPUT' is missing")
        xs = list(tensor.data)
        rows = len(xs)
        start = self._control(payload, "START", rows)
        end = self._control(payload, "END", rows)
        ready = self._control(payload, "READY", rows)
        corrid = self._control(payload, "CORRID", rows)
        out = [
            _wrap32(self.step(int(x), int(s), int(e), int(r), c))
            for x, s, e, r, c in zip(xs, start, end, ready, corrid)
        ]
        output = ResponseOutput(name="OUTPUT", shape=tensor.shape, datatype="INT32", data=out)
        return _response(self, payload, [output])


class SequenceSimple(_Sequence):
    """OUTPUT = (INPUT + START) * READY (stateless; Triton's example contract)."""

    def step(self, x, start, end, ready, corrid):
        return (x + start) * ready


class SequenceDyna(_Sequence):
    """OUTPUT = (INPUT + START + END * CORRID) * READY, CORRID being the UINT64 sequence id."""

    def step(self, x, start, end, ready, corrid):
        # The built-in multiplies by the id as an i64 (wrapping); only the low 32 bits survive.
        return (x + start + _wrap64(end * _wrap64(int(corrid)))) * ready


class Accumulate(_Sequence):
    """Running sum of INPUT per sequence (by CORRID): START resets it, END forgets it.

    As in the built-in, READY does not enter the sum: the sidecar sends only real steps.
    """

    string_id = False

    async def load(self) -> bool:
        # MLServer runs the model in its main process (settings.json: parallel_workers 0), so
        # this dictionary sees every step of every sequence.
        self.sums: Dict[object, int] = {}
        return True

    def step(self, x, start, end, ready, corrid):
        key = corrid if isinstance(corrid, (bytes, int)) else str(corrid).encode()
        if start:
            self.sums[key] = 0
        total = self.sums.get(key, 0) + x
        self.sums[key] = total
        if end:
            del self.sums[key]
            if self.string_id:
                total += _id_value(key)
        return total


class AccumulateStringId(Accumulate):
    """The running sum; the END response also adds the integer value of the string CORRID."""

    string_id = True


def _id_value(key) -> int:
    """Integer value of a string sequence id (0 when it is not a decimal i64)."""
    if not isinstance(key, bytes):
        return 0
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    if not DECIMAL.fullmatch(text):
        return 0
    value = int(text)
    return value if -(2**63) <= value < 2**63 else 0
