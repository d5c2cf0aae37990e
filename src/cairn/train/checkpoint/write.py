"""Writing checkpoints: ``save_checkpoint``, the checkpoint of a trainer after its latest
iteration (its weights, the trainer state, the config it was trained with).

A checkpoint is written to a temporary folder and renamed into place, then ``latest`` is
replaced atomically, so a run killed at any moment leaves the previous checkpoint intact.

Pruning (``checkpoint.keep``) keeps the checkpoint just written and the newest ``keep - 1``
valid ones before it, by the iteration their validated state holds; it removes invalid
checkpoints and any numbered after the one just written (left by a run that was resumed
from before them).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from transformers.utils import logging as hf_logging

from cairn.policies.modelio import SavesPretrained, save_pretrained
from cairn.train.checkpoint.codec import flatten
from cairn.train.checkpoint.layout import (
    FORMAT,
    MANIFEST,
    STATE_JSON,
    STATE_TENSORS,
    CheckpointWriteError,
    folder_name,
    numbered_folders,
)
from cairn.train.checkpoint.read import checkpoint_iteration
from cairn.train.checkpoint.resume import Resumable, trainer_state
from cairn.train.checkpoint.runconfig import CONFIG_COPY, config_sha256, config_writer

if TYPE_CHECKING:
    from cairn.train.checkpoint.state import TrainState
    from cairn.train.schema import Config

__all__ = ["save_checkpoint", "write_checkpoint"]

Writer = Callable[[Path], None]  # writes a sub-folder of a checkpoint


def save_checkpoint(
    run_dir: Path,
    cfg: Config,
    parts: Resumable,
    state: TrainState,
    wall_seconds: float,
    unsaved_rows: Iterable[dict[str, Any]],
) -> Path:
    """Write the checkpoint of a trainer after iteration ``state.iteration`` into
    ``run_dir/checkpoints`` and prune to ``cfg.checkpoint.keep``: the policy's weights and
    tokenizer, each side learner's weights in a folder of its name, the trainer state
    (``resume.trainer_state``, with the config's hash) and a copy of ``cfg``."""
    extra: dict[str, Writer] = {x.name: x.save for x in parts.learners}
    extra[CONFIG_COPY] = config_writer(cfg)  # the config it was trained with
    saved = trainer_state(parts, state, wall_seconds, unsaved_rows)
    saved["config_sha256"] = config_sha256(cfg)
    policy = parts.policy
    return write_checkpoint(
        run_dir, state.iteration, policy.model, policy.tokenizer, saved, cfg.checkpoint.keep, extra
    )


def write_checkpoint(
    run_dir: Path,
    iteration: int,
    model: torch.nn.Module,
    tokenizer: SavesPretrained,
    state: dict[str, Any],
    keep: int,
    extra: dict[str, Writer] | None = None,
) -> Path:
    """Write ``checkpoints/iter_{iteration}`` atomically and prune to ``keep`` checkpoints:
    this one and the newest ``keep - 1`` valid ones before it (module docstring).

    ``extra`` maps sub-folder names to writers (e.g. a critic's weights) run inside it.
    """
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = folder_name(iteration)
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
    tokenizer: SavesPretrained,
    state: dict[str, Any],
    extra: dict[str, Writer],
) -> None:
    """Every file of a checkpoint into ``tmp``, the manifest last, all fsynced."""
    save_pretrained(model, tmp, safe_serialization=True)  # transformers or peft
    tokenizer.save_pretrained(tmp)
    for folder, write in extra.items():
        write(tmp / folder)
    _write_state(tmp, state)
    _write_manifest(tmp)
    _fsync_tree(tmp)


def _write_state(folder: Path, state: dict[str, Any]) -> None:
    """``state`` as ``state.json`` (skeleton) + ``state.safetensors`` (its tensors)."""
    skeleton, tensors = flatten(state)
    save_file(tensors, str(folder / STATE_TENSORS))
    text = json.dumps({"format": FORMAT, "state": skeleton})
    (folder / STATE_JSON).write_text(text)


def _write_manifest(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    sizes = {p.relative_to(folder).as_posix(): p.stat().st_size for p in files}
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": sizes}, indent=1))


def _prune(root: Path, current: Path, iteration: int, keep: int) -> None:
    """Keep ``current`` and the newest ``keep - 1`` valid checkpoints numbered before it."""
    older = []
    for number, folder in numbered_folders(root):
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
