"""The models of Triton's L0_batcher, written as python-backend models with the same contracts.

L0_batcher's test.sh takes its models from Triton's private QA repository (ONNX, TensorRT,
LibTorch, TensorFlow models, and the `identity` custom backend) and appends a `dynamic_batching`
block to each configuration. The python trial of the test (`BACKENDS=python`) needs only two
contracts, written here:

- `python_float32_float32_float32`: INPUT0, INPUT1 FP32 [16] (the variable-size repository:
  [-1]) -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, max_batch_size 8, version 1,
  OUTPUT0 labelled by `output0_labels.txt`. test.sh makes it from the ONNX model's configuration
  (platform -> backend "python") and Triton's own `qa/python_models/add_sub/model.py`, which
  run.py copies from Triton's tree as it is (`add_sub_dir`).
- `custom_zero_1_float32` (the "custom" trial: the `identity` backend's model of
  `qa/custom_models`), and `dynamic_batch` (queue_timeout_test.py's identity model):
  OUTPUT0 = INPUT0, FP32 [-1], written here as a python model (ZERO_PY) that sleeps
  `execute_delay_ms` once per execution, multiplied for instance i by
  max(i * instance_wise_delay_multiplier, 1), as the identity backend does.

Each model comes in two forms: for Triton, the configuration with its `dynamic_batching` (Triton
batches); for the sidecar, the same configuration without it, served by a Triton behind the
sidecar, and the batcher's settings as the sidecar's `backend.models[].config` (the sidecar
batches and sends the Triton behind it one request per batch).

No instance is KIND_GPU here (there is no GPU): test.sh's `KIND_GPU` groups become `KIND_CPU`
with the same count, and a group test.sh leaves to Triton's default is written as it would be
on a CPU-only machine for the python backend (one KIND_CPU instance).

Standard library only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ADD_SUB = "python_float32_float32_float32"
ZERO = "custom_zero_1_float32"
DYNAMIC_BATCH = "dynamic_batch"

# test.sh's `dynamic_batching` blocks, in the configuration's JSON form.
PREFERRED_2_6 = {"preferred_batch_size": [2, 6], "max_queue_delay_microseconds": 10000000}
PREFERRED_4_6 = {"preferred_batch_size": [4, 6]}

ZERO_PY = '''"""OUTPUT0 = INPUT0, after `execute_delay_ms` once per execution (times
max(instance index * instance_wise_delay_multiplier, 1)), as Triton's identity backend."""
import json
import time

import triton_python_backend_utils as pb_utils


def _param(parameters, key, default):
    text = parameters.get(key, {}).get("string_value", "")
    return int(text) if text.strip().isdigit() else default


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        delay_ms = _param(parameters, "execute_delay_ms", 0)
        multiplier = _param(parameters, "instance_wise_delay_multiplier", 0)
        # Instances are named <group>_<index>.
        tail = args.get("model_instance_name", "").rsplit("_", 1)[-1]
        index = int(tail) if tail.isdigit() else 0
        if multiplier > 0:
            delay_ms *= max(multiplier * index, 1)
        self.delay_s = delay_ms / 1000.0

    def execute(self, requests):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            output = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''


def pbtxt(value, indent: str = "") -> str:
    """A JSON-form configuration value as protobuf text (enum names are bare strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[ " + ", ".join(pbtxt(v, indent) for v in value) + " ]"
    inner = indent + "  "
    fields = "".join(f"{inner}{k}: {pbtxt(v, inner)}\n" for k, v in value.items())
    return "{\n" + fields + indent + "}"


def instance_group(count: int) -> str:
    return f"instance_group [ {{ kind: KIND_CPU count: {count} }} ]\n"


def add_sub_config(dims: str, batching: dict | None) -> str:
    """test.sh's python_float32_float32_float32: the ONNX model's configuration with backend
    "python", max_batch_size 8, version 1 only, then its dynamic_batching block (for Triton)."""
    text = f"""name: "{ADD_SUB}"
