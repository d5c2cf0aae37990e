"""Atomic checkpoints without pickle: weights (safetensors) + tokenizer + trainer state.

Layout under the run directory:
    checkpoints/iter_000012/   model.safetensors, config.json, tokenizer files,
                               state.json + state.safetensors (optimizer, RNG and loop state),
                               manifest.json (every file's size; written last)
    checkpoints/latest         the name of the newest complete checkpoint

A checkpoint is written to a temporary folder and renamed into place, then `latest` is
replaced atomically, so a run killed at any moment leaves the previous checkpoint intact.

The trainer state (a nested dict of tensors, numbers, strings, lists, tuples and dicts with
any such keys) is split by ``flatten``: every tensor goes into ``state.safetensors`` and the
rest into ``state.json``, where a tensor is named by its key. Nothing is ever unpickled: an
old ``state.pt`` (a pickle, which can run code when loaded) is refused with a clear error.

Nothing read back is trusted. ``latest_checkpoint`` validates before it uses a checkpoint:
the manifest's files all present with their sizes, every safetensors header readable, no
symbolic link and no path leaving the folder, and the state checked against its schema
(``cairn.train.state_schema``: types, ranges, shapes, sizes; ``state.json`` at most 256 MiB,
its tags well formed, numpy scalars numeric only) with its ``iteration`` equal to the
folder's number. ``latest`` must name an ``iter_N`` folder of this run (an absolute path or
``..`` is ignored). A newest checkpoint that fails for any reason is skipped with a
``CheckpointWarning`` for the newest valid one, by iteration number.

Pruning (``keep``) keeps the checkpoint just written and the newest ``keep - 1`` valid ones
before it, by the iteration their validated state holds; it removes invalid checkpoints and
any numbered after the one just written (left by a run that was resumed from before them).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers.utils import logging as hf_logging

from cairn.train.state_schema import StateError, TensorInfo, check_trainer_state

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "CheckpointWriteError",
    "check_checkpoint",
    "checkpoint_iteration",
    "flatten",
    "latest_checkpoint",
    "load_state",
    "save_checkpoint",
    "unflatten",
]

STATE_JSON, STATE_TENSORS, MANIFEST = "state.json", "state.safetensors", "manifest.json"
LEGACY_STATE = "state.pt"  # the pickle format of earlier versions: never loaded
FORMAT = "cairn-state/1"
# Files a loader might unpickle (torch.load of pytorch_model.bin, ...): a checkpoint with one
# is refused, so that no pickle from a run folder reaches transformers either.
_PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")
_NAME = re.compile(r"iter_(\d{1,10})")  # a checkpoint folder; ``latest`` must name one
_STATE_JSON_MAX = 256 * 2**20  # bytes of state.json read at most
_POINTER_MAX = 64  # bytes of ``latest`` read at most
_MAX_DEPTH = 64  # nesting of the state skeleton (a trainer's is about 6)
_NUMERIC = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64"
# numeric only: a string dtype such as "<U600000000" would allocate gigabytes
_NPSCALAR_DTYPES = frozenset(
    np.dtype(t).str for t in [*_NUMERIC.split(), "complex64", "complex128"]
)
_FLOAT_WORDS = frozenset({"nan", "inf", "-inf"})


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (incomplete, corrupt or in the refused pickle format);
    a ValueError, so the CLI reports it as one line like any bad input."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped for an older complete one."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written, whatever its writer raised (safetensors'
    SafetensorError on a full disk is not an OSError): an OSError, so the CLI ends the run
    in one line naming the intact checkpoint to resume from."""


