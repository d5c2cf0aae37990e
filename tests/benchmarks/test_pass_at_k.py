"""pass@k, distinct solutions and read-only sampling of a trained run
(benchmarks/_lib/pass_at_k.py), the measure of SGE's claim in
benchmarks/exploration/pass_at_k.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import cairn
from _lib.pass_at_k import (
    _sampler,
    distinct_solutions,
    moves,
    pass_at_k,
    sample_held_out,
    sampling_stats,
)
from cairn.data.episode import Episode, Step
from cairn.train.checkpoint.read import latest_checkpoint
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

PRESET = Path(cairn.__file__).parent / "presets" / "sokoban_sge.yaml"
TINY = [
    "rollout.groups=2",
    "rollout.group_size=4",
    "optim.epochs=1",
    "eval.episodes=6",
    "eval.every=0",
    "eval.at_start=false",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "log.trajectories_every=0",
]


# -- the estimator ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (16, 0, 16, 0.0),  # no success sampled: no k-subset holds one
        (16, 16, 1, 1.0),
        (4, 1, 1, 0.25),  # k = 1: the success rate c / n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (16, 4, 8, 1 - 495 / 12870),  # 1 - C(12,8)/C(16,8)
        (16, 9, 8, 1.0),  # n - c = 7 < k: every 8-subset holds a success
    ],
)
def test_pass_at_k_typed_numbers(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(5, 0), (5, 1), (6, 2), (6, 5), (7, 3)])
def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_success(n, c):
    """Unbiased: the exact mean over all k-subsets of the n samples (Chen et al. 2021)."""
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@"):
        pass_at_k(n, c, k)


# -- distinct solutions ----------------------------------------------------------------------
def _episode(actions: list[str], success: bool, strategy: str | None = None) -> Episode:
    names = ([strategy] if strategy is not None else []) + actions
    steps = [Step(t=t, observation="o", anchor="o", action=a, completion=a, reward=0.0)
             for t, a in enumerate(names)]  # fmt: skip
    meta = {"strategy": strategy} if strategy is not None else {}
    return Episode(id=0, group=0, task=0, steps=steps, success=success, meta=meta)


def test_distinct_solutions_count_moves_of_successful_episodes_only():
    eps = [
        _episode(["up", "left"], True, strategy="r+1 c-2"),
        _episode(["up", "left"], True, strategy="bd:box"),  # another plan, the same moves
        _episode(["left", "up"], True, strategy="r+1 c-2"),
        _episode(["down"], False, strategy="c+0"),  # failed: no solution
    ]
    assert moves(eps[1]) == ("up", "left")
    assert distinct_solutions(eps) == 2
    plain = [_episode(["up"], True), _episode(["up"], True), _episode(["right"], True)]
    assert moves(plain[2]) == ("right",) and distinct_solutions(plain) == 2


def test_sampling_stats_average_over_tasks():
    room_a = [_episode(["up"], True), _episode(["left"], True), *[_episode(["x"], False)] * 2]
    room_b = [_episode(["up"], False)] * 4
    stats = sampling_stats([room_a, room_b], ks=(1, 2, 4))
    # room a: pass@1 = 2/4, pass@2 = 1 - C(2,2)/C(4,2) = 5/6, pass@4 = 1; room b: all 0
    assert stats == pytest.approx(
        {"pass@1": 0.25, "pass@2": 5 / 12, "pass@4": 0.5, "distinct": 1.0}
    )


# -- sampling a trained run, read-only -------------------------------------------------------
def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def sge_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("pass_at_k") / "run"
    Trainer(load_config(PRESET, [*TINY, "train.iterations=1"]), run).run()
    return run


def test_sample_held_out_reads_the_run_and_samples_each_way(sge_run):
    before = _files(sge_run)
    cfg = load_config(sge_run / "config.yaml", ["train.threads=1"])
    ckpt = latest_checkpoint(sge_run)
    groups, greedy = sample_held_out(cfg, ckpt, tasks=3, n=4, samplers=["strategy", "plain"])
    assert _files(sge_run) == before  # config, log, checkpoint: byte-identical
    for name in ("strategy", "plain"):
        assert [len(g) for g in groups[name]] == [4, 4, 4]
        assert [{e.task for e in g} for g in groups[name]] == [
            {cfg.eval.seed_offset + i} for i in range(3)
        ]
    assert all("strategy" in e.meta for g in groups["strategy"] for e in g)
    assert not any("strategy" in e.meta for g in groups["plain"] for e in g)
    assert 0.0 <= greedy <= 1.0
    # SGE's sampler starts from the reflection history the run saved with its checkpoint
    assert _sampler("strategy", cfg, ckpt).history


def test_sample_held_out_rejects_unknown_sampler(sge_run):
    cfg = load_config(sge_run / "config.yaml")
    with pytest.raises(ValueError, match=r"unknown sampler.*allowed: plain, strategy"):
        sample_held_out(cfg, latest_checkpoint(sge_run), 1, 1, ["greedy"])
