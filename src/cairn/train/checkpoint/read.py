"""Reading checkpoints: ``latest_checkpoint(run_dir)``, the newest valid checkpoint of a run
as a ``Checkpoint``, whose methods load its trainer state, put it back into a trainer and
give the config to resume with. Nothing is ever unpickled.

Nothing read back is trusted. A checkpoint is validated before it is used: the manifest's
files all present with their sizes, every safetensors header readable, no symbolic link and
no path leaving the folder, no file a loader might unpickle, and the state checked against
its schema (``schema``: keys, types, ranges, shapes, sizes; ``state.json`` at most 256 MiB,
its tags well formed, numpy scalars numeric only) with its ``iteration`` equal to the
folder's number. ``latest`` must name an ``iter_N`` folder of this run (an absolute path or
``..`` is ignored). A newest checkpoint that fails for any reason is skipped with a
``CheckpointWarning`` for the newest valid one, by iteration number.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from safetensors import safe_open
from safetensors.torch import load_file

from cairn.train.checkpoint import runconfig
from cairn.train.checkpoint.codec import Json, check_skeleton, decode
from cairn.train.checkpoint.layout import (
    FORMAT,
    MANIFEST,
    STATE_JSON,
    STATE_JSON_MAX,
    STATE_TENSORS,
    CheckpointError,
    CheckpointWarning,
    folder_number,
    numbered_folders,
    pickle_files,
)
from cairn.train.checkpoint.resume import Resumable, restore_trainer
from cairn.train.checkpoint.schema import StateError, TensorInfo, check_trainer_state

if TYPE_CHECKING:
    from cairn.train.checkpoint.state import TrainState
    from cairn.train.schema import Config

__all__ = ["Checkpoint", "check_checkpoint", "checkpoint_iteration", "latest_checkpoint"]

_POINTER_MAX = 64  # bytes of ``latest`` read at most


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder ``path`` (``run_dir/checkpoints/iter_N``) of a run."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def run_dir(self) -> Path:
        return self.path.parent.parent

    def load_state(self) -> dict[str, Any]:
        """The trainer state saved here, checked against the schema before its tensors are
        read (CheckpointError naming the key)."""
        return _load_state(self.path)

    def restore(self, parts: Resumable, state: TrainState) -> dict[str, Any]:
        """Put the trainer state saved here back into the loop's ``state`` and the
        ``parts`` (``resume.restore_trainer``); returns that state."""
        saved = self.load_state()
        restore_trainer(parts, state, saved)
        return saved

    def resume_config(self, overrides: list[str]) -> Config:
        """The config to resume the run from here with (``runconfig.resume_config``)."""
        return runconfig.resume_config(self.run_dir, self.path, overrides)

    def record_amendment(self, cfg: Config) -> list[runconfig.Change]:
        """On a resume from here: record in amendments.jsonl what ``cfg`` changes from the
        config this checkpoint was trained with (``runconfig.record_amendment``)."""
        iteration = folder_number(self.name)
        if iteration is None:
            raise ValueError(f"{self.path} is not a checkpoint folder (iter_N) of a run")
        return runconfig.record_amendment(self.run_dir, iteration, cfg)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The newest valid checkpoint of ``run_dir``, or None when it has none.

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
            return Checkpoint(named)
        skipped.append(f"{named.name}: {problem}")
    folders = [f for _, f in numbered_folders(root) if f != named]
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
            return Checkpoint(folder)
        skipped.append(f"{folder.name}: {problem}")
    raise CheckpointError(f"no complete checkpoint in {root}: {'; '.join(skipped)}")


def check_checkpoint(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be used, or None when it is complete and its
    state passes the schema (module docstring).

    Raises CheckpointError for a checkpoint holding a file a loader might unpickle.
    """
    if path.is_symlink():
        return "the folder is a symbolic link (a checkpoint holds only its own files)"
    if not path.is_dir():
        return "the folder is missing"
    links = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_symlink())
    if links:
        return f"{links[0]} is a symbolic link (a checkpoint holds only its own files)"
    _refuse_pickles(path)
    manifest = path / MANIFEST
    if not manifest.is_file():
        return f"{MANIFEST} is missing (the checkpoint was never finished)"
    problem = _files_problem(path, manifest)
    if problem is None:
        problem = _state_problem(path)
    return problem


