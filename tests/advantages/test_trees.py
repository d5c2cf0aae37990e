"""Worked examples: TreePO, ARPO and ELPO on rollout trees (the ``path`` column)."""

from __future__ import annotations

import numpy as np
import pytest
from adv_batches import from_episodes, random_tree_batch

from cairn.advantages import estimate, estimate_terms

# Three leaves sharing turns 0-1 (path ()):
#   L0: turn 2 on branch (0,), reward 1                      R = 1
#   L1: turn 2 on (1,), turn 3 on (1, 0), rewards 0, 0       R = 0
#   L2: turn 2 on (1,), turn 3 on (1, 1), rewards 0, 0.5     R = 0.5
TREE = from_episodes(
    dict(group=0, reward=[0.0, 0.0, 1.0], path=[(), (), (0,)]),
    dict(group=0, reward=[0.0, 0.0, 0.0, 0.0], path=[(), (), (1,), (1, 0)]),
    dict(group=0, reward=[0.0, 0.0, 0.0, 0.5], path=[(), (), (1,), (1, 1)]),
    shuffle_seed=None,
)


def step(batch, values) -> dict[tuple[int, int], float]:
    return {
        (e, t): v for e, t, v in zip(batch.episode.tolist(), batch.t.tolist(), values, strict=True)
    }


def test_treepo_worked_example() -> None:
    # Leaves A (0,0) R=4, B (0,1) R=2, C (1,) R=0.
    # d=0 (whole group, mean 2): A 2, B 0, C -2.  d=1: {A, B} (mean 3): A 1, B -1; C's
    # subtree {C} has one leaf, not counted.  d=2: single leaves, not counted.
    # A = mean over counted depths: A 1.5, B -0.5, C -2.
    batch = from_episodes(
        dict(group=0, reward=[4.0], path=(0, 0)),
        dict(group=0, reward=[1.0, 1.0], path=(0, 1)),
        dict(group=0, reward=[0.0], path=(1,)),
    )
    got = step(batch, estimate("treepo", batch, whiten=False).tolist())
    assert got == pytest.approx({(100, 0): 1.5, (101, 0): -0.5, (101, 1): -0.5, (102, 0): -2.0})
    # whitened over the three episodes: mean -1/3, std sqrt(37/12) = 1.7559423
    white = step(batch, estimate("treepo", batch).tolist())
    assert white[(100, 0)] == pytest.approx((1.5 + 1 / 3) / 1.7559433, rel=1e-6)


def test_treepo_accepts_node_paths_or_leaf_paths_on_rows() -> None:
    rng = np.random.default_rng(3)
    nodes = random_tree_batch(rng, shuffle=False)
    leaves = random_tree_batch(np.random.default_rng(3), shuffle=False, leaf_path_rows=True)
    np.testing.assert_allclose(estimate("treepo", nodes), estimate("treepo", leaves))


def test_treepo_reads_only_the_final_step_path() -> None:
    # Inner rows' paths are not read: garbage there changes nothing (arpo/elpo check them).
    garbled = from_episodes(
        dict(group=0, reward=[0.0, 0.0, 1.0], path=[(7, 7), (9,), (0,)]),
        dict(group=0, reward=[0.0, 0.0, 0.0, 0.0], path=[(5,), (), (1,), (1, 0)]),
        dict(group=0, reward=[0.0, 0.0, 0.0, 0.5], path=[(), (3, 3, 3), (1,), (1, 1)]),
        shuffle_seed=None,
    )
    np.testing.assert_array_equal(estimate("treepo", garbled), estimate("treepo", TREE))
    with pytest.raises(ValueError, match="not a prefix"):
        estimate("arpo", garbled, attribution="hard")


def test_treepo_flat_group_is_the_group_mean_baseline() -> None:
    batch = from_episodes(*(dict(group=0, reward=[r], path=()) for r in [1.0, 0.0, 3.0]))
    np.testing.assert_allclose(
        estimate("treepo", batch, whiten=False), estimate("grpo", batch, norm="mean")
    )


