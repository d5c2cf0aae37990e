"""The schema of a checkpoint's trainer state (``resume.trainer_state``), checked before any
of it is used: the keys a trainer always writes, and the types, ranges, tensor shapes and
sizes of every key.

A checkpoint is read from disk, which anyone may have edited, so nothing in it is trusted:
``"iteration": -5`` would make a resume forget every metrics row and trajectory, and a
crafted value could make numpy or torch allocate gigabytes. ``check_trainer_state`` runs on
the decoded state with every tensor replaced by its ``TensorInfo`` (dtype and shape read
from the safetensors header, no data loaded), so a checkpoint is checked cheaply, before
its tensors are read. A problem raises ``StateError`` naming the key, e.g.
``iteration: -5 is not an int in [1, 1000000000]`` or ``wall_seconds: missing``.

Keys (``REQUIRED``: the loop's, ``state.TrainState``'s; the others as the run has them):
    iteration        int in [1, 10**9]: the iteration after which the checkpoint was written
    episodes         int in [0, 10**15]
    train_seconds, wall_seconds   finite numbers >= 0
    evals            list of {str: value}, each ``iteration`` in [0, iteration]
    warmup           {str: value}
    task_rng, shuffle_rng         a numpy PCG64 state (128-bit state and increment)
    sample_gen, torch_rng         a 1-D uint8 tensor of the CPU generator's state size
    optimizer, <name>_optimizer   None or a torch optimizer state_dict: ``state`` maps
                     parameter indices to {str: tensor or number}, ``param_groups`` list
                     each group's ``params`` (distinct indices); a parameter's tensors
                     share one shape; the step is a scalar
    ref_model        None or {str: tensor}
    exploration      a dict; ``rng`` in it a numpy PCG64 state
    rewards          a list of dicts or None
    curriculum       a dict (level, recent) or None
    metrics          list of metrics rows {str: value}, each ``iteration`` in [1, iteration]
    config_sha256    64 lowercase hex digits (the hash of the run's config.yaml)
Other keys are allowed (a learner's own), checked only by the generic reader.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

__all__ = ["MAX_ITERATION", "REQUIRED", "StateError", "TensorInfo", "check_trainer_state"]

MAX_ITERATION = 10**9
#: The keys every trainer state holds: the loop's counters and random streams.
REQUIRED = (
    "iteration", "episodes", "train_seconds", "wall_seconds", "evals", "warmup",
    "task_rng", "shuffle_rng", "sample_gen", "torch_rng",
)  # fmt: skip
_MAX_EPISODES = 10**15
_MAX_ROWS = 1_000_000  # evals / metrics rows in one checkpoint
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RNG_BYTES = int(torch.get_rng_state().numel())  # 5056 for torch's CPU mt19937
_U128 = 2**128


class StateError(ValueError):
    """A checkpoint state that breaks the schema; the message names the key."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of the state as its safetensors header describes it (no data)."""

    dtype: str  # safetensors dtype name: "F32", "U8", "I64", ...
    shape: tuple[int, ...]

    def numpy(self) -> TensorInfo:  # ``__ndarray__`` entries decode through .numpy()
        return self


def check_trainer_state(state: object) -> int:
    """Check ``state`` (tensors as ``TensorInfo`` or real tensors) against the schema;
    returns its iteration. Raises StateError naming the first key that breaks it."""
    if not isinstance(state, dict):
        raise StateError(f"the state is a {type(state).__name__}, not a dict")
    for key in REQUIRED:
        if key not in state:
            raise StateError(f"{key}: missing")
    iteration = _int(state["iteration"], "iteration", 1, MAX_ITERATION)
    for key, check in _CHECKS.items():
        if key in state:
            check(state[key], key, iteration)
    for key, value in state.items():
        if isinstance(key, str) and key.endswith("_optimizer"):
            _optimizer(value, key, iteration)
    return iteration


