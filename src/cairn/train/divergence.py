"""Divergence: a run whose policy no longer gives finite numbers ends in one line naming the
likely cause (the learning rate), before it writes a checkpoint of the damaged weights.

Three signs, each checked where it first shows:
    updates     every actor update of ``NONFINITE_ITERATIONS`` iterations in a row skipped
                for a non-finite loss or gradient (`cairn.train.learners.apply_gradients`
                skips one; a run that skips them all learns nothing)
    weights     before a checkpoint, the policy's logits on a short probe are not all
                finite (an enormous step leaves finite weights whose outputs overflow);
                the damaged weights are not saved, so the last checkpoint stays usable
    sampling    sampling met non-finite probabilities (torch's "probability tensor
                contains either inf, nan or element < 0")

Light to import (the CLI names `TrainingDiverged`); torch is imported by the probe only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "NONFINITE_ITERATIONS",
    "DivergenceWatch",
    "TrainingDiverged",
    "finite_outputs",
    "nonfinite_sampling",
]

NONFINITE_ITERATIONS = 2  # iterations in a row with every actor update skipped
_PROBE_TOKENS = 8  # length of the probe sequence


class TrainingDiverged(RuntimeError):
    """The policy's numbers are no longer finite: one line naming the likely cause."""


def _message(iteration: int, lr: float, what: str) -> str:
    return (
        f"the run diverged at iteration {iteration}: {what}; the likely cause is the "
        f"learning rate optim.lr={lr:g}: lower it (and keep optim.max_grad_norm small, "
        "e.g. 1.0)"
    )


class DivergenceWatch:
    """Counts the iterations in a row whose actor updates were all skipped."""

    def __init__(self, limit: int = NONFINITE_ITERATIONS):
        self.limit, self.streak = limit, 0

    def after_update(self, metrics: Mapping[str, object], iteration: int, lr: float) -> None:
        """TrainingDiverged once ``limit`` iterations in a row took no actor update (the
        actor reports ``actor/loss`` only for the updates it took)."""
        skipped = metrics.get("actor/skipped_updates", 0)
        self.streak = self.streak + 1 if skipped and "actor/loss" not in metrics else 0
        if self.streak >= self.limit:
            what = (
                "the loss or its gradient was not finite in every update of "
                f"{self.streak} iterations in a row"
            )
            raise TrainingDiverged(_message(iteration, lr, what))

    @staticmethod
    def weights(ok: bool, iteration: int, lr: float) -> None:
        """TrainingDiverged unless ``ok`` (the policy's outputs are finite)."""
        if not ok:
            what = (
                "after its update the policy's outputs are not finite (these weights "
                "were not checkpointed)"
            )
            raise TrainingDiverged(_message(iteration, lr, what))

    @staticmethod
    def sampling(err: BaseException, iteration: int, lr: float) -> None:
        """TrainingDiverged (from None) when ``err`` is sampling from non-finite
        probabilities; otherwise nothing (the caller re-raises ``err``)."""
        if nonfinite_sampling(err):
            raise TrainingDiverged(
                _message(iteration, lr, "sampling met non-finite probabilities (inf or nan)")
            ) from None


def nonfinite_sampling(err: BaseException) -> bool:
    """Is ``err`` torch's refusal to sample from a non-finite probability tensor?"""
    return isinstance(err, RuntimeError) and "probability tensor contains" in str(err)


def finite_outputs(model: torch.nn.Module, vocab: int, device: torch.device | str) -> bool:
    """Are ``model``'s logits finite on a short probe (token ids 1..8)?"""
    import torch

    ids = (torch.arange(_PROBE_TOKENS, device=device) % max(vocab - 1, 1) + 1)[None]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits
    finally:
        model.train(was_training)
    return bool(torch.isfinite(logits).all())
