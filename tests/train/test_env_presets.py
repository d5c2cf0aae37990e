"""Every registered built-in env has a tiny-model preset (configs/<env>_gigpo.yaml, else
another tiny preset of that env), and it trains end to end for an iteration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cairn.envs import ENVS, available, env_class
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# The registry's built-in envs (a user's env, registered by a test, has no preset here).
BUILT_IN = [n for n in available() if str(ENVS.entries[n][0]).startswith("cairn.")]


def _preset(env: str) -> Path | None:
    """``<env>_gigpo.yaml``, else the first tiny-model preset (no model.path) of ``env``."""
    if (CONFIGS / f"{env}_gigpo.yaml").is_file():
        return CONFIGS / f"{env}_gigpo.yaml"
    for path in sorted(CONFIGS.glob(f"{env}_*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        if cfg["env"]["name"] == env and "path" not in (cfg.get("model") or {}):
            return path
    return None


# Keep the heavy envs small: few turns, one generated textworld game.
EXTRA = {"textworld": ["env.options.num_games=1"], "scienceworld": ["env.options.max_steps=4"]}


@pytest.mark.parametrize("env", BUILT_IN)
def test_env_preset_trains_end_to_end(tmp_path, env):
    preset = _preset(env)
    assert preset is not None, f"built-in env {env!r} has no tiny-model preset in configs/"
    try:
        env_class(env)
    except ImportError as err:
        pytest.skip(f"{env}: optional extra not installed ({err})")
    cfg = load_config(
        preset,
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
