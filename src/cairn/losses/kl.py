"""Per-token KL penalty between the current policy and a frozen reference policy.

Tokens are sampled from the current policy, ``d = logp - ref_logp`` = log(pi / pi_ref).
Estimators of KL(pi || pi_ref) from J. Schulman, "Approximating KL Divergence" (2020):

    k1    d                                unbiased, high variance, can be negative
    k2    0.5 * d^2                        biased, low variance, >= 0
    k3    exp(-d) - (-d) - 1               unbiased, low variance, >= 0; GRPO's estimator
          (alias "low_var_kl")             (DeepSeekMath, arXiv 2402.03300, eq. 4);
                                           clamped to [-10, 10] as verl does, after clamping
                                           the log-ratio to [-20, 20] so exp cannot overflow
    abs   |d|

Aliases: "kl" -> k1, "mse" -> k2, "low_var_kl" -> k3.
"""

from __future__ import annotations

import torch

from cairn.losses._checks import check_pair
from cairn.losses._names import KL_KINDS

__all__ = ["KL_KINDS", "kl_penalty"]

_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}

_LOG_RATIO_CLAMP = 20.0
_K3_CLAMP = 10.0


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate (B, T) from ``logp`` (B, T) and ``ref_logp`` (B, T).

    ``ref_logp`` should come from a frozen model (detached); gradients flow into ``logp``.
    Unknown ``kind`` raises ValueError.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_KINDS)}")
    check_pair(logp, ref_logp, "logp", "ref_logp")
    kind = _ALIASES.get(kind, kind)
    d = logp - ref_logp  # (B, T) log(pi / pi_ref)
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d.square()
    if kind == "abs":
        return d.abs()
    neg = (-d).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)  # log(pi_ref / pi)
    return (neg.exp() - neg - 1.0).clamp(-_K3_CLAMP, _K3_CLAMP)
