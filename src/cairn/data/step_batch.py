"""The step table: one row per step (one prompt -> action sample), columns as numpy arrays.

Required columns (docs/architecture.md, "Data contracts"):
    group   (N,) int64    episodes started from the same task instance share it
    episode (N,) int64    episode id (unique across the batch)
    t       (N,) int64    turn index inside the episode, 0-based
    reward  (N,) float64  immediate reward of the step (shaped rewards included)
    anchor  (N,) object   hashable key of the raw observation the step acted on

Optional columns, used by some estimators, are listed in ``OPTIONAL_COLUMNS``. Rows may
come in any order; estimators must not depend on it. ``crit`` (the name the docs publish)
is accepted and read as an alias of ``after_error``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["COLUMN_ALIASES", "OPTIONAL_COLUMNS", "REQUIRED_COLUMNS", "StepBatch", "register_column"]

_V = TypeVar("_V")

REQUIRED_COLUMNS: dict[str, DTypeLike] = {
    "group": np.int64,
    "episode": np.int64,
    "t": np.int64,
    "reward": np.float64,
    "anchor": object,
}

OPTIONAL_COLUMNS: dict[str, DTypeLike] = {
    "success": np.bool_,  # episode outcome, repeated on each of its rows
    "value": np.float64,  # estimate of V(s_t), the state before the step
    "info_gain": np.float64,  # IGPO turn reward
    "path": object,  # tuple of branch ids from the group's root (tree rollouts)
    "source": np.int64,  # cairn.data.episode.Source: 0 on-policy, 1 demonstration, 2 memory
    "after_error": np.bool_,  # ELPO: at or after the first irrecoverable step
}

# Published names that map to a column: ``crit`` (the docs' name of ELPO's column).
COLUMN_ALIASES: dict[str, str] = {"crit": "after_error"}


def register_column(name: str, dtype: DTypeLike) -> None:
    """Declare an optional column (for extensions that add their own estimator inputs)."""
    if name in REQUIRED_COLUMNS:
        raise ValueError(f"{name!r} is a required column")
    OPTIONAL_COLUMNS[name] = dtype


def _resolve_aliases(optional: dict[str, _V]) -> dict[str, _V]:
    out = dict(optional)
    for alias, name in COLUMN_ALIASES.items():
        if alias in out:
            if name in out:
                raise ValueError(f"give column {name!r} or its alias {alias!r}, not both")
            out[name] = out.pop(alias)
    return out


def _as_column(name: str, values: Iterable[object], dtype: DTypeLike) -> np.ndarray:
    if dtype is object:
        if isinstance(values, np.ndarray) and values.ndim != 1:
            raise ValueError(
                f"column {name!r} must be 1-D, got shape {values.shape} "
                "(build tuples into a 1-D object array, e.g. with np.fromiter)"
            )
        if isinstance(values, np.ndarray) and values.dtype == object:
            return values
        return np.fromiter(values, dtype=object)  # keeps tuples as elements
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"column {name!r} must be 1-D, got shape {arr.shape}")
    integer = np.issubdtype(np.dtype(dtype), np.integer)
    if integer and arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
        raise ValueError(f"column {name!r} must hold integers, got {arr.dtype}")
    out = arr.astype(dtype, copy=False)
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        bad = int(np.flatnonzero(~np.isfinite(out))[0])
        raise ValueError(f"column {name!r} has a non-finite value at row {bad}: {out[bad]}")
    return out


@dataclass(frozen=True)
class StepBatch:
    """Immutable table of steps. Access columns as attributes (``batch.reward``) or by key."""

    columns: Mapping[str, np.ndarray]

    @classmethod
    def from_columns(
        cls,
        *,
        group: Iterable[object],
        episode: Iterable[object],
        t: Iterable[object],
        reward: Iterable[object],
        anchor: Iterable[object],
        **optional: Iterable[object],
    ) -> StepBatch:
        """Validate and build; ``crit=`` is accepted for ``after_error=`` (COLUMN_ALIASES)."""
        optional = _resolve_aliases(optional)
        unknown = sorted(set(optional) - set(OPTIONAL_COLUMNS))
        if unknown:
            raise ValueError(
                f"unknown StepBatch column(s) {unknown}; required: {list(REQUIRED_COLUMNS)}, "
                f"optional: {list(OPTIONAL_COLUMNS)}"
            )
        given = {"group": group, "episode": episode, "t": t, "reward": reward, "anchor": anchor}
        given.update(optional)
        dtypes = {**REQUIRED_COLUMNS, **OPTIONAL_COLUMNS}
        cols = {k: _as_column(k, v, dtypes[k]) for k, v in given.items()}
        lengths = {k: len(v) for k, v in cols.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"StepBatch columns differ in length: {lengths}")
        if len(cols["t"]) and cols["t"].min() < 0:
            raise ValueError("column 't' must be >= 0")
        for i, key in enumerate(cols["anchor"]):
            if not isinstance(key, Hashable):
                raise ValueError(f"anchor at row {i} is not hashable: {type(key).__name__}")
        return cls(cols)

    def __len__(self) -> int:
        return len(self.columns["group"])

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.columns[COLUMN_ALIASES.get(name, name)]
        except KeyError:
            raise AttributeError(
                f"StepBatch has no column {name!r}; it has {sorted(self.columns)}"
            ) from None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[COLUMN_ALIASES.get(name, name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and COLUMN_ALIASES.get(name, name) in self.columns

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def require(self, *names: str, estimator: str = "") -> None:
        """Raise ValueError if any of ``names`` is missing (for estimators' inputs)."""
        missing = [n for n in names if n not in self.columns]
        if missing:
            who = f"estimator {estimator!r} " if estimator else ""
            raise ValueError(f"{who}needs StepBatch column(s) {missing}; batch has {list(self)}")

    def take(self, index: np.ndarray) -> StepBatch:
        """Rows ``index`` (a permutation, a subset or a boolean mask) as a new batch."""
        return StepBatch({k: v[index] for k, v in self.columns.items()})

    @staticmethod
    def concat(batches: list[StepBatch]) -> StepBatch:
        """Stack batches with the same columns (ids are kept as they are)."""
        keys = list(batches[0].columns)
        for b in batches[1:]:
            if list(b.columns) != keys:
                raise ValueError(f"cannot concat batches with columns {keys} and {list(b)}")
        return StepBatch({k: np.concatenate([b.columns[k] for b in batches]) for k in keys})
