"""The command line: a bad config fails before any work, with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cairn.cli import main

LADDER = str(Path(__file__).resolve().parents[1] / "configs" / "integration_ladder.yaml")


def test_bad_config_value_exits_2_before_any_work(tmp_path, capsys):
    code = main(["train", "--set", "rollout.group_size=zero", "--set", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert code == 2
    assert "rollout.group_size" in out and "'zero'" in out
    assert not any(tmp_path.iterdir())  # no run directory was created


def test_unknown_key_lists_allowed_keys(capsys):
    assert main(["train", "--set", "optim.learning_rate=0.1"]) == 2
    out = capsys.readouterr().out
    assert "optim.learning_rate" in out and "lr" in out and "minibatch_size" in out


def test_console_script_is_installed():
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "config", "--set", "seed=3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "seed: 3" in out


def test_config_keys_lists_help(capsys):
    assert main(["config", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "rollout.group_size" in out and "episodes per task instance" in out


def test_ttrl_trains_on_the_problem_and_restores_the_weights(tmp_path, capsys):
    code = main(
        [
            "ttrl",
            LADDER,
            "--problem",
            "3*x**2",
            *("--set", f"out_dir={tmp_path}", "--set", "train.iterations=1"),
            *("--set", "train.max_episodes=null", "--set", "rollout.groups=1"),
            *("--set", "rollout.group_size=2", "--set", "log.progress=false"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "weights restored: True" in out
    (run,) = tmp_path.iterdir()
    assert "3*x**2" in (run / "config.yaml").read_text()


def test_ttrl_from_a_folder_without_checkpoint_is_a_clear_error(tmp_path, capsys):
    code = main(["ttrl", LADDER, "--problem", "x", "--from", str(tmp_path)])
    assert code == 2 and "no checkpoint" in capsys.readouterr().out
