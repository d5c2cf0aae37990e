"""Step groups, recomputed ProxMO neighbour weights and rollout trees for the viewer."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cairn.advantages import estimate_terms
from cairn.data import StepBatch
from cairn.report.credit import anchor_neighbours, build_tree, first_crit, step_groups


def _ep(eid, path, ret, steps, success=False):
    return {"id": eid, "path": list(path), "return": ret, "success": success, "steps": steps}


def _s(t, anchor, action, **kw):
    return {"t": t, "anchor": anchor, "action": action, **kw}


def test_step_groups_count_turns_per_anchor_across_episodes_and_time():
    eps = [
        _ep(0, (), 0, [_s(0, "A", "l"), _s(1, "B", "r"), _s(2, "A", "u")]),
        _ep(1, (), 0, [_s(0, "A", "r")]),
    ]
    # "A" appears at t=0 twice and again at t=2: GiGPO's key has no t, so 3 turns.
    assert step_groups(eps) == {"A": 3, "B": 1}


def test_neighbour_weights_are_the_baseline_weights_proxmo_trains_with():
    """b_t = sum_b w(a_t -> b) * (sum of G over steps at b) equals G - A_S of the estimator."""
    rng = np.random.default_rng(1)
    words = ["box left wall", "box right wall", "goal near box", "open floor", "goal far"]
    n = 30
    anchor = np.array([words[i] for i in rng.integers(0, len(words), n)], dtype=object)
    batch = StepBatch.from_columns(
        group=np.zeros(n, dtype=np.int64),
        episode=np.repeat(np.arange(6), 5),
        t=np.tile(np.arange(5), 6),
        reward=rng.normal(size=n),
        anchor=anchor,
    )
    tau = 0.5
    _, terms = estimate_terms("proxmo", batch, tau=tau)
    texts = list(dict.fromkeys(anchor.tolist()))
    counts = [int((anchor == a).sum()) for a in texts]
    rows, method = anchor_neighbours(texts, counts, tau=tau, top=len(texts))
    assert method == "TF-IDF of word tokens"
    G = terms["G"]
    G_at = {a: G[anchor == a].sum() for a in texts}
    b = np.array([sum(w * G_at[texts[j]] for j, w in rows[texts.index(a)]) for a in anchor])
    np.testing.assert_allclose(G - b, terms["A_S"], atol=1e-9)


def test_neighbour_weights_sum_to_one_over_steps_and_limits_of_tau():
    texts, counts = ["red box here", "red box there", "blue floor"], [2, 3, 4]
    for tau in (0.05, 0.3, 5.0):
        rows, _ = anchor_neighbours(texts, counts, tau=tau, top=3)
        for row in rows:
            assert sum(counts[b] * w for b, w in row) == pytest.approx(1.0)
    # tau -> 0: all weight on the step's own anchor (exact grouping): 1/count each.
    rows, _ = anchor_neighbours(texts, counts, tau=1e-4, top=3)
    assert rows[1][0] == (1, pytest.approx(1 / 3))
    # tau -> inf: the plain group mean: 1/9 for every step.
    rows, _ = anchor_neighbours(texts, counts, tau=1e6, top=3)
    assert all(w == pytest.approx(1 / 9) for row in rows for _, w in row)


def test_symbol_grids_use_the_runs_cell_tokens():
    # As the estimator with tokens="cells": "# # @" shares two cells with "# @ @" and
    # none with "@ @ #", so its nearest other anchor is 1.
    rows, method = anchor_neighbours(["# # @", "# @ @", "@ @ #"], [1, 1, 1], tokens="cells")
    assert method == "TF-IDF of position-tagged cells"
    assert [b for b, _ in rows[0]][:2] == [0, 1]
    # Word tokens find nothing in symbols: no neighbours are claimed.
    rows, method = anchor_neighbours(["# # @", "# @ @"], [1, 1])
    assert method.startswith("none") and rows == [[(0, 1.0)], [(1, 1.0)]]


def test_neighbour_errors():
    with pytest.raises(ValueError, match="tau must be > 0"):
        anchor_neighbours(["a"], [1], tau=0)
    with pytest.raises(ValueError, match="differ in length"):
        anchor_neighbours(["a", "b"], [1], tau=1)


def _tree_records():
    # Root turn t=0 shared by all; branch at t=1 into (0,) and (1,); (1,) branches at t=2.
    root = _s(0, "S", "go", path=[])
    return [
        _ep(7, (0,), 1.0, [root, _s(1, "A", "l", path=[0])], success=True),
        _ep(8, (1, 0), 0.0, [root, _s(1, "B", "r", path=[1]), _s(2, "C", "u", path=[1, 0])]),
        _ep(
            9,
            (1, 1),
            3.0,
            [root, _s(1, "B", "r", path=[1]), _s(2, "D", "d", path=[1, 1], crit=True)],
        ),
    ]


def test_tree_values_are_means_of_children_worked_example():
    tree = build_tree(_tree_records())
    V = {tuple(n["path"]): n["V"] for n in tree["nodes"]}
    # Leaves: their returns. (1,) = mean(0, 3) = 1.5. Root = mean of children (1, 1.5) = 1.25,
    # not the mean over leaves (4/3): ELPO's bottom-up values.
    assert V == {(): 1.25, (0,): 1.0, (1,): 1.5, (1, 0): 0.0, (1, 1): 3.0}
    assert tree["exact"] and tree["depth"] == 2
    steps = {tuple(n["path"]): [t for t, _, _ in n["steps"]] for n in tree["nodes"]}
    assert steps == {(): [0], (0,): [1], (1,): [1], (1, 0): [2], (1, 1): [2]}
    crit = [tuple(n["path"]) for n in tree["nodes"] if n["crit"]]
    assert crit == [(1, 1)]
    leaf = {tuple(n["path"]): n["episode"] for n in tree["nodes"]}
    assert leaf[(1, 1)] == 9 and leaf[()] is None


def test_tree_steps_are_inferred_from_shared_prefixes_without_step_paths():
    recs = _tree_records()
    for e in recs:
        for s in e["steps"]:
            s.pop("path", None)  # the root step dict is shared
    tree = build_tree(recs)
    steps = {tuple(n["path"]): [t for t, _, _ in n["steps"]] for n in tree["nodes"]}
    assert not tree["exact"]
    assert steps == {(): [0], (0,): [1], (1,): [1], (1, 0): [2], (1, 1): [2]}


def test_tree_does_not_depend_on_episode_order():
    recs = _tree_records()
    want = {tuple(n["path"]): (n["V"], n["leaves"], n["wins"]) for n in build_tree(recs)["nodes"]}
    for seed in range(5):
        random.Random(seed).shuffle(recs)
        got = {
            tuple(n["path"]): (n["V"], n["leaves"], n["wins"]) for n in build_tree(recs)["nodes"]
        }
        assert got == want


def test_no_paths_no_tree_and_first_crit():
    assert build_tree([_ep(0, (), 1.0, [_s(0, "A", "l")])]) is None
    assert first_crit(_tree_records()[2]) == 2
    assert first_crit({"steps": "garbage"}) is None
