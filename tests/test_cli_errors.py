"""Bad input gets one clear line, a non-zero exit and no run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cairn.cli import main

TINY = ["train.iterations=2", "train.time_budget_s=null", "rollout.groups=1"]
TINY += ["rollout.group_size=2", "eval.episodes=1", "eval.at_start=false", "log.progress=false"]


def _sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


def _model_dir(root: Path, kind: str) -> str:
    path = root / kind
    path.mkdir()
    if kind == "broken":
        (path / "config.json").write_text("{not json")
    elif kind == "no-weights":  # passes the load-time check, fails as the run starts
        (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return str(path)


def _no_run_yet(root: Path) -> Path:
    run = root / "stopped"
    run.mkdir()
    (run / "config.yaml").write_text("name: stopped\n")
    return run


CASES = {
    "model path missing": lambda r: ["train", *_sets("model.path=/nonexistent")],
    "model config broken": lambda r: ["train", *_sets(f"model.path={_model_dir(r, 'broken')}")],
    "model dir empty": lambda r: ["train", *_sets(f"model.path={_model_dir(r, 'empty')}")],
    "model unloadable": lambda r: ["train", *_sets(f"model.path={_model_dir(r, 'no-weights')}")],
    "env size": lambda r: ["train", *_sets("env.options.size=2")],
    "env max_steps": lambda r: ["train", *_sets("env.options.max_steps=-1")],
    "strategy option": lambda r: ["train", *_sets("rollout.options.foo=1")],
    "strategy value": lambda r: [
        "train",
        *_sets("rollout.strategy=tree", "rollout.options.width=0"),
    ],
    "device": lambda r: ["train", *_sets("model.device=cuda:7")],
    "resume no checkpoint": lambda r: ["train", "--resume", str(_no_run_yet(r))],
    "eval no checkpoint": lambda r: ["eval", str(_no_run_yet(r))],
    "ttrl bad problem": lambda r: ["ttrl", "integration_ladder", "--problem", "x**"],
    "override not yaml": lambda r: ["config", *_sets("rollout.stop=[a")],
    "bad regex": lambda r: ["train", *_sets("agent.action_pattern=(")],
    "port": lambda r: ["inspect", str(_no_run_yet(r)), "--serve", "--port", "70000"],
    "resume with a config": lambda r: ["train", "sokoban_grpo", "--resume", str(_no_run_yet(r))],
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_leaves_no_run_folder(case, tmp_path, capsys):
    if case == "device" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    argv = CASES[case](tmp_path)
    out_dir = tmp_path / "runs"
    if argv[0] in ("train", "ttrl") and "--resume" not in argv:
        argv += _sets(f"out_dir={out_dir}", *TINY)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out.startswith("error: ") and out.count("\n") == 1, out
    assert "Traceback" not in out + err
    assert not out_dir.exists()  # no run folder for a run that never started
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("stop_after", [0, 1])
def test_interrupt_names_the_run_and_what_can_be_resumed(stop_after, tmp_path, capsys, monkeypatch):
    from cairn.train.trainer import Trainer

    original = Trainer.train_iteration

    def interrupted(self):
        if self.iteration > stop_after:  # Ctrl-C during iteration stop_after + 1
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(Trainer, "train_iteration", interrupted)
    assert main(["train", *_sets(f"out_dir={tmp_path}", *TINY)]) == 130
    out = capsys.readouterr().out
    (run,) = tmp_path.iterdir()
    assert "RUN_DIR" not in out
    if stop_after:
        assert f"iter_000001 is intact; resume with cairn train --resume {run}" in out
    else:
        assert f"interrupted before the first checkpoint of {run}: nothing to resume" in out


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("env.options.size=2", "size must be"),
        ("env.options.max_steps=-1", "max_steps must be"),
        ("rollout.options.foo=1", "has no option 'foo'"),
        ("agent.action_pattern=(", "not a valid regular expression"),
        ("model.path=/nonexistent", "no such folder"),
    ],
)
def test_options_are_checked_when_the_config_loads(override, needle):
    from cairn._errors import ConfigError
    from cairn.train.config import load_config

    with pytest.raises(ConfigError, match=needle) as err:
        load_config(None, [override])
    assert "\n" not in str(err.value)  # one problem, one line


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_config_that_is_no_regular_file_is_one_line_not_a_hang(tmp_path, capsys, kind):
    import os

    path = tmp_path / "config.yaml"
    if kind == "fifo":  # before: "does not exist", and a read would have blocked
        os.mkfifo(path)
    else:
        path.mkdir()
    assert main(["train", str(path), *_sets(f"out_dir={tmp_path / 'runs'}")]) == 2
    out = capsys.readouterr()
    lines = [x for x in (out.out + out.err).splitlines() if x.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0], lines
    assert not (tmp_path / "runs").exists()
