"""The command line: a bad config fails before any work, with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cairn._errors import ConfigError
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


# -- presets by name ---------------------------------------------------------------------------
PRESET_DIR = Path(__file__).resolve().parents[1] / "src" / "cairn" / "presets"
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def test_presets_command_lists_every_preset_with_a_description(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == PRESETS
    for line in lines:
        assert len(line.split(maxsplit=1)) == 2, line  # a description after every name
    grpo = next(line for line in lines if line.startswith("sokoban_grpo "))
    assert grpo.split(maxsplit=1)[1] == "GRPO on the demo sokoban with the tiny model"


def test_a_preset_name_loads_like_its_file():
    from cairn.train.config import load_config

    for name in ("sokoban_grpo", "sokoban_grpo.yaml", "configs/sokoban_grpo.yaml"):
        assert load_config(name) == load_config(PRESET_DIR / "sokoban_grpo.yaml"), name


def test_preset_name_outside_the_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert main(["config", "sokoban_ppo", "--set", "seed=4"]) == 0
    out = capsys.readouterr().out
    assert "name: sokoban_ppo" in out and "seed: 4" in out
    assert main(["config", "configs/sokoban_ppo.yaml"]) == 0  # the documented path, too
    assert "name: sokoban_ppo" in capsys.readouterr().out


def test_a_file_wins_over_a_preset_of_the_same_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sokoban_grpo.yaml").write_text("name: mine\n")
    assert main(["config", "sokoban_grpo.yaml"]) == 0
    assert "name: mine" in capsys.readouterr().out


def test_unknown_config_is_one_line_listing_the_presets(tmp_path, capsys):
    assert main(["train", "sokoban_grp", "--set", f"out_dir={tmp_path}"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "sokoban_grp" in out
    assert all(name in out for name in PRESETS)
    assert not any(tmp_path.iterdir())


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"cairn {version('cairn-rl')}"


# -- printed configs load back ------------------------------------------------------------------
@pytest.mark.parametrize("name", PRESETS)
def test_printed_config_loads_back_to_the_same_config(name, tmp_path, capsys):
    from cairn.train.config import load_config

    assert main(["config", name]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert load_config(printed) == load_config(name)


def test_config_keys_prints_regex_defaults_verbatim(capsys, monkeypatch):
    import cairn.train.schema as schema

    # a key whose default is a regex (as a strategy's search pattern would be)
    regex = ("x.search_pattern", r"^\s*search\s*\[(.*)\]\s*$", "a regex")
    keys = schema.describe()
    monkeypatch.setattr(schema, "describe", lambda: [*keys, regex])
    assert main(["config", "--keys"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("x.search_pattern"))
    assert r"'^\\s*search\\s*\\[(.*)\\]\\s*$'" in line  # repr of the regex, "\[" kept
    assert "[bold]" not in out and "[dim]" not in out


# -- one preflight per run ---------------------------------------------------------------------
#: Two iterations of the tiny demo, as fast as a full `cairn train` gets.
TINY = ["train.iterations=2", "train.time_budget_s=null", "rollout.groups=1"]
TINY += ["rollout.group_size=2", "eval.episodes=1", "eval.at_start=false", "log.progress=false"]
TINY += ["train.threads=1", "optim.epochs=1", "checkpoint.every=1"]


def _sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


@pytest.fixture
def preflights(monkeypatch):
    """The configs the preflight (``check_config``) is run on, whichever module calls it."""
    import cairn.train.trainer  # noqa: F401  (imported by the commands; binds the name too)
    from cairn.train import preflight

    calls, original = [], preflight.check_config

    def counting(cfg):
        calls.append(cfg)
        return original(cfg)

    cairn_modules = [m for name, m in list(sys.modules.items()) if name.startswith("cairn")]
    bound = [m for m in cairn_modules if vars(m).get("check_config") is original]
    assert {"cairn.train.config", "cairn.train.trainer"} <= {m.__name__ for m in bound}
    for module in bound:
        monkeypatch.setattr(module, "check_config", counting)
    return calls


def test_cairn_train_runs_the_preflight_once(tmp_path, preflights):
    assert main(["train", *_sets(*TINY, f"out_dir={tmp_path}")]) == 0
    assert len(preflights) == 1
    (run,) = tmp_path.iterdir()
    preflights.clear()
    assert main(["train", "--resume", str(run), *_sets("train.iterations=3")]) == 0
    assert len(preflights) == 1  # the resumed config, amended by --set


def test_cairn_ttrl_runs_the_preflight_once(tmp_path, preflights):
    sets = ["train.iterations=1", "train.max_episodes=null", "rollout.groups=1"]
    sets += ["rollout.group_size=2", "log.progress=false", f"out_dir={tmp_path}"]
    assert main(["ttrl", LADDER, "--problem", "3*x**2", *_sets(*sets)]) == 0
    assert len(preflights) == 1


def test_a_trainer_built_from_code_runs_the_preflight_itself(tmp_path, preflights):
    """Outside the CLI nobody has checked the config: the Trainer does, before any work."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    cfg = load_config(None, ["env.name=no_such_env"], check=False)
    with pytest.raises(ConfigError, match="no_such_env"):
        Trainer(cfg, tmp_path / "run")
    assert len(preflights) == 1 and not (tmp_path / "run").exists()
