"""The branching presets train end to end: two tiny iterations each through the Trainer."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = [
    "rollout.groups=2",
    "optim.minibatch_size=64",
    "optim.epochs=1",
    "eval.episodes=4",
    "eval.every=0",
    "train.iterations=2",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
]


@pytest.mark.parametrize(
    ("preset", "strategy", "estimator", "extra"),
    [
        ("sokoban_treepo", "tree", "treepo", []),
        ("sokoban_arpo", "entropy_branch", "arpo", []),
        # 9 continuations from every step: fewer episodes keep the test short
        ("sokoban_vineppo", "mc_values", "vineppo", ["rollout.group_size=2"]),
        ("sokoban_elpo", "error_search", "elpo", []),
    ],
)
def test_preset_trains_two_iterations(tmp_path, preset, strategy, estimator, extra):
    cfg = load_config(CONFIGS / f"{preset}.yaml", [*TINY, *extra, f"out_dir={tmp_path}"])
    assert (cfg.rollout.strategy, cfg.advantage.name) == (strategy, estimator)
    summary = Trainer(cfg, tmp_path / "run").run()
    rows = read_metrics(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2] and summary["iterations"] == 2
    assert all(
        r["rollout/forward_tokens"] > 0 and r["update/forward_tokens"] > 0 and r["adv/abs_max"] >= 0
        for r in rows
    )
