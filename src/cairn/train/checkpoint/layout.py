"""A checkpoint folder's layout and names, and the errors of reading and writing one.

    checkpoints/iter_000012/   model.safetensors, config.json, tokenizer files,
                               state.json + state.safetensors (the trainer state),
                               run_config/config.yaml (the config it was trained with),
                               <learner>/ (a learner's own weights, e.g. the critic's),
                               manifest.json (every file's size; written last)
    checkpoints/latest         the name of the newest complete checkpoint

No file of a checkpoint is a pickle: ``PICKLE_SUFFIXES`` names the files a loader might
unpickle (``torch.load`` of ``pytorch_model.bin``, ...); a checkpoint holding one is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "FORMAT",
    "MANIFEST",
    "PICKLE_SUFFIXES",
    "STATE_JSON",
    "STATE_JSON_MAX",
    "STATE_TENSORS",
    "CheckpointError",
    "CheckpointWarning",
    "CheckpointWriteError",
    "folder_name",
    "folder_number",
    "numbered_folders",
    "pickle_files",
]

STATE_JSON, STATE_TENSORS, MANIFEST = "state.json", "state.safetensors", "manifest.json"
FORMAT = "cairn-state/1"
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")
STATE_JSON_MAX = 256 * 2**20  # bytes of state.json (and manifest.json) read at most
_NAME = re.compile(r"iter_(\d{1,10})")  # a checkpoint folder; ``latest`` must name one


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (incomplete, corrupt, or holding a pickle); a
    ValueError, so the CLI reports it as one line like any bad input."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped for an older complete one."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written, whatever its writer raised (safetensors'
    SafetensorError on a full disk is not an OSError): an OSError, so the CLI ends the run
    in one line naming the intact checkpoint to resume from."""


def folder_name(iteration: int) -> str:
    """The folder of the checkpoint written after ``iteration``: ``iter_`` and six digits."""
    return f"iter_{iteration:06d}"


def folder_number(name: str) -> int | None:
    """N of a checkpoint folder's name ``iter_N`` as ``folder_name`` writes it (at least
    six digits, no extra zeros), else None (not a checkpoint: never read nor pruned)."""
    m = _NAME.fullmatch(name)
    return int(m.group(1)) if m and name == folder_name(int(m.group(1))) else None


def numbered_folders(root: Path) -> list[tuple[int, Path]]:
    """(N, folder) of every ``iter_N`` entry of ``root``, highest N first."""
    if not root.is_dir():
        return []
    numbers = [(folder_number(p.name), p) for p in root.iterdir()]
    return sorted(((n, p) for n, p in numbers if n is not None), reverse=True)


def pickle_files(path: Path) -> list[str]:
    """The names of the files under checkpoint folder ``path`` a loader might unpickle."""
    return sorted(p.name for p in path.rglob("*") if p.suffix in PICKLE_SUFFIXES)