def test_arpo_soft_is_grpo_per_leaf() -> None:
    # R = 1, 0, 0.5: mean 0.5, std 0.5 -> A = 0.999998, -0.999998, 0 on every row of the leaf
    want = np.repeat([0.999998, -0.999998, 0.0], [3, 4, 4])
    np.testing.assert_allclose(estimate("arpo", TREE), want, rtol=1e-6)


def test_arpo_hard_averages_shared_steps() -> None:
    # turns 0-1 (path (), shared by all three leaves): mean(0.999998, -0.999998, 0) = 0
    # turn 2 on (1,) (shared by L1, L2): mean(-0.999998, 0) = -0.499999
    # unshared steps keep their leaf's advantage
    got = step(TREE, estimate("arpo", TREE, attribution="hard").tolist())
    want = {(e, t): 0.0 for e in (100, 101, 102) for t in (0, 1)}
    want |= {(100, 2): 0.999998, (101, 2): -0.499999, (102, 2): -0.499999}
    want |= {(101, 3): -0.999998, (102, 3): 0.0}
    assert got == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_arpo_hard_equals_soft_without_sharing() -> None:
    batch = from_episodes(
        *(dict(group=0, reward=[r, 0.0], path=(k,)) for k, r in enumerate([1.0, 0.0]))
    )
    np.testing.assert_allclose(estimate("arpo", batch, attribution="hard"), estimate("arpo", batch))


def test_elpo_worked_example() -> None:
    # Node values: V(0,) = 1, V(1,0) = 0, V(1,1) = 0.5, V(1,) = 0.25, V() = mean(1, 0.25).
    # A_b: (0,) vs (1,): values 1, 0.25 -> +-0.375/(0.5303301 + 1e-6) = +-0.7071054;
    #      (1,0) vs (1,1): values 0, 0.5 -> -+0.25/(0.3535534 + 1e-6) = -+0.7071048; root 0.
    # A_t: z of leaf returns (1, 0, 0.5) = 0.999998, -0.999998, 0; a node gets the mean over
    #      its leaves: () 0, (0,) 0.999998, (1,) -0.499999, (1,0) -0.999998, (1,1) 0.
    adv, terms = estimate_terms("elpo", TREE)
    A_b, A_t = step(TREE, terms["A_b"].tolist()), step(TREE, terms["A_t"].tolist())
    assert (A_b[(100, 2)], A_b[(101, 2)], A_b[(101, 3)], A_b[(102, 3)]) == pytest.approx(
        (0.7071054, -0.7071054, -0.7071048, 0.7071048), rel=1e-6
    )
    assert A_b[(100, 0)] == A_b[(102, 1)] == 0.0
    assert (A_t[(100, 0)], A_t[(100, 2)], A_t[(102, 2)], A_t[(101, 3)]) == pytest.approx(
        (0.0, 0.999998, -0.499999, -0.999998), rel=1e-6, abs=1e-9
    )
    got = step(TREE, adv.tolist())
    assert (got[(100, 2)], got[(101, 2)], got[(101, 3)], got[(102, 3)]) == pytest.approx(
        (0.8535517, -0.6035522, -0.8535514, 0.3535524), rel=1e-6
    )


def test_elpo_weights() -> None:
    adv, terms = estimate_terms("elpo", TREE, branch_weight=1.0, traj_weight=0.0)
    np.testing.assert_allclose(adv, terms["A_b"])


def test_elpo_needs_a_valid_tree() -> None:
    # Two leaves on the same path (independent samples without branch ids) are ambiguous.
    batch = from_episodes(
        dict(group=0, reward=[1.0], path=()), dict(group=0, reward=[0.0], path=())
    )
    with pytest.raises(ValueError, match="same tree path"):
        estimate("elpo", batch)
    with pytest.raises(ValueError, match="same tree path"):
        estimate("arpo", batch, attribution="hard")
    flat = from_episodes(
        dict(group=0, reward=[1.0], path=(0,)), dict(group=0, reward=[0.0], path=(1,))
    )
    # root branches into two leaves: A_b = A_t = +-0.7071058 -> A = +-0.7071058
    np.testing.assert_allclose(estimate("elpo", flat), [0.7071058, -0.7071058], rtol=1e-6)