def checkpoint_iteration(path: Path) -> int | None:
    """The iteration of checkpoint ``path`` read from its validated state, or None when it
    cannot be used for any reason (``check_checkpoint``)."""
    try:
        if check_checkpoint(path) is not None:
            return None
        number = folder_number(path.name)  # check_checkpoint compared it with the state's
        return number if number is not None else check_trainer_state(_state_view(path))
    except (CheckpointError, StateError):
        return None


def _refuse_pickles(path: Path) -> None:
    pickles = pickle_files(path)
    if pickles:
        raise CheckpointError(
            f"checkpoint {path} holds pickle files {pickles}, which cairn never writes nor "
            "loads (unpickling a file can run any code in it)"
        )


def _files_problem(path: Path, manifest: Path) -> str | None:
    """Why the manifest's files do not match the folder, or None."""
    try:
        if manifest.stat().st_size > STATE_JSON_MAX:
            return f"{MANIFEST} is larger than {STATE_JSON_MAX} bytes"
        sizes = json.loads(manifest.read_text())["files"]
        if not isinstance(sizes, dict):
            raise TypeError("files is not a mapping")
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__}: {str(err)[:80]})"
    for rel, size in sizes.items():
        if (problem := _file_problem(path, rel, size)) is not None:
            return problem
    if STATE_JSON not in sizes or STATE_TENSORS not in sizes:
        return f"{STATE_JSON} / {STATE_TENSORS} are not in the manifest"
    return None


def _file_problem(path: Path, rel: str, size: object) -> str | None:
    """Why the manifest's entry ``rel``: ``size`` does not match the folder, or None."""
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
    return None


def _state_problem(path: Path) -> str | None:
    """Why the state of ``path`` breaks the schema or its folder's number, or None."""
    try:
        iteration = check_trainer_state(_state_view(path))
    except StateError as err:
        return f"{STATE_JSON}: {err}"
    except CheckpointError as err:
        return str(err)
    number = folder_number(path.name)
    if number is not None and number != iteration:
        return f"{STATE_JSON}: iteration: {iteration}, but the folder is {path.name}"
    return None


def _unreadable(file: Path) -> str | None:
    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as err:  # safetensors raises its own error types
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


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
    if len(raw) > _POINTER_MAX or folder_number(text) is None:
        return None, [f"latest names {text[:120]!r}, not a checkpoint folder of this run (ignored)"]
    return root / text, []


def _state_view(path: Path) -> object:
    """The state of ``path`` with each tensor as its ``TensorInfo`` (no tensor data read)."""
    return _view(*_read_skeleton(path))


def _view(skeleton: Json, infos: dict[str, TensorInfo]) -> object:
    try:
        return decode(skeleton, infos)
    except (TypeError, ValueError, OverflowError) as err:  # e.g. an unhashable dict key
        raise CheckpointError(f"{STATE_JSON}: malformed ({err})") from None


def _read_skeleton(path: Path) -> tuple[Json, dict[str, TensorInfo]]:
    """(state.json's checked skeleton, the header of each tensor of state.safetensors)."""
    file = path / STATE_JSON
    try:
        size = file.stat().st_size
        if size > STATE_JSON_MAX:
            raise CheckpointError(f"{STATE_JSON} has {size} bytes, more than {STATE_JSON_MAX}")
        saved = json.loads(file.read_text())
    except RecursionError:
        raise CheckpointError(f"{STATE_JSON} is nested too deep") from None
    except (OSError, ValueError) as err:  # not JSON, not UTF-8, unreadable
        raise CheckpointError(f"{STATE_JSON} is unreadable ({str(err)[:80]})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        found = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{STATE_JSON}: format {str(found)[:40]!r}, expected {FORMAT!r}")
    infos = _tensor_infos(path / STATE_TENSORS)
    check_skeleton(saved.get("state"), infos)
    return cast(Json, saved["state"]), infos


def _tensor_infos(file: Path) -> dict[str, TensorInfo]:
    try:
        with safe_open(str(file), framework="pt") as f:
            slices = {k: f.get_slice(k) for k in f.keys()}  # noqa: SIM118 - not a dict
            return {k: TensorInfo(v.get_dtype(), tuple(v.get_shape())) for k, v in slices.items()}
    except Exception as err:  # safetensors raises its own error types
        raise CheckpointError(f"{STATE_TENSORS} is unreadable ({str(err)[:80]})") from None


def _load_state(path: Path) -> dict[str, Any]:
    """The trainer state saved in checkpoint folder ``path``, checked against the schema
    before its tensors are read (CheckpointError naming the key)."""
    _refuse_pickles(path)
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
    return cast("dict[str, Any]", decode(skeleton, tensors))
