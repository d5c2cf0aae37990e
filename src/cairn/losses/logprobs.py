"""Token log-probabilities and entropies from logits, optionally under constrained decoding.

Unconstrained, the policy is softmax(z) over the vocabulary V:
    log pi(y) = z_y - logsumexp(z),    H = logsumexp(z) - sum_v softmax(z)_v z_v.
Constrained to an allowed set S (e.g. the env's admissible actions' next tokens), the
policy is the softmax renormalised over S: the same formulas with z restricted to S.

``allowed`` is a LongTensor (B, T, K) of allowed token ids per position, padded with -1.
A position whose ids are all -1 is unrestricted (the full softmax), the convention of
``cairn.data.tokens.ScoreInputs`` for mixing constrained and free rows in one batch.
A token outside a non-empty allowed set has probability 0, so log-probability -inf.

Memory: no (B, T, V) log_softmax copy is kept. The log-probability needs one gather and
one logsumexp; the entropy keeps the softmax (needed for its gradient) and contracts it
with the logits without a further (B, T, V) product. float16/bfloat16 logits are upcast to
float32 first, because a half-precision logsumexp is too coarse for importance ratios.

``logprobs_from_hidden`` starts one step earlier, from the final hidden states of the
response positions only (N, H) and the model's output head: it applies the head and the
formulas above to ``chunk`` positions at a time, each chunk under activation checkpointing,
so neither the forward nor the backward pass holds more than one chunk's (chunk, V)
logits, whatever the number of positions (the idea of verl's and Liger's fused or chunked
linear cross-entropy, here for log-probs and entropy under any loss).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from cairn.losses._checks import describe

__all__ = ["entropy_from_logits", "logprobs_from_hidden", "logprobs_from_logits"]


def logprobs_from_logits(
    logits: torch.Tensor, tokens: torch.Tensor, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """log pi(tokens) (B, T) from ``logits`` (B, T, V) and ``tokens`` (B, T) int ids in [0, V).

    With ``allowed`` (B, T, K), the softmax is renormalised over the allowed ids
    (all -1 at a position: unrestricted there).
    """
    z = _check_logits(logits)
    tokens = _check_tokens(tokens, z)
    z_tok = z.gather(-1, tokens[..., None]).squeeze(-1)  # (B, T)
    if allowed is None:
        return z_tok - torch.logsumexp(z, dim=-1)
    allowed = _check_allowed(allowed, z)
    zs, valid, row_ok = _restrict(z, allowed)
    lse = torch.logsumexp(zs, dim=-1)  # (B, T), finite on every row
    found = (valid & (allowed == tokens[..., None])).any(dim=-1)  # (B, T)
    out = torch.where(found, z_tok - lse, torch.full((), float("-inf"), dtype=z.dtype))
    free = ~row_ok  # unrestricted positions: full softmax, computed for those rows only
    if free.any():
        out = out.index_put((free,), z_tok[free] - torch.logsumexp(z[free], dim=-1))
    return out


def entropy_from_logits(logits: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy (B, T) of softmax(``logits``) (B, T, V), in nats.

    With ``allowed`` (B, T, K), the entropy of the softmax renormalised over the allowed ids
    (log K for uniform logits; all -1 at a position: unrestricted there).
    """
    z = _check_logits(logits)
    if allowed is None:
        return _entropy(z, z)
    zs, valid, row_ok = _restrict(z, _check_allowed(allowed, z))
    h = _entropy(zs, zs.masked_fill(~valid, 0.0))  # padding ids: probability 0, z read as 0
    free = ~row_ok  # unrestricted positions: entropy of the full softmax
    if free.any():
        z_free = z[free]  # (N, V)
        h = h.index_put((free,), _entropy(z_free, z_free))
    return h


