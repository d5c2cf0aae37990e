"""Worked examples and properties of GiGPO (arXiv 2505.10978)."""

from __future__ import annotations

import numpy as np
import pytest
from adv_batches import from_episodes, random_batch

from cairn.advantages import estimate, estimate_terms
from cairn.advantages.episodes import Episodes
from cairn.advantages.gigpo import step_groups

# One group, gamma 0.5. Episode 100 visits s, x, y and earns 1 at the end:
#   G = [0.25, 0.5, 1]. Episode 101 visits s, s, x and earns nothing: G = [0, 0, 0].
BATCH = from_episodes(
    dict(group=7, reward=[0.0, 0.0, 1.0], anchor=["s", "x", "y"]),
    dict(group=7, reward=[0.0, 0.0, 0.0], anchor=["s", "s", "x"]),
)


def by_step(batch, values: np.ndarray) -> dict[tuple[int, int], float]:
    return {
        (e, t): v
        for e, t, v in zip(batch.episode.tolist(), batch.t.tolist(), values.tolist(), strict=True)
    }


def test_worked_example_terms() -> None:
    adv, terms = estimate_terms("gigpo", BATCH, gamma=0.5, episode_norm="mean_std")
    # G_t within each episode
    assert by_step(BATCH, terms["G"]) == pytest.approx(
        {(100, 0): 0.25, (100, 1): 0.5, (100, 2): 1.0, (101, 0): 0, (101, 1): 0, (101, 2): 0}
    )
    # A_E: returns 1 and 0 -> mean 0.5, std sqrt(0.5) -> +-0.5/(0.7071068 + 1e-6) = +-0.7071058
    assert by_step(BATCH, terms["A_E"]) == pytest.approx(
        {(100, t): 0.7071058 for t in range(3)} | {(101, t): -0.7071058 for t in range(3)}, rel=1e-6
    )
    # Step groups: s = {(100,0): 0.25, (101,0): 0, (101,1): 0} mean 1/12;
    # x = {(100,1): 0.5, (101,2): 0} mean 0.25; y = {(100,2)} alone -> 0.
    assert by_step(BATCH, terms["A_S"]) == pytest.approx(
        {(100, 0): 0.25 - 1 / 12, (101, 0): -1 / 12, (101, 1): -1 / 12,
         (100, 1): 0.25, (101, 2): -0.25, (100, 2): 0.0}
    )  # fmt: skip
    np.testing.assert_allclose(adv, terms["A_E"] + terms["A_S"])


def test_episode_norm_defaults_to_norm() -> None:
    # The reference's one `mode` sets both levels: mean_norm drops the std in A_E and A_S.
    # Default norm="mean": A_E = R - mean = 1 - 0.5 = +0.5 (episode 100) and 0 - 0.5 = -0.5.
    _, terms = estimate_terms("gigpo", BATCH, gamma=0.5)
    np.testing.assert_allclose(terms["A_E"], np.where(BATCH.episode == 100, 0.5, -0.5))
    # norm="mean_std" alone: A_E = +-0.5/(sqrt(0.5) + 1e-6) = +-0.7071058 (eq. 3 with std), and
    # A_S of step group x = +-0.25/(sqrt(0.125) + 1e-6) = +-0.7071048; so A at (100, 1) is
    # 0.7071058 + 0.7071048 = 1.4142106.
    adv, terms = estimate_terms("gigpo", BATCH, gamma=0.5, norm="mean_std")
    np.testing.assert_allclose(
        terms["A_E"], np.where(BATCH.episode == 100, 0.7071058, -0.7071058), rtol=1e-6
    )
    assert by_step(BATCH, adv)[(100, 1)] == pytest.approx(1.4142106, rel=1e-6)
    # an explicit episode_norm still wins over norm
    _, terms = estimate_terms("gigpo", BATCH, gamma=0.5, norm="mean", episode_norm="mean_std")
    np.testing.assert_allclose(
        terms["A_E"], np.where(BATCH.episode == 100, 0.7071058, -0.7071058), rtol=1e-6
    )


def test_step_normalisation_with_std() -> None:
    # Step group x holds G = 0.5 and 0: mean 0.25, std sqrt(0.125) = 0.3535534,
    # so A_S = +-0.25 / (0.3535534 + 1e-6) = +-0.7071048.
    _, terms = estimate_terms("gigpo", BATCH, gamma=0.5, norm="mean_std")
    got = by_step(BATCH, terms["A_S"])
    assert (got[(100, 1)], got[(101, 2)], got[(100, 2)]) == pytest.approx(
        (0.7071048, -0.7071048, 0)
    )


