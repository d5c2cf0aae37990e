"""A run folder is data: the code its config names (``imports``, the dataset env's reward and
feedback functions) runs only with the reader's consent (cairn.train.trust).

The commands run as real processes, so that nothing imported by the test process can hide an
import: a planted module writes a marker file when it is imported, and the marker must not
appear unless the reader said so (``--trust-code``, the same names with ``--set``, or a run
this user started, recorded in the trust store outside the run)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_run import TINY_RUN

from cairn.train.config import load_config
from cairn.train.trainer import Trainer
from cairn.train.trust import (
    NamedCode,
    UntrustedCode,
    named_code,
    record_run,
    require_consent,
    store_dir,
    trusted_names,
)

SRC = Path(__file__).resolve().parents[2] / "src"
#: Marks each import of the planted module (a line per import) in the file MARKER names.
PLANTED = (
    "import os\n"
    "with open(os.environ['CAIRN_TEST_MARKER'], 'a') as f:\n"
    "    f.write('imported\\n')\n"
    "def correct(prompts, completions, **columns):\n"
    "    return [1.0 for _ in completions]\n"
)
#: Runs ``cairn ARGV`` and then says whether torch was imported (the refusal must not be).
PROBE = (
    "import sys; from cairn.cli import main; rc = main(sys.argv[1:]); "
    "print('torch imported:', 'torch' in sys.modules); sys.exit(rc)"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the planted modules, on the subprocesses' PYTHONPATH."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "planted_mod.py").write_text(PLANTED)
    (folder / "planted_rewards.py").write_text(PLANTED)
    return folder


@pytest.fixture(scope="module")
def others_run(tmp_path_factory, site) -> tuple[Path, Path]:
    """(a finished 2-iteration run whose config imports planted_mod, the trust store folder
    of the user who trained it): someone else's run, for every reader below."""
    work = tmp_path_factory.mktemp("other")
    run = work / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAIRN_CACHE", str(work / "cache"))
        mp.setenv("CAIRN_TEST_MARKER", str(work / "trained.marker"))
        mp.syspath_prepend(str(site))
        cfg = load_config(None, [*TINY_RUN, "train.iterations=2", "imports=[planted_mod]"])
        Trainer(cfg, run).run()
    sys.modules.pop("planted_mod", None)
    return run, work / "cache"


