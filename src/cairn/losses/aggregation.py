"""Loss aggregation: reduce a per-token (B, T) tensor to a scalar, one function, named modes.

Rows are sequences (one step's action), columns action-token positions.

Modes
    token-mean               sum(v*m) / sum(m): every valid token weighs the same
                             (DAPO, arXiv 2503.14476, token-level policy-gradient loss).
    seq-mean-token-sum       mean over sequences of sum_t v*m.
    seq-mean-token-mean      mean over sequences of the per-sequence token mean
                             (the original GRPO objective, arXiv 2402.03300, eq. 3).
    seq-mean-token-sum-norm  sum(v*m) / (B * norm_len), norm_len a constant, default T
                             (Dr.GRPO, arXiv 2503.20783: no length normalisation bias).

A sequence with no valid token is ignored by the seq-mean modes (it is not counted in B).
A batch with no valid token gives 0, still connected to ``values`` so ``backward()`` works.
Masked entries of ``values`` are never read (NaN or inf there cannot leak into the result).
"""

from __future__ import annotations

import torch

from cairn.losses._checks import check_finite_number, token_mask
from cairn.losses._names import AGG_MODES

__all__ = ["AGG_MODES", "aggregate"]


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    norm_len: float | None = None,
) -> torch.Tensor:
    """Reduce ``values`` (B, T) over the valid tokens of ``mask`` (B, T) to a 0-dim tensor.

    ``norm_len`` is used only by ``seq-mean-token-sum-norm`` (default ``T = values.shape[-1]``).
    Raises ValueError on an unknown ``mode``, mismatched shapes or a non-positive ``norm_len``.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; allowed: {', '.join(AGG_MODES)}")
    if not isinstance(values, torch.Tensor) or values.dim() != 2:
        raise ValueError(f"values must be a (B, T) tensor, got {getattr(values, 'shape', values)}")
    m = token_mask(mask, values)
    v = torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))
    count = m.sum(dim=-1).to(values.dtype)  # (B,) valid tokens per sequence
    if mode == "token-mean":
        return v.sum() / count.sum().clamp(min=1.0)
    seq_valid = count > 0  # (B,)
    n_seq = seq_valid.sum().to(values.dtype).clamp(min=1.0)
    seq_sum = v.sum(dim=-1)  # (B,)
    if mode == "seq-mean-token-sum":
        return seq_sum.sum() / n_seq
    if mode == "seq-mean-token-mean":
        return (seq_sum / count.clamp(min=1.0)).sum() / n_seq
    length = max(values.shape[-1], 1) if norm_len is None else _check_norm_len(norm_len)
    return seq_sum.sum() / (n_seq * length)


def _check_norm_len(norm_len: float) -> float:
    value = check_finite_number(norm_len, "norm_len")
    if value <= 0:
        raise ValueError(f"norm_len must be > 0 (a constant token budget), got {norm_len!r}")
    return value
