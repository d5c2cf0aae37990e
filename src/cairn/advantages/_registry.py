"""The estimator registry: names -> pure functions of a StepBatch, with checked options.

An estimator is registered with a decorator in its own module:

    @register("rloo")
    def rloo(batch: StepBatch) -> np.ndarray: ...

    @register_terms("gigpo", checks={"gamma": DISCOUNT, ...}, term_names=("A_E", "A_S", "G"))
    def gigpo(batch: StepBatch, *, gamma: float = 0.95, ...) -> tuple[np.ndarray, Terms]:
        return A, {"A_E": A_E, "A_S": A_S, "G": G}

Options are the function's keyword-only parameters; each must have a default and a
``Check`` (so no value reaches the maths unchecked). An estimator with terms (named (N,)
components such as GiGPO's ``A_E``) is written once, as its terms function returning
``(advantage, {name: (N,) array})``: ``register_terms`` derives the plain estimator (the
advantage alone) from it, so the signature is written once. (``register(..., terms=twin)``
takes a hand-written twin with the same options instead; registration checks that both
signatures agree.) The decorators return a wrapper that validates options, so a direct call
``gigpo(batch, norm="bad")`` fails the same way as ``estimate("gigpo", ...)``.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

import numpy as np

from cairn.data import StepBatch

__all__ = [
    "DISCOUNT",
    "NORM",
    "WEIGHT",
    "Check",
    "Estimator",
    "Terms",
    "available",
    "choice",
    "estimate",
    "estimate_terms",
    "flag",
    "get",
    "matrix_or_none",
    "options_of",
    "real",
    "register",
    "register_terms",
    "terms_of",
    "validate_options",
]

#: An estimator's terms: named (N,) per-row arrays beside its advantage (GiGPO's ``A_E``).
Terms = dict[str, np.ndarray]

_R = TypeVar("_R")


@dataclass(frozen=True)
class Check:
    """A validator for one option value: ``ok(value)`` and a phrase saying what is allowed."""

    allowed: str
    ok: Callable[[object], bool]


def choice(*values: object) -> Check:
    """The value must be one of ``values``."""
    scalar = (str, bool, int, float, type(None))
    return Check(", ".join(map(repr, values)), lambda v: isinstance(v, scalar) and v in values)


def _is_real(v: object) -> TypeGuard[numbers.Real]:
    return isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)


def real(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    none_ok: bool = False,
) -> Check:
    """A finite real number (not a bool) in the interval given by ``lo``/``hi``."""
    allowed = "a finite number"
    if lo is not None or hi is not None:
        left = "(-inf" if lo is None else f"{'(' if lo_open else '['}{lo}"
        right = "inf)" if hi is None else f"{hi}{')' if hi_open else ']'}"
        allowed += f" in {left}, {right}"
    allowed += " or None" if none_ok else ""

    def ok(v: object) -> bool:
        if v is None:
            return none_ok
        if not _is_real(v) or not math.isfinite(float(v)):
            return False
        x = float(v)
        above = lo is None or (x > lo if lo_open else x >= lo)
        below = hi is None or (x < hi if hi_open else x <= hi)
        return above and below

    return Check(allowed, ok)


def flag() -> Check:
    """A bool (True/False), not an int or a string."""
    return Check("True or False", lambda v: isinstance(v, bool | np.bool_))


def matrix_or_none() -> Check:
    """None or a 2-D array of finite numbers (its row count is checked against the batch)."""

    def ok(v: object) -> bool:
        if v is None:
            return True
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        return arr.ndim == 2 and bool(np.all(np.isfinite(arr)))

    return Check("None or a 2-D array of finite numbers, one row per step", ok)


NORM = choice("mean", "mean_std")  # x - mean  |  (x - mean)/(std + eps)
DISCOUNT = real(0.0, 1.0)  # gamma, lambda
WEIGHT = real()  # any finite real


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function, option defaults, checks and optional terms twin."""

    name: str
    fn: Callable[..., np.ndarray]
    defaults: dict[str, object]
    checks: dict[str, Check]
    terms: Callable[..., tuple[np.ndarray, Terms]] | None
    term_names: tuple[str, ...]


_REGISTRY: dict[str, Estimator] = {}


def _keyword_defaults(fn: Callable[..., object], name: str) -> dict[str, object]:
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        params[0].POSITIONAL_ONLY,
        params[0].POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(f"estimator {name!r} must take the StepBatch as first positional argument")
    defaults = {}
    for p in params[1:]:
        if p.kind is not p.KEYWORD_ONLY or p.default is p.empty:
            raise TypeError(
                f"estimator {name!r}: option {p.name!r} must be keyword-only with a default"
            )
        defaults[p.name] = p.default
    return defaults


