"""Worked examples, limits and inputs of ProxMO (arXiv 2602.19225)."""

from __future__ import annotations

import numpy as np
import pytest
from adv_batches import from_episodes, random_batch

from cairn.advantages import estimate, estimate_terms
from cairn.advantages.proxmo import psc_weight

# One group of three one-step episodes, returns 1, 0, 0 (success = R > 0.5, so p = 1/3).
BATCH = from_episodes(
    dict(group=0, reward=[1.0]), dict(group=0, reward=[0.0]), dict(group=0, reward=[0.0]),
    shuffle_seed=None,
)  # fmt: skip
FEATURES = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])  # rows 0, 1 parallel; row 2 orthogonal


def test_worked_example() -> None:
    # PSC with alpha 1, beta 1, p = 1/3:
    #   success: w = 1 + sigmoid(2/3) - 0.5 = 1.1607564;  failure: w = 1 + sigmoid(-1/3) - 0.5
    #   = 0.9174298.
    # A_E (mean_std): mean 1/3, std sqrt(1/3) -> 1.1546985, -0.5773493, -0.5773493.
    # PSA with tau 1 on cosine similarities [[1,1,0],[1,1,0],[0,0,1]], G = R = [1, 0, 0]:
    #   rows 0, 1: b = e/(2e+1) = 0.4223188;  row 2: b = 1/(2+e) = 0.2119416.
    adv, terms = estimate_terms("proxmo", BATCH, alpha=1.0, beta=1.0, tau=1.0, features=FEATURES)
    np.testing.assert_allclose(terms["w"], [1.1607564, 0.9174298, 0.9174298], rtol=1e-6)
    np.testing.assert_allclose(terms["A_E"], [1.1546985, -0.5773493, -0.5773493], rtol=1e-6)
    np.testing.assert_allclose(terms["A_S"], [1 - 0.4223188, -0.4223188, -0.2119416], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.9180049, -0.9519962, -0.7416190], rtol=1e-6)


def test_psc_weight_limits_and_ordering() -> None:
    # p = 0: a success is rarest -> sigmoid(1) - 0.5 = 0.2310586 (w = 1.0231059 at beta 0.1);
    # p = 1: a failure is in the easiest group -> sigmoid(-1) - 0.5 = -0.2310586.
    # A success at p = 1 and a failure at p = 0 are left alone (w = 1).
    p = np.array([0.0, 1.0, 1.0, 0.0])
    success = np.array([True, False, True, False])
    np.testing.assert_allclose(psc_weight(success, p, 4.0, 0.1), [1.0231059, 0.9768941, 1.0, 1.0])
    grid = np.linspace(0, 1, 11)
    assert np.all(np.diff(psc_weight(np.ones(11, bool), grid, 4.0, 0.1)) <= 0)  # rarer -> larger
    assert np.all(np.diff(psc_weight(np.zeros(11, bool), grid, 4.0, 0.1)) <= 0)  # easier -> smaller


@pytest.mark.parametrize("seed", [0, 1])
def test_beta_zero_and_tau_to_zero_is_grpo_plus_gigpo_step_term(seed: int) -> None:
    # Anchors of random_batch have distinct TF-IDF vectors inside a group (a distinct "sK"
    # token each), so the softmax at tau -> 0 keeps exactly the rows with an equal anchor.
    batch = random_batch(np.random.default_rng(seed))
    got = estimate("proxmo", batch, beta=0.0, tau=1e-9, gamma=0.9)
    want = estimate("gigpo", batch, gamma=0.9, norm="mean", episode_norm="mean_std")
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_large_tau_uses_the_group_mean_return() -> None:
    batch = random_batch(np.random.default_rng(4))
    _, terms = estimate_terms("proxmo", batch, tau=1e12)
    G = terms["G"]
    means = {g: G[batch.group == g].mean() for g in set(batch.group.tolist())}
    np.testing.assert_allclose(
        terms["A_S"], G - np.array([means[g] for g in batch.group]), atol=1e-9
    )