# -- scalars -------------------------------------------------------------------------------
def _int(value: object, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(f"{key}: {_show(value)} is not an int")
    if not low <= value <= high:
        raise StateError(f"{key}: {_show(value)} is not an int in [{low}, {high}]")
    return value


def _seconds(value: object, key: str, _iteration: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StateError(f"{key}: {_show(value)} is not a number")
    if not (math.isfinite(value) and value >= 0):
        raise StateError(f"{key}: {_show(value)} is not a finite number >= 0")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


# -- containers ----------------------------------------------------------------------------
def _rows(value: object, key: str, iteration: int, low: int) -> None:
    """A list of {str: value} rows whose ``iteration`` lies in [low, iteration]."""
    if not isinstance(value, list):
        raise StateError(f"{key}: a {type(value).__name__}, not a list")
    if len(value) > _MAX_ROWS:
        raise StateError(f"{key}: {len(value)} rows, more than {_MAX_ROWS}")
    for i, row in enumerate(value):
        where = f"{key}[{i}]"
        _named(row, where)
        _int(row.get("iteration"), f"{where}.iteration", low, iteration)


def _named(value: object, key: str) -> None:
    """A dict with string keys (a metrics row: values are whatever the run logged)."""
    if not isinstance(value, dict):
        raise StateError(f"{key}: a {type(value).__name__}, not a dict")
    for k in value:
        if not isinstance(k, str):
            raise StateError(f"{key}: the key {_show(k)} is not a string")


def _evals(value: object, key: str, iteration: int) -> None:
    _rows(value, key, iteration, 0)


def _metrics(value: object, key: str, iteration: int) -> None:
    _rows(value, key, iteration, 1)


def _warmup(value: object, key: str, _iteration: int) -> None:
    _named(value, key)


def _dict_or_none(value: object, key: str, _iteration: int) -> None:
    if value is not None and not isinstance(value, dict):
        raise StateError(f"{key}: a {type(value).__name__}, not a dict")


def _rewards(value: object, key: str, _iteration: int) -> None:
    if not isinstance(value, list):
        raise StateError(f"{key}: a {type(value).__name__}, not a list")
    for i, item in enumerate(value):
        _dict_or_none(item, f"{key}[{i}]", _iteration)


def _sha256(value: object, key: str, _iteration: int) -> None:
    if not (isinstance(value, str) and _SHA256.fullmatch(value)):
        raise StateError(f"{key}: {_show(value)} is not 64 lowercase hex digits")


# -- random streams ------------------------------------------------------------------------
def _numpy_rng(value: object, key: str, _iteration: int = 0) -> None:
    """numpy's PCG64 ``bit_generator.state``: what ``default_rng`` gives."""
    if not isinstance(value, dict) or value.get("bit_generator") != "PCG64":
        raise StateError(f"{key}: not a numpy PCG64 generator state")
    inner = value.get("state")
    if not isinstance(inner, dict) or set(inner) != {"state", "inc"}:
        raise StateError(f"{key}.state: not a {{'state', 'inc'}} dict")
    for name in ("state", "inc"):
        _int(inner[name], f"{key}.state.{name}", 0, _U128 - 1)
    _int(value.get("has_uint32"), f"{key}.has_uint32", 0, 1)
    _int(value.get("uinteger"), f"{key}.uinteger", 0, 2**32 - 1)


def _torch_rng(value: object, key: str, _iteration: int) -> None:
    _tensor(value, key, dtype="U8", shape=(_RNG_BYTES,))


def _exploration(value: object, key: str, iteration: int) -> None:
    if not isinstance(value, dict):
        raise StateError(f"{key}: a {type(value).__name__}, not a dict")
    if "rng" in value:
        _numpy_rng(value["rng"], f"{key}.rng")


# -- tensors -------------------------------------------------------------------------------
_DTYPES = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip


def _info(value: object) -> TensorInfo | None:
    if isinstance(value, TensorInfo):
        return value
    if isinstance(value, torch.Tensor):
        return TensorInfo(_DTYPES.get(value.dtype, str(value.dtype)), tuple(value.shape))
    return None


def _tensor(
    value: object, key: str, dtype: str | None = None, shape: tuple[int, ...] | None = None
) -> TensorInfo:
    info = _info(value)
    if info is None:
        raise StateError(f"{key}: a {type(value).__name__}, not a tensor")
    if dtype is not None and info.dtype != dtype:
        raise StateError(f"{key}: dtype {info.dtype}, expected {dtype}")
    if shape is not None and info.shape != shape:
        raise StateError(f"{key}: shape {list(info.shape)}, expected {list(shape)}")
    return info


def _weights(value: object, key: str, _iteration: int) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise StateError(f"{key}: a {type(value).__name__}, not a dict of tensors")
    for name, tensor in value.items():
        _tensor(tensor, f"{key}.{name}")


def _optimizer(value: object, key: str, _iteration: int) -> None:
    """A torch optimizer's state_dict (Adam/AdamW: step, exp_avg, exp_avg_sq per param)."""
    if value is None:
        return
    if not isinstance(value, dict) or not {"state", "param_groups"} <= set(value):
        raise StateError(f"{key}: not an optimizer state (a dict with state and param_groups)")
    groups = value["param_groups"]
    if not isinstance(groups, list):
        raise StateError(f"{key}.param_groups: a {type(groups).__name__}, not a list")
    indices: list[int] = []
    for g, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise StateError(f"{key}.param_groups[{g}]: no params list")
        for name, hyper in group.items():
            if isinstance(hyper, float) and not math.isfinite(hyper):
                raise StateError(f"{key}.param_groups[{g}].{name}: {hyper} is not finite")
        indices += [_int(p, f"{key}.param_groups[{g}].params", 0, 10**9) for p in group["params"]]
    if len(set(indices)) != len(indices):
        raise StateError(f"{key}.param_groups: a parameter index appears twice")
    state = value["state"]
    if not isinstance(state, dict):
        raise StateError(f"{key}.state: a {type(state).__name__}, not a dict")
    for index, slots in state.items():
        _param_state(slots, f"{key}.state.{index}", index in set(indices))


def _param_state(slots: object, key: str, known: bool) -> None:
    if not known:
        raise StateError(f"{key}: no parameter group holds this index")
    if not isinstance(slots, dict):
        raise StateError(f"{key}: a {type(slots).__name__}, not a dict")
    shapes = set()
    for name, v in slots.items():
        info = _info(v)
        if info is None:
            if not (isinstance(v, int | float) and not isinstance(v, bool)):
                raise StateError(f"{key}.{name}: {_show(v)} is not a tensor or number")
        elif name == "step":
            if info.shape not in ((), (1,)):
                raise StateError(f"{key}.step: shape {list(info.shape)}, expected a scalar")
        else:
            shapes.add(info.shape)
    if len(shapes) > 1:
        raise StateError(f"{key}: its tensors have different shapes {sorted(shapes)}")


_CHECKS = {
    "episodes": lambda v, k, _: _int(v, k, 0, _MAX_EPISODES),
    "train_seconds": _seconds,
    "wall_seconds": _seconds,
    "evals": _evals,
    "warmup": _warmup,
    "optimizer": _optimizer,
    "task_rng": _numpy_rng,
    "shuffle_rng": _numpy_rng,
    "sample_gen": _torch_rng,
    "torch_rng": _torch_rng,
    "ref_model": _weights,
    "exploration": _exploration,
    "rewards": _rewards,
    "curriculum": _dict_or_none,
    "metrics": _metrics,
    "config_sha256": _sha256,
}
