"""A run's config over its life: the hash a checkpoint records, the check a resume makes,
and the amendments ``--set`` makes on a resume.

config.yaml is written once, when the run is created, and never rewritten. A checkpoint
records ``config_sha256`` (sha256 of the resolved config's canonical JSON, `config_sha256`)
and keeps a copy of that config (``run_config/config.yaml`` inside the checkpoint folder,
covered by its manifest). ``--set`` on a resume appends an amendment to amendments.jsonl
(time, the checkpoint's iteration, key/old/new), so the config of a checkpoint at
iteration N is config.yaml with the amendments made before N applied in order.

A resume (`resume_config`) refuses, in one line, a config.yaml that is missing, empty,
unparsable or whose replayed config does not hash to what the checkpoint recorded; it
names the differing keys by comparing with the checkpoint's copy. Why a copy in the
checkpoint rather than only the hash: after an edit the hash says *that* config.yaml
changed, not *what*, and the original survives nowhere else; the copy travels and is
pruned with its checkpoint, and the hash in state.json vouches for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import yaml

from cairn._errors import ConfigError
from cairn.data import rundir
from cairn.train.config import validate_config as _validate
from cairn.train.configfile import apply_overrides, config_mapping
from cairn.train.schema import Config

__all__ = [
    "CONFIG_COPY",
    "Change",
    "apply_changes",
    "config_changes",
    "config_sha256",
    "config_writer",
    "describe_changes",
    "record_amendment",
    "resume_config",
    "saved_config",
]

CONFIG_COPY = "run_config"  # sub-folder of a checkpoint holding the config it was trained with
_STATE_JSON_MAX = 64 << 20  # state.json is the small half of a state: counters, evals, RNGs
_MISSING = object()


class Change(TypedDict):
    """One config key that differs: its dotted ``key``, the ``old`` and the ``new`` value
    (absent where the key is absent on that side)."""

    key: str
    old: NotRequired[object]
    new: NotRequired[object]


def config_sha256(cfg: Config | dict[str, Any]) -> str:
    """sha256 (64 hex digits) of the resolved config as canonical JSON (sorted keys)."""
    data = cfg.model_dump(mode="json") if isinstance(cfg, Config) else cfg
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def config_writer(cfg: Config) -> Callable[[Path], None]:
    """A checkpoint ``extra`` writer: the resolved config as ``<folder>/config.yaml``."""
    text = yaml.safe_dump(cfg.model_dump(), sort_keys=False)

    def write(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / rundir.CONFIG).write_text(text)

    return write


# -- differences between two resolved configs ---------------------------------------------------
def config_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[Change]:
    """A ``Change`` for every dotted key whose value differs (recursing where both sides
    are mappings); a key absent on one side has no ``old`` / ``new``."""
    out: list[Change] = []
    for k in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(k, _MISSING), new.get(k, _MISSING)
        key = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, f"{key}.")
        elif a != b or type(a) is not type(b):
            change: Change = {"key": key}
            if a is not _MISSING:
                change["old"] = a
            if b is not _MISSING:
                change["new"] = b
            out.append(change)
    return out


def apply_changes(data: dict[str, Any], changes: Sequence[Change]) -> dict[str, Any]:
    """Set (or, without ``new``, delete) each change's dotted key in ``data``, in place."""
    for change in changes:
        *path, last = str(change["key"]).split(".")
        node = data
        for p in path:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        if "new" in change:
            node[last] = change["new"]
        else:
            node.pop(last, None)
    return data


def describe_changes(changes: Sequence[Change], limit: int = 6) -> str:
    """``key (old -> new), ...`` on one line, values cut short, at most ``limit`` keys."""

    def short(change: Change, side: Literal["old", "new"]) -> str:
        if side not in change:
            return "(absent)"
        text = " ".join(repr(change[side]).split())
        return text if len(text) <= 40 else f"{text[:37]}..."

    parts = [f"{c['key']} ({short(c, 'old')} -> {short(c, 'new')})" for c in changes[:limit]]
    more = f" and {len(changes) - limit} more" if len(changes) > limit else ""
    return ", ".join(parts) + more


# -- what a checkpoint says about its config ----------------------------------------------------
def saved_config(ckpt: Path) -> tuple[int | None, str | None, dict[str, Any] | None]:
    """(iteration, config_sha256, config copy) a checkpoint folder records; None for each
    it does not hold or that is unreadable (the checkpoint's own validation reports that)."""
    iteration = sha = None
    try:
        path = ckpt / "state.json"
        if path.stat().st_size <= _STATE_JSON_MAX:
            state = json.loads(path.read_text()).get("state", {})
            iteration = state.get("iteration")
            sha = state.get("config_sha256")
    except (OSError, ValueError, AttributeError):
        pass
    if not isinstance(iteration, int) or isinstance(iteration, bool):
        digits = ckpt.name.removeprefix("iter_")
        iteration = int(digits) if digits.isdigit() else None
    if not (isinstance(sha, str) and len(sha) == 64):
        sha = None
    copy = None
    with suppress(ConfigError):
        copy = config_mapping(ckpt / CONFIG_COPY / rundir.CONFIG, allow_empty=False)
    return iteration, sha, copy


