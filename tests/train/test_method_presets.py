"""The method presets train for an iteration, with their mechanism switched on."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from cairn.envs import env_class
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ONE_ITERATION = [
    "rollout.groups=2",
    "rollout.group_size=4",
    "eval.episodes=2",
    "eval.at_start=false",
    "train.iterations=1",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "log.trajectories_every=1",
    "warmup.demos=8",  # the search_qa presets' format warm-up, small
    "warmup.epochs=1",
]


def _dumped_steps(run: Path) -> list[dict]:
    (dump,) = sorted((run / "trajectories").glob("iter_*.jsonl.gz"))
    with gzip.open(dump, "rt") as f:
        return [s for line in f for s in json.loads(line)["steps"]]


def _train(tmp_path: Path, preset: str, *extra: str) -> tuple[dict, list[dict]]:
    overrides = [*ONE_ITERATION, *extra, f"out_dir={tmp_path}"]
    cfg = load_config(CONFIGS / f"{preset}.yaml", overrides)
    summary = Trainer(cfg, tmp_path / preset).run()
    assert summary["iterations"] == 1 and summary["episodes"] == 8
    return summary, _dumped_steps(tmp_path / preset)


def test_countdown_step_grpo_adds_steprar_to_the_outcome(tmp_path):
    summary, steps = _train(tmp_path, "countdown_step_grpo")
    assert summary["eval_success"] is not None
    # StepRAR lands on every episode's last (here: only) step, within [0, weight 0.1]
    assert all(0.0 <= s["shaped"]["step_accuracy"] <= 0.1 for s in steps)


def test_search_qa_igpo_rewards_turns_with_information_gain(tmp_path):
    try:
        env_class("search_qa")
    except ImportError as err:
        pytest.skip(f"search_qa: optional extra not installed ({err})")
    summary, steps = _train(tmp_path, "search_qa_igpo")
    assert summary["eval_success"] is not None
    assert all("info_gain" in s and "r_tilde" in s for s in steps)
    gains = [s["info_gain"] for s in steps]
    assert all(-1.0 <= g <= 1.0 for g in gains)  # a difference of two probabilities
    assert summary["warmup"]["warmup/steps"] >= 8  # the format warm-up ran first


def test_search_qa_ssrl_warms_up_then_writes_its_own_search_results(tmp_path):
    try:
        env_class("search_qa")
    except ImportError as err:
        pytest.skip(f"search_qa: optional extra not installed ({err})")
    # a warm-up long enough that the model writes search [ ... ] (8 demos: all invalid)
    summary, steps = _train(tmp_path, "search_qa_ssrl", "warmup.demos=128", "warmup.epochs=8")
    assert summary["eval_success"] is not None and summary["warmup"]["warmup/steps"] > 128
    searches = [s for s in steps if re.match(r"^\s*search\s*\[.*\]\s*$", s["action"])]
    assert searches, "the warmed-up model searched in none of its 8 episodes"
    for s in searches:  # self-search: the next observation is the model's own text
        assert "<information>" in s["completion"]
