"""What the loss config checks without torch: the names of the aggregation modes and KL
estimators, and the finite-number check. ``cairn.train.schema`` builds the ``loss``
section from ``LossConfig``, and config loading must not import torch (the CLI answers
before torch would have loaded); the loss modules re-export these.
"""

from __future__ import annotations

import math
import numbers
import sys

__all__ = ["AGG_MODES", "KL_KINDS", "check_finite_number"]

#: ``cairn.losses.aggregation.aggregate`` modes (the module docstring says what each does).
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

#: ``cairn.losses.kl.kl_penalty`` estimators, aliases included.
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl", "abs", "kl", "mse")


def check_finite_number(value: object, name: str) -> float:
    """A real, finite number (python or numpy); bools and strings are refused."""
    np = sys.modules.get("numpy")  # a numpy bool exists only once numpy is imported
    if isinstance(value, bool) or (np is not None and isinstance(value, np.bool_)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)
