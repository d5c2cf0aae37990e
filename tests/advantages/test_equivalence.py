"""Every estimator against its plain-loop reference, plus invariances shared by all of them."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from adv_batches import random_batch, random_tree_batch, relabel

from cairn.advantages import available, estimate, estimate_terms, terms_of
from cairn.advantages import loops as ref
from cairn.data import StepBatch


def _features(batch: StepBatch) -> np.ndarray:
    """Deterministic per-anchor embeddings (rows with equal anchors get equal vectors)."""
    vec = {
        a: np.random.default_rng(zlib.crc32(a.encode())).normal(size=5) for a in set(batch.anchor)
    }
    return np.stack([vec[a] for a in batch.anchor]) if len(batch) else np.zeros((0, 5))


FLAT = random_batch
TREE = random_tree_batch

# (estimator, options, batch generator, has batch-level statistics)
CASES: list[tuple[str, dict[str, Any], Any, bool]] = [
    ("grpo", {}, FLAT, False),
    ("grpo", {"norm": "mean"}, FLAT, False),
    ("rloo", {}, FLAT, False),
    ("reinforce_pp", {}, FLAT, True),
    ("gigpo", {}, FLAT, False),
    ("gigpo", {"norm": "mean_std", "episode_norm": "mean", "gamma": 0.5}, FLAT, False),
    ("gigpo", {"episode_stats": "rows", "step_weight": 0.3}, FLAT, False),
    ("gigpo", {"episode_stats": "rows", "episode_norm": "mean"}, FLAT, False),
    ("gigpo", {"similarity": 0.7}, FLAT, False),
    ("gigpo", {"similarity": 0.9, "norm": "mean_std"}, TREE, False),
    ("proxmo", {}, FLAT, True),  # TF-IDF is fitted on the whole batch
    ("proxmo", {"tau": 0.5, "beta": 0.3, "alpha": 2.0, "episode_norm": "mean"}, FLAT, True),
    ("proxmo", {"features": _features}, FLAT, False),
    ("vineppo", {}, FLAT, True),
    ("vineppo", {"whiten": False, "gamma": 0.9}, FLAT, False),
    ("gae", {}, FLAT, False),
    ("gae", {"gamma": 0.9, "lam": 0.5}, FLAT, False),
    ("igpo", {}, FLAT, False),
    ("igpo", {"gamma": 0.7}, FLAT, False),
    ("treepo", {}, TREE, True),
    ("treepo", {"whiten": False}, TREE, False),
    ("treepo", {"whiten": False}, FLAT, False),
    ("arpo", {}, TREE, False),
    ("arpo", {"attribution": "hard"}, TREE, False),
    ("elpo", {}, TREE, False),
    ("elpo", {"branch_weight": 1.0, "traj_weight": -0.5}, TREE, False),
]
# Every registered estimator is a case, from the registry: one registered after the list
# above was written runs with its defaults on tree batches (they carry every column),
# assumed to have batch-level statistics (so it skips the concatenation test).
CASES += [(n, {}, TREE, True) for n in available() if n not in {c[0] for c in CASES}]
IDS = [
    f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items() if k != 'features')}"
    for name, opts, *_ in CASES
]
IDS = [i + ("-features" if "features" in c[1] else "") for i, c in zip(IDS, CASES, strict=True)]


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _resolve(options: dict[str, Any], batch: StepBatch) -> dict[str, Any]:
    return {k: v(batch) if callable(v) else v for k, v in options.items()}


def test_every_estimator_is_covered() -> None:
    assert {c[0] for c in CASES} == set(available())


@pytest.mark.parametrize("name", available())
def test_every_registered_estimator_has_a_plain_loop_reference(name: str) -> None:
    """Iterates the registry: an estimator without a reference fails here, saying so."""
    assert name in ref.REFERENCES, (
        f"estimator {name!r} has no plain-loop reference: add one to "
        "cairn.advantages.loops.REFERENCES (the parity oracle of test_matches_plain_loop)"
    )
    for seed in range(3):  # default options on tree batches, which every estimator takes
        batch = TREE(np.random.default_rng(seed))
        np.testing.assert_allclose(
            estimate(name, batch), ref.REFERENCES[name](batch), rtol=1e-9, atol=1e-9
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("name", "options", "make", "_"), CASES, ids=IDS)
def test_matches_plain_loop(name: str, options: dict, make: Any, _: bool, seed: int) -> None:
    batch = make(np.random.default_rng(seed))
    opts = _resolve(options, batch)
    got = estimate(name, batch, **opts)
    assert name in ref.REFERENCES, f"estimator {name!r} has no plain-loop reference"
    want = ref.REFERENCES[name](batch, **opts)
    assert got.dtype == np.float64 and got.shape == (len(batch),)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("name", "options", "make", "_"), CASES, ids=IDS)
def test_row_order_does_not_matter(name: str, options: dict, make: Any, _: bool) -> None:
    rng = np.random.default_rng(7)
    batch = make(rng, shuffle=False)
    perm = rng.permutation(len(batch))
    shuffled = batch.take(perm)
    a = estimate(name, batch, **_resolve(options, batch))
    b = estimate(name, shuffled, **_resolve(options, shuffled))
    np.testing.assert_allclose(b, a[perm], rtol=1e-9, atol=1e-9)


# Batch-level whitening (reinforce_pp, vineppo, treepo) and a batch-wide TF-IDF fit (proxmo
# without features) make results depend on the whole batch, so only the others must split.
LOCAL = [(c, i) for c, i in zip(CASES, IDS, strict=True) if not c[3]]


@pytest.mark.parametrize(
    ("name", "options", "make", "_"), [c for c, _ in LOCAL], ids=[i for _, i in LOCAL]
)
def test_concatenating_disjoint_groups(name: str, options: dict, make: Any, _: bool) -> None:
    first = make(np.random.default_rng(3))
    second = relabel(make(np.random.default_rng(4)), offset=10**7)
    both = StepBatch.concat([first, second])
    want = np.concatenate([estimate(name, b, **_resolve(options, b)) for b in (first, second)])
    np.testing.assert_allclose(estimate(name, both, **_resolve(options, both)), want, atol=1e-9)


@pytest.mark.parametrize(("name", "options", "make", "_"), CASES, ids=IDS)
def test_terms_are_consistent(name: str, options: dict, make: Any, _: bool) -> None:
    batch = make(np.random.default_rng(5))
    opts = _resolve(options, batch)
    adv, terms = estimate_terms(name, batch, **opts)
    np.testing.assert_array_equal(adv, estimate(name, batch, **opts))
    assert tuple(terms) == terms_of(name)
    for value in terms.values():
        assert value.shape == (len(batch),) and value.dtype == np.float64


@pytest.mark.parametrize("name", available())
def test_empty_batch_gives_empty_result(name: str) -> None:
    batch = random_tree_batch(np.random.default_rng(0)).take(np.zeros(0, dtype=np.int64))
    assert estimate(name, batch).shape == (0,)


@pytest.mark.parametrize(
    "name", ["grpo", "rloo", "reinforce_pp", "gigpo", "proxmo", "treepo", "arpo", "elpo"]
)
def test_groups_of_one_episode_get_zero(name: str) -> None:
    # Every group holds one episode whose anchors are all distinct: no comparison exists,
    # so every episode-level and step-level term is 0. (ProxMO's soft step baseline also
    # weighs the other turns of the same episode, so there each group is a single row.)
    rng = np.random.default_rng(0)
    T = [1, 1, 1] if name == "proxmo" else [3, 1, 4]
    batch = StepBatch.from_columns(
        group=np.repeat([5, 6, 7], T),
        episode=np.repeat([1, 2, 3], T),
        t=np.concatenate([np.arange(k) for k in T]),
        reward=rng.normal(size=sum(T)),
        anchor=np.array([f"room {i}" for i in range(sum(T))], dtype=object),
        path=_objects([()] * sum(T)),
        success=np.ones(sum(T), dtype=bool),
    )
    np.testing.assert_allclose(estimate(name, batch), 0.0, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("vineppo", "value"),
        ("gae", "value"),
        ("igpo", "info_gain"),
        ("treepo", "path"),
        ("elpo", "path"),
    ],
)
def test_missing_column_is_named(name: str, column: str) -> None:
    full = random_batch(np.random.default_rng(0))
    cols = {k: v for k, v in full.columns.items() if k != column}
    with pytest.raises(ValueError, match=column):
        estimate(name, StepBatch(cols))


def test_arpo_hard_needs_path_but_soft_does_not() -> None:
    full = random_tree_batch(np.random.default_rng(0))
    cols = {k: v for k, v in full.columns.items() if k != "path"}
    estimate("arpo", StepBatch(cols))
    with pytest.raises(ValueError, match="path"):
        estimate("arpo", StepBatch(cols), attribution="hard")


def test_an_estimator_without_a_reference_fails_saying_so() -> None:
    with pytest.raises(AssertionError, match="'mine' has no plain-loop reference"):
        test_every_registered_estimator_has_a_plain_loop_reference("mine")
