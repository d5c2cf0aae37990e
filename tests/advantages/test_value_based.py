"""Worked examples: VinePPO, GAE and IGPO (per-step advantages from values / turn rewards)."""

from __future__ import annotations

import numpy as np
import pytest
from adv_batches import from_episodes, random_batch

from cairn.advantages import estimate, estimate_terms

# rewards [0, 0, 1], V(s_t) = [0.5, 0.6, 0.9], V after the last step = 0
EPISODE = from_episodes(
    dict(group=0, reward=[0.0, 0.0, 1.0], value=[0.5, 0.6, 0.9]), shuffle_seed=None
)


def test_vineppo_worked_example() -> None:
    # A_t = r_t + V_{t+1} - V_t: 0 + 0.6 - 0.5 = 0.1, 0 + 0.9 - 0.6 = 0.3, 1 + 0 - 0.9 = 0.1
    np.testing.assert_allclose(estimate("vineppo", EPISODE, whiten=False), [0.1, 0.3, 0.1])
    # whitened: mean 1/6, unbiased std 0.1154701 -> (-1/15, 2/15, -1/15) / (0.1154701 + 1e-6)
    np.testing.assert_allclose(
        estimate("vineppo", EPISODE), [-0.5773453, 1.1546905, -0.5773453], rtol=1e-6
    )


def test_vineppo_gamma() -> None:
    # gamma 0.5: 0 + 0.3 - 0.5 = -0.2, 0 + 0.45 - 0.6 = -0.15, 1 + 0 - 0.9 = 0.1
    np.testing.assert_allclose(
        estimate("vineppo", EPISODE, gamma=0.5, whiten=False), [-0.2, -0.15, 0.1]
    )


def test_gae_worked_example() -> None:
    # deltas (gamma 1) = [0.1, 0.3, 0.1]; lam 0.5: A_2 = 0.1, A_1 = 0.3 + 0.5*0.1 = 0.35,
    # A_0 = 0.1 + 0.5*0.35 = 0.275; returns = A + V = [0.775, 0.95, 1.0]
    adv, terms = estimate_terms("gae", EPISODE, lam=0.5)
    np.testing.assert_allclose(adv, [0.275, 0.35, 0.1])
    np.testing.assert_allclose(terms["returns"], [0.775, 0.95, 1.0])


def test_gae_limits() -> None:
    batch = random_batch(np.random.default_rng(0))
    # lam = 0: the one-step TD error, i.e. VinePPO's advantage without whitening
    np.testing.assert_allclose(
        estimate("gae", batch, gamma=0.9, lam=0.0),
        estimate("vineppo", batch, gamma=0.9, whiten=False),
    )
    # lam = 1: returns are the Monte Carlo discounted returns, whatever V is
    _, gigpo_terms = estimate_terms("gigpo", batch, gamma=0.9)
    returns = estimate_terms("gae", batch, gamma=0.9, lam=1.0)[1]["returns"]
    np.testing.assert_allclose(returns, gigpo_terms["G"], atol=1e-12)


def test_gae_returns_checks_options() -> None:
    with pytest.raises(ValueError, match="lam=2"):
        estimate_terms("gae", EPISODE, lam=2)


def test_igpo_worked_example() -> None:
    # Turn rewards: info gain on all turns but the last, the outcome reward on the last.
    #   episode 100: [0.2, 0.4, 1.0]; episode 101: [0.1, 0.0]. Over the group's five rows:
    #   mean 0.34, unbiased std sqrt(0.632/4) = 0.3974921; r~ = (r - 0.34)/(0.3974921 + 1e-6).
    # gamma 1: A_t = sum of r~ from t to the episode's end:
    #   100: [0.58, 0.72, 0.66]/s, 101: [-0.58, -0.34]/s with s = 0.3974931
    batch = from_episodes(
        dict(group=3, reward=[0.0, 0.0, 1.0], info_gain=[0.2, 0.4, 9.0]),
        dict(group=3, reward=[5.0, 0.0], info_gain=[0.1, 9.0]),
        shuffle_seed=None,
    )
    want = [1.4591447, 1.8113520, 1.6604060, -1.4591447, -0.8553607]
    np.testing.assert_allclose(estimate("igpo", batch), want, rtol=1e-6)
    _, terms = estimate_terms("igpo", batch)
    np.testing.assert_allclose(
        terms["r_tilde"] * 0.3974931, [-0.14, 0.06, 0.66, -0.24, -0.34], atol=1e-6
    )


def test_igpo_gamma_discounts_later_turns() -> None:
    # A_0 = r~_0 + gamma r~_1 + gamma^2 r~_2 for the first episode above, gamma 0.5
    batch = from_episodes(
        dict(group=3, reward=[0.0, 0.0, 1.0], info_gain=[0.2, 0.4, 0.0]),
        dict(group=3, reward=[0.0, 0.0], info_gain=[0.1, 0.0]),
        shuffle_seed=None,
    )
    s = 0.3974931
    got = estimate("igpo", batch, gamma=0.5)
    assert got[0] == pytest.approx((-0.14 + 0.5 * 0.06 + 0.25 * 0.66) / s, rel=1e-6)
