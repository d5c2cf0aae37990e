"""EMPO2's novelty reward: weight / n, n = visits to similar states so far."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cairn.data.episode import Episode, Step
from cairn.rewards import make_reward
from cairn.rewards.intrinsic import Novelty


def _episodes(states: list[list[str]]) -> list[Episode]:
    return [
        Episode(
            id=i, group=0, task=0,
            steps=[Step(t=t, observation=s, anchor=s, action="a", completion="a", reward=0.0)
                   for t, s in enumerate(row)],
        )
        for i, row in enumerate(states)
    ]  # fmt: skip


def _rewards(episodes: list[Episode]) -> list[list[float]]:
    return [[s.shaped["novelty"] for s in e.steps] for e in episodes]


def test_worked_example_exact_counts():
    r = make_reward("novelty", weight=1.0)
    first = _episodes([["A", "A"], ["B"]])
    r(first)
    # A visited twice, B once in this batch: 1/2 each for A, 1/1 for B
    assert _rewards(first) == [[0.5, 0.5], [1.0]]
    second = _episodes([["A"], ["C"]])
    r(second)
    # A's third visit: 1/3; C is new
    assert _rewards(second) == [[1 / 3], [1.0]]
    scaled = Novelty(weight=0.1)
    scaled(_episodes([["A"]]))
    assert scaled.states == ["A"] and scaled.counts == [1]


def _loop_reference(batches: list[list[list[str]]], weight: float) -> list[list[list[float]]]:
    seen: Counter = Counter()
    out = []
    for batch in batches:
        seen.update(s for row in batch for s in row)
        out.append([[weight / seen[s] for s in row] for row in batch])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_matches_a_plain_counter_and_ignores_order(seed):
    rng = np.random.default_rng(seed)
    batches = [
        [[f"s{x}" for x in rng.integers(0, 6, size=rng.integers(1, 5))] for _ in range(5)]
        for _ in range(3)
    ]
    want = _loop_reference(batches, 0.3)
    r, shuffled = Novelty(weight=0.3), Novelty(weight=0.3)
    for batch, ref in zip(batches, want, strict=True):
        eps = _episodes(batch)
        r(eps)
        assert np.allclose(np.concatenate(_rewards(eps)), np.concatenate(ref))
        perm = rng.permutation(len(batch))
        eps2 = _episodes([batch[i] for i in perm])
        shuffled(eps2)
        assert np.allclose(np.concatenate(_rewards(eps2)), np.concatenate([ref[i] for i in perm]))


def test_embedding_similarity_merges_near_duplicates():
    r = Novelty(similarity="embedding", threshold=0.8, embedder="tfidf")
    eps = _episodes([["pos 1 2 wall free"], ["pos 1 2 wall free"], ["goal far north east"]])
    r(eps)
    # the two identical texts share an entry (n = 2); the unrelated text is new
    assert _rewards(eps) == [[0.5], [0.5], [1.0]]
    assert len(r.states) == 2


def test_state_roundtrip_resumes_counts():
    r = Novelty()
    r(_episodes([["A", "B"]]))
    again = Novelty()
    again.load_state_dict(r.state_dict())
    eps = _episodes([["A"]])
    again(eps)
    assert _rewards(eps) == [[0.5]]


def test_bad_options():
    with pytest.raises(ValueError, match="weight"):
        Novelty(weight=-1)
    with pytest.raises(ValueError, match="similarity"):
        Novelty(similarity="fuzzy")
    with pytest.raises(ValueError, match="threshold"):
        Novelty(threshold=2)
    with pytest.raises(ValueError, match="no option"):
        make_reward("novelty", scale=1)
