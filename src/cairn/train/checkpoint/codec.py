"""A trainer state as JSON and tensors: ``flatten`` splits it, ``unflatten`` joins it back,
``check_skeleton`` tells whether a JSON skeleton read from disk is one ``flatten`` could
have written.

A state is a nested dict of tensors, numpy arrays and scalars, numbers, strings, None,
lists, tuples and dicts with any such keys. Every tensor goes into ``state.safetensors``
and the rest into ``state.json``, where a tensor is named by its key; nothing is pickled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import numpy as np
import torch

from cairn.train.checkpoint.layout import STATE_JSON, STATE_TENSORS, CheckpointError

__all__ = ["Json", "Stored", "check_skeleton", "decode", "flatten", "unflatten"]

#: A state's skeleton: what ``json.dumps`` writes (tensors named by tagged dicts).
Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]

_MAX_DEPTH = 64  # nesting of the state skeleton (a trainer's is about 6)
_NUMERIC = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64"
# numeric only: a string dtype such as "<U600000000" would allocate gigabytes
_NPSCALAR_DTYPES = frozenset(
    np.dtype(t).str for t in [*_NUMERIC.split(), "complex64", "complex128"]
)
_FLOAT_WORDS = frozenset({"nan", "inf", "-inf"})


class Stored(Protocol):
    """A tensor of a state as ``decode`` finds it: a tensor, or its header (``numpy()``
    gives an array, or the header itself)."""

    def numpy(self) -> object: ...


def flatten(obj: object) -> tuple[Json, dict[str, torch.Tensor]]:
    """Split a nested state into a JSON-able skeleton and the tensors it refers to.

    Tensors (and numpy arrays) become ``{"__tensor__": name}`` / ``{"__ndarray__": name}``;
    tuples, numpy scalars, non-finite floats and dicts whose keys are not plain strings get a
    tagged form, so ``unflatten`` gives back the same types (an OrderedDict comes back as a
    dict in the same order). Other objects raise TypeError naming where they are.
    """
    tensors: dict[str, torch.Tensor] = {}
    return _encode(obj, tensors, "state"), tensors


def unflatten(skeleton: Json, tensors: Mapping[str, torch.Tensor]) -> object:
    """The state ``flatten`` split, rebuilt from its skeleton and tensors."""
    return decode(skeleton, tensors)


def _encode(obj: object, tensors: dict[str, torch.Tensor], where: str) -> Json:
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = obj.detach().cpu().clone().contiguous()  # no shared storage
        return {"__tensor__": name}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(f"cannot checkpoint {where}: a numpy array of Python objects")
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(obj).copy())
        return {"__ndarray__": name}
    if isinstance(obj, np.generic):
        return {"__npscalar__": obj.dtype.str, "value": _encode(obj.item(), tensors, where)}
    if isinstance(obj, list | tuple):
        items = [_encode(x, tensors, f"{where}[{i}]") for i, x in enumerate(obj)]
        return items if isinstance(obj, list) else {"__tuple__": items}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _encode(v, tensors, f"{where}.{k}") for k, v in obj.items()}
        return {
            "__dict__": [
                [_encode(k, tensors, where), _encode(v, tensors, f"{where}[{k!r}]")]
                for k, v in obj.items()
            ]
        }
    raise TypeError(
        f"cannot checkpoint {where}: {type(obj).__name__} is not a tensor, array, number, "
        "string, None, list, tuple or dict"
    )


def decode(obj: Json, tensors: Mapping[str, Stored]) -> object:
    """The value of skeleton ``obj``, each tensor taken from ``tensors`` by its name (real
    tensors, or their headers when a state is checked before its tensors are read)."""
    if isinstance(obj, list):
        return [decode(x, tensors) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[str(obj["__tensor__"])]
    if "__ndarray__" in obj:
        return tensors[str(obj["__ndarray__"])].numpy()
    if "__float__" in obj:
        return float(str(obj["__float__"]))
    if "__npscalar__" in obj:
        return np.dtype(str(obj["__npscalar__"])).type(decode(obj["value"], tensors))
    if "__tuple__" in obj:
        return tuple(decode(x, tensors) for x in _items(obj["__tuple__"]))
    if "__dict__" in obj:
        pairs = [_items(p) for p in _items(obj["__dict__"])]
        return {decode(k, tensors): decode(v, tensors) for k, v in pairs}
    return {k: decode(v, tensors) for k, v in obj.items()}


def _items(obj: Json) -> list[Json]:
    """A tagged value's list (``check_skeleton`` made sure it is one)."""
    if not isinstance(obj, list):
        raise TypeError(f"{type(obj).__name__} in a skeleton where a list belongs")
    return obj