# -- state <-> JSON skeleton + tensors -------------------------------------------------------------
def flatten(obj: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split a nested state into a JSON-able skeleton and the tensors it refers to.

    Tensors (and numpy arrays) become ``{"__tensor__": name}`` / ``{"__ndarray__": name}``;
    tuples, numpy scalars, non-finite floats and dicts whose keys are not plain strings get a
    tagged form, so ``unflatten`` gives back the same types (an OrderedDict comes back as a
    dict in the same order). Other objects raise TypeError naming where they are.
    """
    tensors: dict[str, torch.Tensor] = {}
    return _encode(obj, tensors, "state"), tensors


def unflatten(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The state ``flatten`` split, rebuilt from its skeleton and tensors."""
    return _decode(skeleton, tensors)


def _encode(obj: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
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


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(x, tensors) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        return tensors[obj["__ndarray__"]].numpy()
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__npscalar__" in obj:
        return np.dtype(obj["__npscalar__"]).type(_decode(obj["value"], tensors))
    if "__tuple__" in obj:
        return tuple(_decode(x, tensors) for x in obj["__tuple__"])
    if "__dict__" in obj:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in obj["__dict__"]}
    return {k: _decode(v, tensors) for k, v in obj.items()}


# -- writing ---------------------------------------------------------------------------------------
def save_checkpoint(
    run_dir: Path,
    iteration: int,
    model: torch.nn.Module,
    tokenizer,
    state: dict[str, Any],
    keep: int,
    extra: dict[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write ``checkpoints/iter_{iteration}`` atomically and prune to ``keep`` checkpoints:
    this one and the newest ``keep - 1`` valid ones before it (module docstring).

    ``extra`` maps sub-folder names to writers (e.g. a critic's weights) run inside it.
    """
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"iter_{iteration:06d}"
    final, tmp = root / name, root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar every iteration
    try:
        _write_files(tmp, model, tokenizer, state, extra or {})
    except BaseException as err:  # any writer's error (ENOSPC, SafetensorError), or a signal
        shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoint stays the newest
        if isinstance(err, OSError) or not isinstance(err, Exception):
            raise
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CheckpointWriteError(
            errno.EIO, f"checkpoint {name} could not be written ({type(err).__name__}: {first})"
        ) from err
    _remove(final)
    os.replace(tmp, final)
    pointer = root / ".latest.tmp"
    pointer.write_text(name)
    os.replace(pointer, root / "latest")
    _fsync_tree(root, recursive=False)
    _prune(root, final, iteration, keep)
    return final


def _write_files(
    tmp: Path,
    model: torch.nn.Module,
    tokenizer: Any,
    state: dict[str, Any],
    extra: dict[str, Callable[[Path], None]],
) -> None:
    """Every file of a checkpoint into ``tmp``, the manifest last, all fsynced."""
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for folder, write in extra.items():
        write(tmp / folder)
    write_state(tmp, state)
    _write_manifest(tmp)
    _fsync_tree(tmp)


def _prune(root: Path, current: Path, iteration: int, keep: int) -> None:
    """Keep ``current`` and the newest ``keep - 1`` valid checkpoints numbered before it."""
    older = []
    for number, folder in _numbered_folders(root):
        if folder == current:
            continue
        if number < iteration and checkpoint_iteration(folder) == number:
            older.append((number, folder))
        else:  # invalid, or after the one just written: never resumed from again
            _remove(folder)
    for _, folder in sorted(older, reverse=True)[max(keep - 1, 0) :]:
        _remove(folder)


def _remove(folder: Path) -> None:
    if folder.is_symlink():
        folder.unlink()
    else:
        shutil.rmtree(folder, ignore_errors=True)


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """``state`` as ``state.json`` (skeleton) + ``state.safetensors`` (its tensors)."""
    skeleton, tensors = flatten(state)
    save_file(tensors, str(folder / STATE_TENSORS))
    text = json.dumps({"format": FORMAT, "state": skeleton})
    (folder / STATE_JSON).write_text(text)


def _write_manifest(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    sizes = {p.relative_to(folder).as_posix(): p.stat().st_size for p in files}
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": sizes}, indent=1))


# -- reading ---------------------------------------------------------------------------------------
def check_checkpoint(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be used, or None when it is complete and its
    state passes the schema (module docstring).

    Raises CheckpointError for a checkpoint in the old pickle format (never loaded).
    """
    if path.is_symlink():
        return "the folder is a symbolic link (a checkpoint holds only its own files)"
    if not path.is_dir():
        return "the folder is missing"
    links = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_symlink())
    if links:
        return f"{links[0]} is a symbolic link (a checkpoint holds only its own files)"
    pickles = sorted(p.name for p in path.rglob("*") if p.suffix in _PICKLE_SUFFIXES)
    if pickles and (path / MANIFEST).is_file():
        raise CheckpointError(
            f"checkpoint {path} holds pickle files {pickles}, which cairn never writes nor "
            "loads (unpickling a file can run any code in it)"
        )
    manifest = path / MANIFEST
    if not manifest.is_file():
        if (path / LEGACY_STATE).exists():
            raise CheckpointError(_legacy_message(path))
        return f"{MANIFEST} is missing (the checkpoint was never finished)"
    problem = _files_problem(path, manifest)
    if problem is None:
        problem = _state_problem(path)
    return problem


def _files_problem(path: Path, manifest: Path) -> str | None:
    """Why the manifest's files do not match the folder, or None."""
    try:
        if manifest.stat().st_size > _STATE_JSON_MAX:
            return f"{MANIFEST} is larger than {_STATE_JSON_MAX} bytes"
        sizes = json.loads(manifest.read_text())["files"]
        if not isinstance(sizes, dict):
            raise TypeError("files is not a mapping")
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__}: {str(err)[:80]})"
    for rel, size in sizes.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts:
            return f"{MANIFEST} names {rel[:80]!r}, a path outside the checkpoint"
        if isinstance(size, bool) or not isinstance(size, int):
            return f"{MANIFEST} gives {rel} the size {str(size)[:40]!r}, not a number"
        file = path / rel
        if not file.is_file():
            return f"{rel} is missing"
        if file.stat().st_size != size:
            return f"{rel} has {file.stat().st_size} bytes, the manifest says {size}"
        if rel.endswith(".safetensors") and (problem := _unreadable(file)):
            return f"{rel} is unreadable ({problem})"
    if STATE_JSON not in sizes or STATE_TENSORS not in sizes:
        return f"{STATE_JSON} / {STATE_TENSORS} are not in the manifest"
    return None


def _state_problem(path: Path) -> str | None:
    """Why the state of ``path`` breaks the schema or its folder's number, or None."""
    try:
        iteration = check_trainer_state(_state_view(path))
    except StateError as err:
        return f"{STATE_JSON}: {err}"
    except CheckpointError as err:
        return str(err)
    number = _number(path.name)
    if number is not None and number != iteration:
        return f"{STATE_JSON}: iteration: {iteration}, but the folder is {path.name}"
    return None


def checkpoint_iteration(path: Path) -> int | None:
    """The iteration of checkpoint ``path`` read from its validated state, or None when it
    cannot be used for any reason (``check_checkpoint``)."""
    try:
        if check_checkpoint(path) is not None:
            return None
        number = _number(path.name)  # check_checkpoint compared it with the state's
        return number if number is not None else check_trainer_state(_state_view(path))
    except (CheckpointError, StateError):
        return None


def _unreadable(file: Path) -> str | None:
    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as err:  # safetensors raises its own error types
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def _legacy_message(path: Path) -> str:
    return (
        f"checkpoint {path} holds its state as {LEGACY_STATE}, a pickle, which cairn no longer "
        "loads (unpickling a file can run any code in it); resume it with the cairn version "
        "that wrote it, or start a new run"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest valid checkpoint folder of ``run_dir``, or None when it has none.

    The folder named by ``checkpoints/latest`` when it is valid; otherwise the valid
    ``iter_N`` folder of the highest N, with a CheckpointWarning saying what was skipped and
    why. Raises CheckpointError when checkpoints exist but none is valid, or when
    ``checkpoints`` is a symbolic link (a folder of another run).
    """
    root = run_dir / "checkpoints"
    if root.is_symlink():
        raise CheckpointError(f"{root} is a symbolic link: a run reads only its own checkpoints")
    named, skipped = _pointer(root)
    if named is not None:
        problem = _problem(named)
        if problem is None:
            return named
        skipped.append(f"{named.name}: {problem}")
    folders = [f for _, f in _numbered_folders(root) if f != named]
    if not skipped and not folders:
        return None
    for folder in folders:
        problem = _problem(folder)
        if problem is None:
            if skipped:
                warnings.warn(
                    f"resuming from {folder.name}, the newest complete checkpoint of {run_dir}; "
                    f"skipped {'; '.join(skipped)}",
                    CheckpointWarning,
                    stacklevel=2,
                )
            return folder
        skipped.append(f"{folder.name}: {problem}")
    raise CheckpointError(f"no complete checkpoint in {root}: {'; '.join(skipped)}")


def _problem(folder: Path) -> str | None:
    """``check_checkpoint``, with a refused pickle as one more reason to skip the folder."""
    try:
        return check_checkpoint(folder)
    except CheckpointError as err:
        return str(err)


def _pointer(root: Path) -> tuple[Path | None, list[str]]:
    """(the folder ``latest`` names, []), or (None, [why it was ignored]) / (None, [])."""
    pointer = root / "latest"
    if not (pointer.exists() or pointer.is_symlink()):
        return None, []
    if pointer.is_symlink() or not pointer.is_file():
        return None, ["latest: not a plain file (ignored)"]
    try:
        with pointer.open("rb") as f:
            raw = f.read(_POINTER_MAX + 1)
    except OSError as err:
        return None, [f"latest: unreadable ({err.strerror})"]
    text = raw.decode("utf-8", "replace").strip()
    if len(raw) > _POINTER_MAX or _number(text) is None:
        return None, [f"latest names {text[:120]!r}, not a checkpoint folder of this run (ignored)"]
    return root / text, []


def _numbered_folders(root: Path) -> list[tuple[int, Path]]:
    """(N, folder) of every ``iter_N`` entry of ``root``, highest N first."""
    if not root.is_dir():
        return []
    numbers = [(_number(p.name), p) for p in root.iterdir()]
    return sorted(((n, p) for n, p in numbers if n is not None), reverse=True)


def _number(name: str) -> int | None:
    """N of a checkpoint folder's name ``iter_N`` as ``save_checkpoint`` writes it (at least
    six digits, no extra zeros), else None (not a checkpoint: never read nor pruned)."""
    m = _NAME.fullmatch(name)
    return int(m.group(1)) if m and name == f"iter_{int(m.group(1)):06d}" else None


def _state_view(path: Path) -> Any:
    """The state of ``path`` with each tensor as its ``TensorInfo`` (no tensor data read)."""
    return _view(*_read_skeleton(path))


def _view(skeleton: Any, infos: dict[str, TensorInfo]) -> Any:
    try:
        return _decode(skeleton, infos)
    except (TypeError, ValueError, OverflowError) as err:  # e.g. an unhashable dict key
        raise CheckpointError(f"{STATE_JSON}: malformed ({err})") from None


def _read_skeleton(path: Path) -> tuple[Any, dict[str, TensorInfo]]:
    """(state.json's checked skeleton, the header of each tensor of state.safetensors)."""
    file = path / STATE_JSON
    try:
        size = file.stat().st_size
        if size > _STATE_JSON_MAX:
            raise CheckpointError(f"{STATE_JSON} has {size} bytes, more than {_STATE_JSON_MAX}")
        saved = json.loads(file.read_text())
    except RecursionError:
        raise CheckpointError(f"{STATE_JSON} is nested too deep") from None
    except (OSError, ValueError) as err:  # not JSON, not UTF-8, unreadable
        raise CheckpointError(f"{STATE_JSON} is unreadable ({str(err)[:80]})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        found = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{STATE_JSON}: format {str(found)[:40]!r}, expected {FORMAT!r}")
    infos = _tensor_infos(path / STATE_TENSORS)
    _check_skeleton(saved.get("state"), infos, "state", 0)
    return saved["state"], infos


def _tensor_infos(file: Path) -> dict[str, TensorInfo]:
    try:
        with safe_open(str(file), framework="pt") as f:
            slices = {k: f.get_slice(k) for k in f.keys()}  # noqa: SIM118 - not a dict
            return {k: TensorInfo(v.get_dtype(), tuple(v.get_shape())) for k, v in slices.items()}
    except Exception as err:  # safetensors raises its own error types
        raise CheckpointError(f"{STATE_TENSORS} is unreadable ({str(err)[:80]})") from None


def _check_skeleton(obj: Any, infos: dict[str, TensorInfo], where: str, depth: int) -> None:
    """Raise CheckpointError unless ``obj`` is a skeleton ``flatten`` could have written."""
    if depth > _MAX_DEPTH:
        raise CheckpointError(f"{STATE_JSON}: {where} is nested deeper than {_MAX_DEPTH}")
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            _check_skeleton(x, infos, f"{where}[{i}]", depth + 1)
        return
    if not isinstance(obj, dict):
        return  # None, bool, int, float, str: JSON scalars
    tags = [k for k in obj if k.startswith("__")]
    if not tags:
        for k, v in obj.items():
            _check_skeleton(v, infos, f"{where}.{k}", depth + 1)
        return
    problem = _tag_problem(obj, tags[0], infos)
    if problem is not None:
        raise CheckpointError(f"{STATE_JSON}: {where}: {problem}")
    if tags[0] == "__tuple__":
        _check_skeleton(obj["__tuple__"], infos, where, depth + 1)
    elif tags[0] == "__dict__":
        for k, v in obj["__dict__"]:
            _check_skeleton(k, infos, f"{where}[key]", depth + 1)
            _check_skeleton(v, infos, f"{where}[{str(k)[:20]}]", depth + 1)


def _tag_problem(obj: dict[str, Any], tag: str, infos: dict[str, TensorInfo]) -> str | None:
    """Why a tagged value (``{"__tensor__": name}``, ...) is malformed, or None."""
    keys, value = set(obj), obj[tag]
    if tag in ("__tensor__", "__ndarray__"):
        ok = keys == {tag} and isinstance(value, str) and value in infos
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


def _npscalar_problem(obj: dict[str, Any], keys: set[str]) -> str | None:
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
        np.dtype(dtype).type(value)
    except (OverflowError, ValueError, TypeError) as err:
        return f"__npscalar__ value does not fit {dtype} ({str(err)[:60]})"
    return None


def load_state(path: Path) -> dict[str, Any]:
    """The trainer state saved in checkpoint folder ``path`` (never unpickles anything),
    checked against the schema before its tensors are read (CheckpointError naming the key)."""
    if not (path / STATE_JSON).is_file() and (path / LEGACY_STATE).exists():
        raise CheckpointError(_legacy_message(path))
    try:
        skeleton, infos = _read_skeleton(path)
        check_trainer_state(_view(skeleton, infos))
        tensors = load_file(str(path / STATE_TENSORS))
    except StateError as err:
        raise CheckpointError(f"checkpoint {path}: {STATE_JSON}: {err}") from None
    except CheckpointError as err:
        raise CheckpointError(f"checkpoint {path}: {err}") from None
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} state is unreadable: {err}") from err
    return unflatten(skeleton, tensors)


def _fsync_tree(path: Path, recursive: bool = True) -> None:
    """Flush the files of ``path`` (and its sub-folders) and the folder entries to disk."""
    folders = [path, *(p for p in path.rglob("*") if p.is_dir())] if recursive else [path]
    for folder in folders:
        for p in [*(f for f in folder.iterdir() if f.is_file()), folder]:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