def logprobs_from_hidden(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    tokens: torch.Tensor,
    allowed: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk: int = 1024,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(tokens) (N,) and entropy (N,) (None without ``with_entropy``) of the softmax
    of ``head(hidden) / temperature``, ``chunk`` positions at a time.

    hidden (N, H): final hidden states of the positions that predict ``tokens`` (N,);
    head: (n, H) -> (n, V) logits (the model's output layer); allowed (N, K) or None, as in
    ``logprobs_from_logits``. With gradients on and more than one chunk, each chunk is
    recomputed in the backward pass instead of keeping its logits, so peak memory is about
    chunk x V floats.
    """
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        raise ValueError(f"hidden must be an (N, H) tensor, got {describe(hidden)}")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of positions, got {chunk!r}")
    if not isinstance(tokens, torch.Tensor) or tokens.shape != hidden.shape[:1]:
        raise ValueError(
            f"tokens must be an (N,) = ({len(hidden)},) tensor, got {describe(tokens)}"
        )
    if allowed is not None and (allowed.dim() != 2 or len(allowed) != len(hidden)):
        raise ValueError(f"allowed must be an (N, K) tensor with N = {len(hidden)}, "
                         f"got {describe(allowed)}")  # fmt: skip

    def part(h: torch.Tensor, tok: torch.Tensor, ids: torch.Tensor | None) -> tuple:
        z = head(h[None]).float() / temperature  # (1, n, V)
        ids = None if ids is None else ids[None]
        lp = logprobs_from_logits(z, tok[None], ids)[0]  # (n,)
        return (lp, entropy_from_logits(z, ids)[0]) if with_entropy else (lp,)

    # One chunk: its logits are alive at the peak either way, so recomputing them in the
    # backward pass would only cost time (the tiny default's whole minibatch is one chunk).
    grad = torch.is_grad_enabled() and len(hidden) > chunk
    outs = []
    for lo in range(0, len(hidden), chunk):
        args = (hidden[lo : lo + chunk], tokens[lo : lo + chunk])
        ids = None if allowed is None else allowed[lo : lo + chunk]
        if grad:
            outs.append(checkpoint(part, *args, ids, use_reentrant=False, preserve_rng_state=False))
        else:
            outs.append(part(*args, ids))
    if not outs:  # no position: empty results, still attached to hidden's graph
        empty = hidden[:, :1].float().sum(-1)  # (0,)
        return empty, (empty if with_entropy else None)
    logp = torch.cat([o[0] for o in outs])
    return logp, (torch.cat([o[1] for o in outs]) if with_entropy else None)


def _entropy(z: torch.Tensor, z_finite: torch.Tensor) -> torch.Tensor:
    """H = lse(z) - sum_v p_v z_v over the last dim; ``z_finite`` is z with -inf read as 0."""
    lse = torch.logsumexp(z, dim=-1)  # (B, T)
    p = torch.softmax(z, dim=-1)  # (B, T, V); 0 where z = -inf
    # (..., 1, V) @ (..., V, 1): the contraction without materialising p * z
    pz = torch.matmul(p[..., None, :], z_finite[..., :, None])[..., 0, 0]  # (B, T)
    return lse - pz


def _restrict(
    z: torch.Tensor, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits over the allowed ids (B, T, K), -inf at padding ids, plus masks.

    Returns (zs (B, T, K), valid (B, T, K), row_ok (B, T)). A row with no allowed id keeps
    finite values so logsumexp and its gradient stay finite there; callers overwrite it.
    """
    valid = allowed >= 0
    row_ok = valid.any(dim=-1)
    zs = z.gather(-1, allowed.clamp(min=0))
    return zs.masked_fill(~valid & row_ok[..., None], float("-inf")), valid, row_ok


def _check_logits(logits: torch.Tensor) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(f"logits must be a (B, T, V) tensor, got {describe(logits)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a floating tensor, got {logits.dtype}")
    if logits.dtype in (torch.float16, torch.bfloat16):
        return logits.float()
    return logits


def _check_tokens(tokens: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.shape != z.shape[:-1]:
        raise ValueError(
            f"tokens must be an integer tensor of shape (B, T) = {tuple(z.shape[:-1])}, "
            f"got {describe(tokens)}"
        )
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= z.shape[-1]):
        raise ValueError(f"tokens must lie in [0, V) = [0, {z.shape[-1]}); pad with a real id")
    return tokens.long()


def _check_allowed(allowed: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    if not isinstance(allowed, torch.Tensor) or allowed.dim() != 3:
        raise ValueError(f"allowed must be a (B, T, K) tensor, got {describe(allowed)}")
    if allowed.shape[:-1] != z.shape[:-1] or allowed.shape[-1] == 0:
        raise ValueError(
            f"allowed has shape {tuple(allowed.shape)}; expected (B, T, K) with "
            f"(B, T) = {tuple(z.shape[:-1])} and K >= 1"
        )
    if allowed.is_floating_point() or allowed.dtype == torch.bool:
        raise ValueError(f"allowed must hold integer token ids, got dtype {allowed.dtype}")
    allowed = allowed.long()
    if allowed.numel() and (allowed.min() < -1 or allowed.max() >= z.shape[-1]):
        raise ValueError(f"allowed ids must lie in [0, V) = [0, {z.shape[-1]}), or be -1 (padding)")
    ordered = allowed.sort(dim=-1).values
    if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
        raise ValueError("allowed lists an id twice at some position; each id may appear once")
    return allowed