def check_skeleton(obj: object, tensors: Mapping[str, object], where: str = "state") -> None:
    """Raise CheckpointError unless ``obj`` is a skeleton ``flatten`` could have written,
    naming tensors among ``tensors`` only."""
    _check(obj, tensors, where, 0)


def _check(obj: object, tensors: Mapping[str, object], where: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise CheckpointError(f"{STATE_JSON}: {where} is nested deeper than {_MAX_DEPTH}")
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            _check(x, tensors, f"{where}[{i}]", depth + 1)
        return
    if not isinstance(obj, dict):
        return  # None, bool, int, float, str: JSON scalars
    tags = [k for k in obj if k.startswith("__")]
    if not tags:
        for k, v in obj.items():
            _check(v, tensors, f"{where}.{k}", depth + 1)
        return
    problem = _tag_problem(obj, tags[0], tensors)
    if problem is not None:
        raise CheckpointError(f"{STATE_JSON}: {where}: {problem}")
    if tags[0] == "__tuple__":
        _check(obj["__tuple__"], tensors, where, depth + 1)
    elif tags[0] == "__dict__":
        for k, v in obj["__dict__"]:
            _check(k, tensors, f"{where}[key]", depth + 1)
            _check(v, tensors, f"{where}[{str(k)[:20]}]", depth + 1)


def _tag_problem(obj: dict[str, object], tag: str, tensors: Mapping[str, object]) -> str | None:
    """Why a tagged value (``{"__tensor__": name}``, ...) is malformed, or None."""
    keys, value = set(obj), obj[tag]
    if tag in ("__tensor__", "__ndarray__"):
        ok = keys == {tag} and isinstance(value, str) and value in tensors
        return None if ok else f"{tag} {str(value)[:40]!r} is not a tensor of {STATE_TENSORS}"
    if tag == "__float__":
        ok = keys == {tag} and value in _FLOAT_WORDS
        return None if ok else f"__float__ {str(value)[:40]!r} is not nan, inf or -inf"
    if tag == "__npscalar__":
        return _npscalar_problem(obj, keys)
    if tag == "__tuple__":
        return None if keys == {tag} and isinstance(value, list) else "__tuple__ is not a list"
    if tag == "__dict__":
        pairs = isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value)
        return None if keys == {tag} and pairs else "__dict__ is not a list of [key, value]"
    return f"unknown tag {tag[:40]!r}"


def _npscalar_problem(obj: dict[str, object], keys: set[str]) -> str | None:
    dtype, value = obj["__npscalar__"], obj.get("value")
    if keys != {"__npscalar__", "value"} or dtype not in _NPSCALAR_DTYPES:
        return f"__npscalar__ {str(dtype)[:40]!r} is not a numeric numpy dtype"
    if isinstance(value, dict):
        value = float(value["__float__"]) if set(value) == {"__float__"} else None
        if value is None or str(value) not in _FLOAT_WORDS:
            return "__npscalar__ value is not a number"
    if not isinstance(value, bool | int | float):
        return "__npscalar__ value is not a number"
    try:
        np.dtype(str(dtype)).type(value)
    except (OverflowError, ValueError, TypeError) as err:
        return f"__npscalar__ value does not fit {dtype} ({str(err)[:60]})"
    return None