def test_step_weight_and_episode_norm() -> None:
    adv, terms = estimate_terms("gigpo", BATCH, gamma=0.5, step_weight=0.25, episode_norm="mean")
    np.testing.assert_allclose(terms["A_E"], np.where(BATCH.episode == 100, 0.5, -0.5))
    np.testing.assert_allclose(adv, terms["A_E"] + 0.25 * terms["A_S"])


def test_row_weighted_episode_statistics() -> None:
    # Episode 100: one step, R = 1; episode 101: three steps, R = 0. Over rows the returns
    # are [1, 0, 0, 0]: mean 0.25, unbiased std 0.5, so A_E = 0.75/0.500001 = 1.4999970 and
    # -0.25/0.500001 = -0.4999990; counting episodes once gives +-0.7071058.
    batch = from_episodes(dict(group=0, reward=[1.0]), dict(group=0, reward=[0.0, 0.0, 0.0]))
    _, rows = estimate_terms("gigpo", batch, episode_stats="rows", episode_norm="mean_std")
    _, eps = estimate_terms("gigpo", batch, episode_norm="mean_std")
    np.testing.assert_allclose(
        rows["A_E"], np.where(batch.episode == 100, 1.4999970, -0.4999990), rtol=1e-6
    )
    np.testing.assert_allclose(
        eps["A_E"], np.where(batch.episode == 100, 0.7071058, -0.7071058), rtol=1e-6
    )


def test_anchors_group_only_inside_their_group() -> None:
    # The same anchor "s" in two groups forms two step groups of one row each: A_S = 0.
    batch = from_episodes(
        dict(group=1, reward=[1.0], anchor=["s"]),
        dict(group=2, reward=[0.0], anchor=["s"]),
    )
    _, terms = estimate_terms("gigpo", batch)
    np.testing.assert_array_equal(terms["A_S"], [0.0, 0.0])


def test_similarity_merges_near_identical_anchors() -> None:
    # "box at 1 1" vs "box at 1 2": difflib ratio 2*9/20 = 0.9. Exact grouping keeps them
    # apart (A_S = 0); similarity 0.85 merges them (G = 1 and 0 -> A_S = +-0.5); 0.95 does not.
    batch = from_episodes(
        dict(group=0, reward=[1.0], anchor=["box at 1 1"]),
        dict(group=0, reward=[0.0], anchor=["box at 1 2"]),
    )
    win = batch.episode == 100
    for similarity, want in [(None, 0.0), (0.95, 0.0), (0.85, 0.5)]:
        _, terms = estimate_terms("gigpo", batch, similarity=similarity)
        np.testing.assert_allclose(terms["A_S"], np.where(win, want, -want))


@pytest.mark.parametrize(
    ("order", "together"), [(["A", "B", "C"], ("A", "B")), (["C", "B", "A"], ("C", "B"))]
)
def test_similarity_is_greedy_in_order_of_first_turn(order: list[str], together: tuple) -> None:
    # A~B and B~C (ratio 0.9) but not A~C (0.8), threshold 0.85. Texts are visited by the
    # turn they first occur at: the first founds a cluster, the second joins it, the third
    # is compared with the first (the representative) only, so it founds its own.
    text = {"A": "aaaaaaaaaa", "B": "aaaaaaaaab", "C": "aaaaaaaabb"}
    batch = from_episodes(dict(group=0, reward=[0.0] * 3, anchor=[text[k] for k in order]))
    ids, n = step_groups(batch, Episodes.of(batch), similarity=0.85)
    label = {a: i for a, i in zip(batch.anchor.tolist(), ids.tolist(), strict=True)}
    assert n == 2
    assert label[text[together[0]]] == label[text[together[1]]] != label[text[order[2]]]


def test_similarity_one_equals_exact_grouping() -> None:
    batch = random_batch(np.random.default_rng(3))
    np.testing.assert_allclose(estimate("gigpo", batch, similarity=1.0), estimate("gigpo", batch))


def test_gamma_one_and_single_step_episodes_reduce_to_grpo_plus_anchor_grpo() -> None:
    # With one-step episodes G = R; if every anchor is the group's initial state the step
    # group is the whole group, so A_S = R - mean(R) (Dr.GRPO) and A = GRPO + Dr.GRPO.
    batch = from_episodes(
        *(dict(group=0, reward=[r], anchor=["start"]) for r in [1.0, 0.0, 0.0, 2.0])
    )
    want = estimate("grpo", batch) + estimate("grpo", batch, norm="mean")
    np.testing.assert_allclose(estimate("gigpo", batch, gamma=1.0, episode_norm="mean_std"), want)