backend: "python"
max_batch_size: 8
version_policy: {{ specific {{ versions: [1] }}}}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
input [ {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] label_filename: "output0_labels.txt" }} ]
output [ {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
""" + instance_group(1)
    if batching is not None:
        text += f"dynamic_batching {pbtxt(batching)}\n"
    return text


def zero_config(name: str, max_batch_size: int, batching: dict | None, count: int = 1,
                ragged: bool = False, parameters: dict | None = None) -> str:
    """An FP32 [-1] identity: test.sh's custom_zero_1_float32 (and dynamic_batch) as edited."""
    ragged_field = " allow_ragged_batch: true" if ragged else ""
    text = f"""name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
version_policy: {{ specific {{ versions: [1] }}}}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ]{ragged_field} }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
""" + instance_group(count)
    if parameters:
        text += "parameters [\n" + ",\n".join(
            f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()
        ) + "\n]\n"
    if batching is not None:
        text += f"dynamic_batching {pbtxt(batching)}\n"
    return text


class Repo:
    """One of test.sh's model repositories: {model: (config builder, files)}, written for
    Triton (with dynamic_batching) or for the Triton behind the sidecar (without), and the
    sidecar's `backend.models` entries."""

    def __init__(self):
        self.models: dict = {}

    def add(self, name: str, build, batching: dict, model_py=None, model_dir=None,
            extra=None):
        """`build(batching)` gives the configuration text; the model is `model_py` (text) or
        the files of `model_dir` (Triton's own model)."""
        self.models[name] = (build, batching, model_py, model_dir, extra or {})
        return self

    def write(self, root: Path, for_sidecar: bool) -> dict:
        """Writes every model under `root`; {name: its folder}."""
        dirs = {}
        for name, (build, batching, model_py, model_dir, extra) in self.models.items():
            d = root / name
            shutil.rmtree(d, ignore_errors=True)
            (d / "1").mkdir(parents=True)
            (d / "config.pbtxt").write_text(build(None if for_sidecar else batching))
            if model_dir is not None:
                shutil.copy(Path(model_dir) / "model.py", d / "1" / "model.py")
            else:
                (d / "1" / "model.py").write_text(model_py)
            for rel, text in extra.items():
                (d / rel).write_text(text)
            dirs[name] = d
        return dirs

    def sidecar_models(self) -> list:
        """backend.models entries: each model's batcher as the sidecar's configuration."""
        return [{"name": name, "config": {"dynamic_batching": batching}}
                for name, (_, batching, _, _, _) in self.models.items()]


LABELS_16 = "".join(f"label{i}\n" for i in range(16))


def add_sub(repo: Repo, add_sub_dir: Path, dims: str, batching: dict) -> Repo:
    return repo.add(ADD_SUB, lambda b: add_sub_config(dims, b), batching,
                    model_dir=add_sub_dir, extra={"output0_labels.txt": LABELS_16})


def fixed_models(add_sub_dir: Path) -> Repo:
    """test.sh's `models`: python_float32_float32_float32, FP32 [16], preferred [2, 6], 10 s."""
    return add_sub(Repo(), add_sub_dir, "16", PREFERRED_2_6)


def preferred_batch_only_models(add_sub_dir: Path) -> Repo:
    """test.sh's `preferred_batch_only_models`: the same with preferred [4, 6] and no delay."""
    return add_sub(Repo(), add_sub_dir, "16", PREFERRED_4_6)


def var_models(add_sub_dir: Path) -> Repo:
    """test.sh's `var_models`: the add/sub model with FP32 [-1], and custom_zero_1_float32 with a
    ragged INPUT0, max_batch_size 8, one instance; both preferred [2, 6], 10 s."""
    repo = add_sub(Repo(), add_sub_dir, "-1", PREFERRED_2_6)
    return repo.add(ZERO, lambda b: zero_config(ZERO, 8, b, ragged=True), PREFERRED_2_6,
                    model_py=ZERO_PY)


def max_queue_delay_models() -> Repo:
    """test.sh's `custom_models` for the max_queue_delay tests: custom_zero_1_float32 with
    max_batch_size 100, `max_queue_delay_microseconds: 0` (test.sh's sed meant to change it for
    the non-default test matches nothing: both run with 0), one instance, 100 ms a batch."""
    return Repo().add(
        ZERO, lambda b: zero_config(ZERO, 100, b, parameters={"execute_delay_ms": 100}),
        {"max_queue_delay_microseconds": 0}, model_py=ZERO_PY)


def preserve_ordering_models(preserve: bool) -> Repo:
    """test.sh's `custom_models` for test_multi_batch_preserve_ordering: max_batch_size 4,
    preferred [4], two instances, one 100 ms a batch and the other 400 ms."""
    batching = {"preferred_batch_size": [4]}
    if preserve:
        batching["preserve_ordering"] = True
    params = {"execute_delay_ms": 100, "instance_wise_delay_multiplier": 4}
    return Repo().add(ZERO, lambda b: zero_config(ZERO, 4, b, count=2, parameters=params),
                      batching, model_py=ZERO_PY)


def queue_timeout_models() -> Repo:
    """test.sh's `dynamic_batch` (identity backend there): max_batch_size 1, preferred [1],
    requests rejected after 1 s in the queue (at most 8 queued), 8 s an execution."""
    batching = {"preferred_batch_size": [1],
                "default_queue_policy": {"timeout_action": "REJECT",
                                         "default_timeout_microseconds": 1000000,
                                         "max_queue_size": 8}}
    return Repo().add(
        DYNAMIC_BATCH,
        lambda b: zero_config(DYNAMIC_BATCH, 1, b, parameters={"execute_delay_ms": 8000}),
        batching, model_py=ZERO_PY)


def sidecar_yaml(repo: Repo, upstream_grpc: int) -> str:
    """The sidecar's configuration in front of the Triton that serves `repo` without batchers."""
    lines = ["backend:", "  kind: upstream", f"  url: grpc://127.0.0.1:{upstream_grpc}",
             "  models:"]
    lines += [f"    - {json.dumps(entry)}" for entry in repo.sidecar_models()]
    return "\n".join(lines) + "\n"