def _replayed(run_dir: Path, before: int, upto: int | None = None) -> dict[str, Any]:
    """config.yaml (refused when missing, empty, unparsable, too big) with the amendments
    made at iterations < ``before`` applied, then those made at ``before`` .. ``upto``."""
    path = run_dir / rundir.CONFIG
    if not path.is_file():
        raise ConfigError(f"--resume {run_dir}: config.yaml is missing (not a run directory?)")
    try:
        data = config_mapping(path, allow_empty=False)
        rows = rundir.read_amendments(run_dir)
    except ValueError as err:
        raise ConfigError(f"--resume {run_dir}: {' '.join(str(err).split())}") from None
    last = before - 1 if upto is None else upto
    for number, row in enumerate(rows, 1):
        if not _is_amendment(row):
            raise ConfigError(
                f"--resume {run_dir}: amendments.jsonl row {number} is not an amendment "
                "(iteration, changes: [{key, old, new}]); fix or delete that line"
            )
        if row["iteration"] <= last:
            apply_changes(data, row["changes"])
    return data


def _is_amendment(row: Mapping[str, object]) -> bool:
    it, changes = row.get("iteration"), row.get("changes")
    return (
        isinstance(it, int)
        and not isinstance(it, bool)
        and isinstance(changes, list)
        and all(isinstance(c, dict) and isinstance(c.get("key"), str) for c in changes)
    )


def resume_config(run_dir: Path, ckpt: Path, overrides: list[str]) -> Config:
    """The config to resume ``run_dir`` from checkpoint ``ckpt`` with: config.yaml and its
    amendments as the checkpoint was trained with them (checked against its hash), then
    the amendments already made at this checkpoint, then ``overrides``. ConfigError in
    one line when config.yaml is missing, empty, unparsable or differs (naming the keys).
    Only the config returned is checked against the registries (its ``imports`` loaded);
    config.yaml and the checkpoint's copy are validated as data, so code that they alone
    name never runs (``cairn.train.trust`` asks for consent to what the result names)."""
    run_dir = Path(run_dir)
    iteration, sha, copy = saved_config(ckpt)
    before = iteration if iteration is not None else 0
    base = _replayed(run_dir, before)
    try:
        base_cfg = _validate(dict(base), check=False)  # its plugins: only the final config's
    except ConfigError as err:
        raise ConfigError(f"--resume {run_dir}: config.yaml: {err}") from None
    if sha is not None and config_sha256(base_cfg) != sha:
        raise ConfigError(_mismatch(run_dir, ckpt, base_cfg, sha, copy))
    data = _replayed(run_dir, before, upto=before) if iteration is not None else base
    apply_overrides(data, overrides)
    return _validate(data)


def _mismatch(run_dir: Path, ckpt: Path, cfg: Config, sha: str, copy: dict[str, Any] | None) -> str:
    head = f"--resume {run_dir}: config.yaml differs from the config {ckpt.name} was trained with"
    tail = (
        "; restore it (config.yaml is never rewritten) and pass a change with --set key=value "
        "(recorded in amendments.jsonl)"
    )
    try:
        original = _validate(dict(copy), check=False) if copy is not None else None
    except ConfigError:
        original = None
    if original is None or config_sha256(original) != sha:
        return f"{head} (the checkpoint holds no intact copy to name the keys){tail}"
    changes = config_changes(original.model_dump(mode="json"), cfg.model_dump(mode="json"))
    return f"{head}: {describe_changes(changes)}{tail}"


def record_amendment(run_dir: Path, iteration: int, cfg: Config) -> list[Change]:
    """On a resume from the checkpoint at ``iteration``: forget the amendments made after it,
    then append what ``cfg`` changes from config.yaml + the remaining amendments (nothing
    when unchanged, or when config.yaml cannot be read: the caller checked it). Returns the
    changes recorded."""
    run_dir = Path(run_dir)
    try:
        rundir.keep_amendments(run_dir, iteration)
        prior = _validate(_replayed(run_dir, iteration, upto=iteration), check=False)
    except (ConfigError, ValueError):
        return []
    changes = config_changes(prior.model_dump(mode="json"), cfg.model_dump(mode="json"))
    if changes:
        when = datetime.now(UTC).isoformat(timespec="seconds")
        rundir.append_amendment(run_dir, {"time": when, "iteration": iteration, "changes": changes})
    return changes