def register(
    name: str,
    *,
    checks: dict[str, Check] | None = None,
    terms: Callable[..., tuple[np.ndarray, Terms]] | None = None,
    term_names: tuple[str, ...] = (),
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Decorator registering ``fn(batch, *, opt=default, ...) -> (N,) float64`` as ``name``.

    ``terms`` (with the same options) returns ``(advantage, terms)`` whose keys are exactly
    ``term_names``.
    """
    checks = dict(checks or {})
    if (terms is None) != (not term_names):
        raise TypeError(f"estimator {name!r}: give both terms and term_names, or neither")

    def deco(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if name in _REGISTRY:
            raise ValueError(f"estimator {name!r} is already registered")
        defaults = _keyword_defaults(fn, name)
        if set(checks) != set(defaults):
            raise TypeError(
                f"estimator {name!r}: checks {sorted(checks)} must cover exactly its options "
                f"{sorted(defaults)}"
            )
        if terms is not None and _keyword_defaults(terms, name) != defaults:
            raise TypeError(f"estimator {name!r}: its terms function has different options")
        entry = Estimator(name, fn, defaults, checks, terms, tuple(term_names))
        for key, value in defaults.items():  # the defaults themselves must pass
            _check_value(entry, key, value)
        checked = _checked(name, fn)
        checked_terms = None if terms is None else _checked(name, terms)
        _REGISTRY[name] = Estimator(
            name, checked, defaults, checks, checked_terms, tuple(term_names)
        )
        return checked

    return deco


def register_terms(
    name: str,
    *,
    checks: dict[str, Check] | None = None,
    term_names: tuple[str, ...],
) -> Callable[[Callable[..., tuple[np.ndarray, Terms]]], Callable[..., np.ndarray]]:
    """Decorator registering ``terms_fn(batch, *, opt=default, ...) -> (advantage, terms)``.

    The plain estimator ``name`` (the advantage alone, (N,) float64) is derived from it, with
    the same options and checks; the decorator returns that plain estimator. ``terms`` keys
    must be exactly ``term_names``.
    """
    if not term_names:
        raise TypeError(f"estimator {name!r}: register_terms needs term_names")

    def deco(terms_fn: Callable[..., tuple[np.ndarray, Terms]]) -> Callable[..., np.ndarray]:
        @functools.wraps(terms_fn)
        def advantage(batch: StepBatch, **options: object) -> np.ndarray:
            return terms_fn(batch, **options)[0]

        return register(name, checks=checks, terms=terms_fn, term_names=term_names)(advantage)

    return deco


def _checked(name: str, fn: Callable[..., _R]) -> Callable[..., _R]:
    @functools.wraps(fn)
    def checked(batch: StepBatch, **options: object) -> _R:
        validate_options(name, options)
        return fn(batch, **options)

    return checked


def available() -> list[str]:
    """Names accepted by ``estimate``."""
    return sorted(_REGISTRY)


def get(name: str) -> Estimator:
    """The registry entry of ``name``; unknown names raise ValueError listing ``available()``."""
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown advantage estimator {name!r}; available: {', '.join(available())}"
        )
    return _REGISTRY[name]


def options_of(name: str) -> dict[str, object]:
    """``{option: default}`` of estimator ``name``."""
    return dict(get(name).defaults)


def terms_of(name: str) -> tuple[str, ...]:
    """Names of the terms ``estimate_terms(name, ...)`` returns (``()`` when it has none)."""
    return get(name).term_names


def _describe(entry: Estimator) -> str:
    if not entry.defaults:
        return "(none)"
    return ", ".join(f"{k}={v!r}" for k, v in entry.defaults.items())


def _check_value(entry: Estimator, key: str, value: object) -> None:
    check = entry.checks[key]
    if not check.ok(value):
        raise ValueError(
            f"estimator {entry.name!r}: option {key}={value!r} is not allowed; "
            f"allowed: {check.allowed}"
        )


def validate_options(name: str, options: Mapping[str, object]) -> None:
    """Check ``options`` for estimator ``name`` without running it (for the config loader).

    Raises ValueError for an unknown name (listing ``available()``), an unknown option
    (listing the allowed options with their defaults) or a value out of its allowed set.
    """
    entry = get(name)
    unknown = sorted(set(options) - set(entry.defaults))
    if unknown:
        raise ValueError(
            f"estimator {name!r} has no option {', '.join(map(repr, unknown))}; "
            f"allowed (with defaults): {_describe(entry)}"
        )
    for key, value in options.items():
        _check_value(entry, key, value)


def estimate(name: str, batch: StepBatch, **options: object) -> np.ndarray:
    """Per-step advantages (N,) float64 of estimator ``name`` on ``batch``, rows in batch order."""
    return get(name).fn(batch, **options)


def estimate_terms(name: str, batch: StepBatch, **options: object) -> tuple[np.ndarray, Terms]:
    """``(advantage, terms)``: the advantage of ``estimate`` plus named (N,) components.

    ``terms`` maps names (e.g. GiGPO's ``"A_E"``, ``"A_S"``, ``"G"``) to per-row arrays in
    batch order; estimators without terms return ``{}``. The advantage is identical to
    ``estimate(name, batch, **options)``.
    """
    entry = get(name)
    if entry.terms is None:
        return entry.fn(batch, **options), {}
    adv, terms = entry.terms(batch, **options)
    if tuple(terms) != entry.term_names:
        raise RuntimeError(
            f"estimator {name!r} returned terms {list(terms)}, declared {entry.term_names}"
        )
    return adv, terms
