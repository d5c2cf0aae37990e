"""How a token is drawn from a row's probabilities: one draw per row as
``torch.multinomial`` gives it (``multinomial``), the same draws for a subset of a batch's
rows as the whole batch would get (``Rows``: finished rows dropped), or by inverting the
CDF (``GenerationOptions.inverse_cdf``); and the top-p filter (``top_p_filter``).
``cairn.policies.hf.HFPolicy`` samples with these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Rows", "multinomial", "top_p_filter"]


@dataclass
class Rows:
    """Batch rows ``index`` (B,) of a batch of ``total`` rows."""

    index: torch.Tensor
    total: int


def multinomial(
    probs: torch.Tensor,
    generator: torch.Generator | None,
    rows: Rows | None,
    inverse_cdf: bool = False,
) -> torch.Tensor:
    """One draw per row of ``probs`` (B, V), as ``torch.multinomial(probs, 1)``.

    When the B rows are part of a larger batch, the draws are those the whole batch would
    get: torch draws one sample as argmax(p / q) with q ~ Exp(1) of p's shape (the
    Gumbel-max trick in exponential form), so q is drawn for all ``rows.total`` rows and
    the running rows' share of it used; the random stream, and so every later token, is
    the same as when no row was dropped.
    """
    if inverse_cdf:
        return _inverse_cdf(probs, generator, rows)
    if rows is None or len(rows.index) == rows.total:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    q = probs.new_empty((rows.total, probs.shape[-1])).exponential_(1, generator=generator)
    return (probs / q[rows.index.to(probs.device)]).argmax(-1)


def _inverse_cdf(
    probs: torch.Tensor, generator: torch.Generator | None, rows: Rows | None
) -> torch.Tensor:
    """One draw per row of ``probs`` (B, V) by inverting its CDF: the first token whose
    cumulative mass exceeds u x (the row's mass), u ~ U[0, 1) drawn for every row of the
    whole batch (``rows.total``) and the running rows' share used, as in ``multinomial``.
    B uniforms per token instead of B x V exponentials: on a CPU with a 49k vocabulary the
    exponentials cost ~40 ms per decode step of 32 rows, a sixth of the rollout."""
    total = probs.shape[0] if rows is None else rows.total
    device = generator.device if generator is not None else probs.device
    u = torch.rand(total, generator=generator, dtype=torch.float64, device=device)
    if rows is not None:
        u = u[rows.index.to(device)]
    cum = probs.double().cumsum(-1)
    target = (u.to(probs.device) * cum[:, -1])[:, None]
    tok = (cum <= target).sum(-1)  # the first index whose cumulative mass exceeds target
    # target == the row's mass (u's rounding): the last token with mass, never a zero one
    last = (probs > 0).cumsum(-1).argmax(-1)
    return torch.minimum(tok, last)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set of tokens whose mass reaches ``top_p``."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(-1)
    drop = cum - sorted_p > top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)
