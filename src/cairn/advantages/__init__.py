"""Advantage estimators: one signature, one registry.

    from cairn.advantages import estimate, available
    adv = estimate("gigpo", batch, gamma=0.95, step_weight=1.0, norm="mean")  # (N,) float64
    adv, terms = estimate_terms("gigpo", batch)   # terms: {"A_E": (N,), "A_S": (N,), "G": (N,)}
    adv, terms = compute(batch, cfg.advantage)    # the trainers' stage: estimate, whiten

Every estimator is a pure function ``fn(batch: StepBatch, *, option=default, ...)`` returning
per-step advantages (N,) float64 in the batch's row order, registered by name in its own
module. Unknown names, unknown options and bad option values raise ValueError saying what
is allowed; ``validate_options`` checks a config without running anything; ``options_of``
gives the defaults; ``terms_of`` the names of the terms ``estimate_terms`` returns (named
(N,) components of the advantage, ``Terms``: GiGPO's ``A = A_E + omega * A_S``);
``compute`` is what both trainers (cairn's and verl's) call: the configured estimator, then
the configured whitening (``_compute``). The option checks ``register(name, checks=...)``
takes are built with ``real``, ``choice``, ``flag``, ``matrix_or_none`` (or ``Check``
itself); ``DISCOUNT``, ``NORM`` and ``WEIGHT`` are the common ones.
Shared primitives: ``segments`` (segment maths), ``episodes`` (``Episodes``), ``trees``.
"""

import importlib
import pkgutil

from cairn.advantages._compute import compute
from cairn.advantages._registry import (
    DISCOUNT,
    NORM,
    WEIGHT,
    Check,
    Terms,
    available,
    choice,
    estimate,
    estimate_terms,
    flag,
    matrix_or_none,
    options_of,
    real,
    register,
    register_terms,
    terms_of,
    validate_options,
)
from cairn.advantages.segments import EPS

# Every public module of this package is imported, so an estimator registers itself by
# existing: adding one touches its own module, not this file.
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DISCOUNT",
    "EPS",
    "NORM",
    "WEIGHT",
    "Check",
    "Terms",
    "available",
    "choice",
    "compute",
    "estimate",
    "estimate_terms",
    "flag",
    "matrix_or_none",
    "options_of",
    "real",
    "register",
    "register_terms",
    "terms_of",
    "validate_options",
]
