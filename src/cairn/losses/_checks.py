"""Shared input checks for the loss modules: shapes, dtypes and per-step -> per-token broadcast.

Every function here raises ``ValueError`` naming the argument, what it got and what is allowed.
"""

from __future__ import annotations

import torch

from cairn.losses._names import check_finite_number

__all__ = [
    "check_finite_number",
    "check_pair",
    "describe",
    "per_token",
    "token_mask",
]


def token_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Return ``mask`` as a bool (B, T) tensor; it must have the shape of ``like`` (B, T).

    Non-zero entries mark valid action tokens (a float mask is read as 0/1, not as weights).
    """
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a (B, T) torch.Tensor, got {describe(mask)}")
    if mask.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)}; expected {tuple(like.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def check_pair(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Both must be floating (B, T) tensors of the same shape."""
    for t, n in ((a, name_a), (b, name_b)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{n} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise ValueError(f"{n} must be a floating tensor (float32/float64), got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{n} must have shape (B, T), got {tuple(t.shape)}")
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} {tuple(a.shape)} and {name_b} {tuple(b.shape)} must have the same shape"
        )


def per_token(x: torch.Tensor, like: torch.Tensor, name: str) -> torch.Tensor:
    """Broadcast a per-sequence (B,) tensor to (B, T); a (B, T) tensor is returned as is."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape (B,) or (B, T)")
    if x.shape == like.shape:
        return x
    if x.dim() == 1 and x.shape[0] == like.shape[0]:
        return x[:, None].expand_as(like)
    raise ValueError(
        f"{name} has shape {tuple(x.shape)}; expected (B,) = ({like.shape[0]},) "
        f"or (B, T) = {tuple(like.shape)}"
    )


def describe(x: object) -> str:
    """Short description of a bad argument for error messages: its shape, else its type."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__
