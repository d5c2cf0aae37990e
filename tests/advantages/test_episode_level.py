"""Worked examples: GRPO / Dr.GRPO, RLOO, REINFORCE++ (episode-level baselines)."""

from __future__ import annotations

import numpy as np
import pytest
from adv_batches import from_episodes

from cairn.advantages import estimate

# Group 1: returns 1, 0, 0, 1 (episodes of different lengths); group 2: one episode, R = 5.
BATCH = from_episodes(
    dict(group=1, reward=[0.0, 1.0]),
    dict(group=1, reward=[0.0]),
    dict(group=1, reward=[0.0, 0.0, 0.0]),
    dict(group=1, reward=[1.0]),
    dict(group=2, reward=[2.0, 3.0]),
)


def per_episode(batch, values: dict[int, float]) -> np.ndarray:
    return np.array([values[e] for e in batch.episode.tolist()])


def test_grpo_worked_example() -> None:
    # Group 1: mean 0.5, unbiased std sqrt(1/3) = 0.5773503, so
    # A = +-0.5 / (0.5773503 + 1e-6) = +-0.8660239 on every step of the episode.
    # Group 2 has one episode: A = 0.
    want = per_episode(
        BATCH, {100: 0.8660239, 101: -0.8660239, 102: -0.8660239, 103: 0.8660239, 104: 0}
    )
    np.testing.assert_allclose(estimate("grpo", BATCH), want, rtol=1e-6)


def test_dr_grpo_drops_the_std() -> None:
    # norm="mean": R - 0.5 = +-0.5
    want = per_episode(BATCH, {100: 0.5, 101: -0.5, 102: -0.5, 103: 0.5, 104: 0})
    np.testing.assert_allclose(estimate("grpo", BATCH, norm="mean"), want)


def test_grpo_equal_returns_give_zero() -> None:
    batch = from_episodes(dict(group=0, reward=[0.3]), dict(group=0, reward=[0.1, 0.2]))
    np.testing.assert_allclose(estimate("grpo", batch), 0.0, atol=1e-9)


def test_rloo_worked_example() -> None:
    # episode 100: 1 - mean(0, 0, 1) = 2/3; episode 101: 0 - mean(1, 0, 1) = -2/3.
    want = per_episode(BATCH, {100: 2 / 3, 101: -2 / 3, 102: -2 / 3, 103: 2 / 3, 104: 0})
    np.testing.assert_allclose(estimate("rloo", BATCH), want)


def test_rloo_is_a_rescaled_group_mean_baseline() -> None:
    # R_i - mean_{j != i} R_j = k/(k-1) * (R_i - mean_j R_j) for a group of k episodes.
    np.testing.assert_allclose(
        estimate("rloo", BATCH), 4 / 3 * estimate("grpo", BATCH, norm="mean")
    )


def test_reinforce_pp_worked_example() -> None:
    # Centred returns per episode: group 1 (R 1, 0) -> 0.5, -0.5; group 2 (R 2, 2, 5, mean 3)
    # -> -1, -1, 2. Over these five episodes: mean 0, unbiased std sqrt(6.5/4) = 1.2747549,
    # so A = x / (1.2747549 + 1e-6): 0.5 -> 0.3922320, -1 -> -0.7844639, 2 -> 1.5689279.
    batch = from_episodes(
        dict(group=1, reward=[1.0]),
        dict(group=1, reward=[0.0, 0.0]),
        dict(group=2, reward=[2.0]),
        dict(group=2, reward=[1.0, 1.0]),
        dict(group=2, reward=[5.0]),
    )
    want = per_episode(
        batch, {100: 0.3922320, 101: -0.3922320, 102: -0.7844639, 103: -0.7844639, 104: 1.5689279}
    )
    np.testing.assert_allclose(estimate("reinforce_pp", batch), want, rtol=1e-6)


def test_reinforce_pp_counts_each_episode_once() -> None:
    # Lengthening an episode (zero rewards) changes nothing: statistics are per episode.
    short = from_episodes(
        dict(group=1, reward=[1.0]), dict(group=2, reward=[0.0]), dict(group=2, reward=[3.0])
    )
    long = from_episodes(
        dict(group=1, reward=[1.0, 0, 0, 0]),
        dict(group=2, reward=[0.0]),
        dict(group=2, reward=[3.0]),
    )
    a, b = estimate("reinforce_pp", short), estimate("reinforce_pp", long)
    first = lambda batch, adv: {e: adv[i] for i, e in enumerate(batch.episode.tolist())}  # noqa: E731
    assert first(short, a) == pytest.approx(first(long, b))