def _cairn(argv: list[str], site: Path, marker: Path, cache: Path) -> tuple[int, list[str]]:
    """``cairn ARGV`` in a fresh process: (exit status, stdout lines)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(SRC)]),
        "CAIRN_TEST_MARKER": str(marker),
        "CAIRN_CACHE": str(cache),
    }
    env.pop("CAIRN_TRACEBACK", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=300
    )
    return done.returncode, done.stdout.splitlines()


def _copy(run: Path, tmp_path: Path) -> Path:
    """The run as a reader received it: copied into a folder of their own."""
    mine = tmp_path / "received"
    shutil.copytree(run, mine, ignore=shutil.ignore_patterns("run.lock"))
    return mine


def _argv(command: str, run: Path, out: Path) -> list[str]:
    return {
        "eval": ["eval", str(run), "--out", str(out / "eval.json")],
        "export": ["export", str(run), str(out / "exported")],
        "inspect": ["inspect", str(run), "--out", str(out / "report.html")],
        "train --resume": ["train", "--resume", str(run), "--set", "train.iterations=3"],
    }[command]


@pytest.mark.parametrize("command", ["eval", "export", "inspect", "train --resume"])
def test_each_command_refuses_a_received_run_that_imports_code(command, others_run, site, tmp_path):
    run = _copy(others_run[0], tmp_path)
    marker, out = tmp_path / "marker", tmp_path / "out"
    rc, lines = _cairn(_argv(command, run, out), site, marker, tmp_path / "cache")
    (error,) = [line for line in lines if line.startswith("error:")]
    assert rc == 2 and lines == [error, "torch imported: False"]  # one line, before torch
    assert f"cairn {command} {run}" in error and "imports planted_mod" in error
    assert "pass --trust-code" in error and "nothing of it ran" in error
    if command == "train --resume":
        assert "--set 'imports=[planted_mod]'" in error
    assert not marker.exists() and not out.exists()  # no code ran, nothing written
    assert not (run / "eval").exists() and not (run / "report.html").exists()


def test_trust_code_runs_what_the_run_names(others_run, site, tmp_path):
    run = _copy(others_run[0], tmp_path)
    marker, out = tmp_path / "marker", tmp_path / "out"
    rc, _ = _cairn([*_argv("eval", run, out), "--trust-code"], site, marker, tmp_path / "cache")
    assert rc == 0 and marker.read_text() == "imported\n" and (out / "eval.json").is_file()


def test_the_same_names_given_with_set_let_a_resume_run_them_and_are_remembered(
    others_run, site, tmp_path, monkeypatch
):
    run = _copy(others_run[0], tmp_path)
    marker, cache = tmp_path / "marker", tmp_path / "cache"
    argv = [*_argv("train --resume", run, tmp_path), "--set", "imports=[planted_mod]"]
    rc, lines = _cairn(argv, site, marker, cache)
    assert rc == 0, lines
    assert marker.read_text().count("imported") >= 1
    sha = hashlib.sha256((run / "config.yaml").read_bytes()).hexdigest()
    monkeypatch.setenv("CAIRN_CACHE", str(cache))
    assert trusted_names(run, sha) == {"imports planted_mod"}  # a later resume: no flag


def test_a_run_started_by_this_user_needs_no_flag(others_run, site, tmp_path):
    run, cache = others_run  # read where it was trained, with its trainer's own store
    marker, out = tmp_path / "marker", tmp_path / "out"
    rc, lines = _cairn(_argv("eval", run, out), site, marker, cache)
    assert rc == 0, lines
    assert marker.read_text() == "imported\n" and (out / "eval.json").is_file()


def test_a_reward_function_by_import_path_is_refused_too(site, tmp_path):
    run = tmp_path / "planted"
    run.mkdir()
    config = {"env": {"name": "dataset", "options": {"reward": "planted_rewards:correct"}}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    marker = tmp_path / "marker"
    for command in ("eval", "train --resume"):
        rc, lines = _cairn(_argv(command, run, tmp_path / "out"), site, marker, tmp_path)
        (error,) = [line for line in lines if line.startswith("error:")]
        assert rc == 2 and "env.options.reward planted_rewards:correct" in error
        assert "torch imported: False" in lines and not marker.exists()
    assert "--set env.options.reward=planted_rewards:correct" in error  # the resume's hint


# -- what counts as named code, and consent, in process ------------------------------------------
def test_named_code_lists_imports_and_the_envs_code_options_everywhere():
    data = {
        "imports": ["my_pkg.tasks", "cairn.envs.dataset"],
        "env": {
            "name": "dataset",
            "options": {"reward": "my_rewards:correct", "feedback": "my_tools:hint", "path": "x"},
        },
        "curriculum": {"options": {"levels": [{}, {"reward": "other:fn"}]}},
    }
    assert [str(c) for c in named_code(data)] == [
        "imports my_pkg.tasks",
        "env.options.reward my_rewards:correct",
        "env.options.feedback my_tools:hint",
        "curriculum.options.levels[1].reward other:fn",
    ]  # cairn's own module is not user code; the env's path option names no code


def test_cairns_own_functions_and_envs_without_code_options_name_nothing():
    default = {"env": {"name": "dataset", "options": {"reward": "cairn.envs.dataset:exact_match"}}}
    assert named_code(default) == [] and named_code({}) == []
    assert named_code({"env": {"name": "sokoban", "options": {"reward": "a:b"}}}) == []
    dotted = {
        "env": {"name": "dataset", "options": {"reward": "cairn.train.compare:shutil.rmtree"}}
    }
    assert [c.value for c in named_code(dotted)] == ["cairn.train.compare:shutil.rmtree"]


def test_a_run_naming_no_code_is_untouched_and_the_store_is_not_read(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": 1, "env": {"name": "countdown"}}))
    assert require_consent(run, "eval") == []
    assert not store_dir().exists()


def test_trust_is_for_this_folder_and_this_config_only(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("imports: [planted_mod]\n")
    with pytest.raises(UntrustedCode, match=r"imports planted_mod\); nothing of it ran"):
        require_consent(run, "inspect")
    record_run(run, [NamedCode("imports", "planted_mod", ("imports",))])
    monkeypatch.setattr("cairn.train.trust.load_plugins", lambda imports: None)
    assert require_consent(run, "inspect") == []  # recorded: no flag
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)  # another folder: not the run that was trusted
    with pytest.raises(UntrustedCode):
        require_consent(moved, "inspect")
    (run / "config.yaml").write_text("imports: [planted_mod]\nseed: 1\n")  # edited
    with pytest.raises(UntrustedCode):
        require_consent(run, "inspect")
    assert store_dir().parent == Path(os.environ["CAIRN_CACHE"])  # outside every run


def test_an_amendment_naming_code_needs_consent_on_a_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    amendment = {"iteration": 2, "changes": [{"key": "imports", "new": ["planted_mod"]}]}
    (run / "amendments.jsonl").write_text(json.dumps(amendment) + "\n")
    assert require_consent(run, "eval") == []  # eval reads config.yaml only
    with pytest.raises(UntrustedCode, match="imports planted_mod"):
        require_consent(run, "train --resume", overrides=[], amendments=True)


def test_trust_code_without_resume_is_one_line(capsys):
    from cairn.cli import main

    assert main(["train", "--trust-code"]) == 2
    assert "--trust-code applies to --resume RUN_DIR" in capsys.readouterr().out
