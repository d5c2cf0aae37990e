"""``cairn.advantages.compute``: the advantage stage both trainers call (estimate, then the
configured whitening)."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.advantages import compute, estimate
from cairn.data import StepBatch
from cairn.train.schema import AdvantageConfig


def _batch(rewards: list[float]) -> StepBatch:
    """One group of single-step episodes with the given rewards."""
    n = len(rewards)
    return StepBatch.from_columns(
        group=np.zeros(n, np.int64), episode=np.arange(n), t=np.zeros(n, np.int64),
        reward=np.array(rewards, np.float64), anchor=np.array(["s"] * n, dtype=object),
    )  # fmt: skip


def test_whitening_uses_the_unbiased_std():
    # GRPO with norm=mean: A = R - mean(R) = [-2, -1, 3]. Whitened with the unbiased std
    # sqrt((4 + 1 + 9) / 2) = sqrt(7) (the population std sqrt(14 / 3) would give
    # -0.926 for the first row): A / (sqrt(7) + 1e-6).
    cfg = AdvantageConfig(name="grpo", options={"norm": "mean"}, whiten=True)
    adv, terms = compute(_batch([0.0, 1.0, 5.0]), cfg)
    np.testing.assert_allclose(adv, np.array([-2.0, -1.0, 3.0]) / (np.sqrt(7) + 1e-6))
    assert adv[0] == pytest.approx(-0.755929, abs=1e-6) and terms == {}


def test_without_whitening_it_is_the_estimate():
    cfg = AdvantageConfig(name="grpo", options={"norm": "mean"})
    batch = _batch([0.0, 1.0, 5.0])
    np.testing.assert_array_equal(compute(batch, cfg)[0], estimate("grpo", batch, norm="mean"))


def test_a_single_row_whitens_to_zero():
    # no spread to scale by: the trainer's rule, now both trainers'
    cfg = AdvantageConfig(name="grpo", options={"norm": "mean"}, whiten=True)
    np.testing.assert_array_equal(compute(_batch([3.0]), cfg)[0], [0.0])


def test_terms_come_with_the_advantage():
    cfg = AdvantageConfig(name="gigpo", whiten=True)
    adv, terms = compute(_batch([0.0, 1.0, 5.0]), cfg)
    assert set(terms) == {"A_E", "A_S", "G"} and adv.shape == (3,)
