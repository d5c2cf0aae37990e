"""Every env preset (configs/<env>_gigpo.yaml) trains end to end for an iteration."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.envs import env_class
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ENVS = ["frozenlake", "countdown", "integration", "search_qa", "scienceworld", "textworld", "twx"]
# Keep the heavy envs small: few turns, one generated textworld game.
EXTRA = {"textworld": ["env.options.num_games=1"], "scienceworld": ["env.options.max_steps=4"]}


@pytest.mark.parametrize("env", ENVS)
def test_env_preset_trains_end_to_end(tmp_path, env):
    try:
        env_class(env)
    except ImportError as err:
        pytest.skip(f"{env}: optional extra not installed ({err})")
    cfg = load_config(
        CONFIGS / f"{env}_gigpo.yaml",
        [
            "rollout.groups=1",
            "rollout.group_size=2",
            "rollout.max_turns=3",
            "eval.episodes=1",
            "eval.at_start=false",
            "train.iterations=1",
            "train.time_budget_s=null",
            "train.threads=1",
            "log.progress=false",
            "warmup.demos=8",  # search_qa's format warm-up, small
            "warmup.epochs=1",
            f"out_dir={tmp_path}",
            *EXTRA.get(env, []),
        ],
    )
    summary = Trainer(cfg, tmp_path / env).run()
    assert summary["iterations"] == 1 and summary["episodes"] == 2
    assert summary["eval_success"] is not None