def test_success_column_overrides_the_return_threshold() -> None:
    # R = 0.2 < 0.5 but success is True: with p = 1/2 the success branch applies,
    # w = 1 + 0.1 * (sigmoid(0.5^4) - 0.5) = 1.0015624.
    batch = from_episodes(
        dict(group=0, reward=[0.2], success=True), dict(group=0, reward=[0.9], success=False)
    )
    _, terms = estimate_terms("proxmo", batch)
    w = dict(zip(batch.episode.tolist(), terms["w"].tolist(), strict=True))
    assert w[100] == pytest.approx(1.0015624, rel=1e-6) and w[101] < 1


def test_success_must_agree_within_an_episode() -> None:
    batch = from_episodes(dict(group=0, reward=[0.0, 1.0], success=[False, True]))
    with pytest.raises(ValueError, match="'success' differs"):
        estimate("proxmo", batch)


def test_features_must_have_one_row_per_step() -> None:
    with pytest.raises(ValueError, match=r"features must have shape \(3, d\)"):
        estimate("proxmo", BATCH, features=np.ones((2, 4)))


def test_tfidf_needs_word_tokens() -> None:
    batch = from_episodes(
        dict(group=0, reward=[1.0], anchor=["#@$"]), dict(group=0, reward=[0.0], anchor=["..."])
    )
    with pytest.raises(ValueError, match="no word token"):
        estimate("proxmo", batch)
    estimate("proxmo", batch, features=np.eye(2))  # embeddings work for symbol-only states


def test_tfidf_similarity_prefers_textually_close_states() -> None:
    # With G = one-hot on row j, row 0's baseline is its softmax weight on row j. Row 1
    # shares 3 of 4 words with row 0, row 2 none, so row 0 weighs row 1 more than row 2.
    anchors = ["red key north door", "red key north lamp", "blue wall south goal"]

    def weight_of_row_0_on(j: int) -> float:
        rewards = [[1.0 if k == j else 0.0] for k in range(3)]
        batch = from_episodes(
            *(dict(group=0, reward=r, anchor=[a]) for r, a in zip(rewards, anchors, strict=True)),
            shuffle_seed=None,
        )
        _, terms = estimate_terms("proxmo", batch, tau=0.5)
        return float(terms["G"][0] - terms["A_S"][0])

    assert weight_of_row_0_on(1) > 2 * weight_of_row_0_on(2) > 0


def test_cell_tokens_make_symbol_grids_comparable() -> None:
    # Symbol grids: word tokens see nothing, cell tokens see (position, symbol) pairs.
    # Row B differs from row A in two of 4 cells, row C in all 4: A's G = 1 leaks more
    # into B's baseline than into C's.
    grids = {"A": "# @ . $", "B": "# . @ $", "C": ". # $ @"}
    batch = from_episodes(
        *(dict(group=0, reward=[float(k == "A")], anchor=[a]) for k, a in grids.items())
    )
    with pytest.raises(ValueError, match="no word token"):
        estimate("proxmo", batch)
    _, terms = estimate_terms("proxmo", batch, tokens="cells", tau=0.1, gamma=1.0)
    baseline = dict(zip(batch.anchor.tolist(), (terms["G"] - terms["A_S"]).tolist(), strict=True))
    assert baseline[grids["B"]] > baseline[grids["C"]] > 0


def test_cell_tokens_at_tau_to_zero_reproduce_exact_grid_grouping() -> None:
    rng = np.random.default_rng(7)
    symbols = np.array(["#", "_", "@", "$", "."])
    pool = [" ".join(rng.choice(symbols, size=9)) for _ in range(5)]
    episodes = [
        dict(group=g, reward=rng.normal(size=3).tolist(), anchor=list(rng.choice(pool, 3)))
        for g in range(3)
        for _ in range(4)
    ]
    batch = from_episodes(*episodes)
    got = estimate("proxmo", batch, tokens="cells", beta=0.0, tau=1e-9, gamma=0.9)
    want = estimate("gigpo", batch, gamma=0.9, norm="mean", episode_norm="mean_std")
    np.testing.assert_allclose(got, want, atol=1e-9)
