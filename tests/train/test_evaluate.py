"""`cairn eval` opens a run read-only: it writes only its result file,
repeats the trainer's own evaluation of the same weights, and works on a live run."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.cli import main
from cairn.train.checkpoint.read import Checkpoint
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

SRC = Path(__file__).resolve().parents[2] / "src"
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
]


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("eval") / "run"
    Trainer(load_config(None, [*TINY, "train.iterations=2"]), run).run()
    return run


def test_eval_writes_only_its_result_and_repeats_the_final_eval(finished_run, capsys):
    before = _files(finished_run)
    assert main(["eval", str(finished_run)]) == 0
    after = _files(finished_run)
    new = set(after) - set(before)
    assert new == {"eval/iter_000002-6.json", "eval/iter_000002-6.episodes.jsonl.gz"}
    assert {k: after[k] for k in before} == before  # every run file byte-identical
    result = json.loads(after["eval/iter_000002-6.json"])
    assert json.loads(capsys.readouterr().out.split("\nwritten:")[0]) == result
    last = json.loads((finished_run / "summary.json").read_text())["evals"][-1]
    # the trainer evaluated these weights after iteration 2: the same greedy episodes
    assert result["eval/success"] == last["eval/success"]
    assert result["eval/return"] == pytest.approx(last["eval/return"], abs=1e-12)
    assert result["checkpoint"] == "iter_000002" and result["episodes"] == 6
    # the episodes behind the numbers: one record per held-out seed, in the dumps' format
    assert result["episodes_file"] == "iter_000002-6.episodes.jsonl.gz"
    lines = gzip.decompress(after["eval/iter_000002-6.episodes.jsonl.gz"]).decode().splitlines()
    records = [json.loads(line) for line in lines]
    offset = load_config(finished_run / "config.yaml", []).eval.seed_offset
    assert [r["task"] for r in records] == [offset + i for i in range(6)]
    assert sum(r["success"] for r in records) / 6 == result["eval/success"]
    assert sum(r["return"] for r in records) / 6 == pytest.approx(result["eval/return"])
    steps = [s for r in records for s in r["steps"]]
    assert steps and all(s["action"] and "observation" in s and "prompt" in s for s in steps)


def test_eval_episodes_and_out_file(finished_run, tmp_path):
    before = _files(finished_run)
    out = tmp_path / "res.json"
    assert main(["eval", str(finished_run), "--episodes", "3", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["episodes"] == 3
    assert _files(finished_run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.episodes.jsonl.gz", "res.json"]
    assert "episodes: 6" in (finished_run / "config.yaml").read_text()


@pytest.mark.parametrize("what", ["no checkpoint", "not a run"])
def test_eval_without_checkpoint_is_one_line(tmp_path, capsys, what):
    run = tmp_path / "run"
    run.mkdir()
    if what == "no checkpoint":
        (run / "config.yaml").write_text("name: x\n")
    assert main(["eval", str(run)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and ("no checkpoint" in out or "no config.yaml" in out)
    assert [p.name for p in run.iterdir()] == (["config.yaml"] if what == "no checkpoint" else [])


def test_eval_of_a_run_that_is_still_training(tmp_path):
    """The trainer keeps one checkpoint and rewrites it every iteration while eval reads."""
    overrides = [*TINY, "train.iterations=400", "checkpoint.every=1", "checkpoint.keep=1"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "cairn.cli", "train", "--set", f"out_dir={tmp_path}"]
    trainer = subprocess.Popen(
        [*cmd, *(x for s in overrides for x in ("--set", s))],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        while not list(tmp_path.glob("*/checkpoints/latest")) and time.time() < deadline:
            assert trainer.poll() is None, trainer.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        (run,) = tmp_path.iterdir()
        config = (run / "config.yaml").read_bytes()
        latest = run / "checkpoints" / "latest"
        assert main(["eval", str(run), "--episodes", "2"]) == 0
        first = latest.read_text()
        while latest.read_text() == first and time.time() < deadline:
            assert trainer.poll() is None, trainer.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        assert latest.read_text() != first  # a second time, after the checkpoint moved on
        assert main(["eval", str(run), "--episodes", "2"]) == 0
        assert trainer.poll() is None  # it was training all along
    finally:
        trainer.send_signal(signal.SIGINT)
        try:
            trainer.wait(60)
        except subprocess.TimeoutExpired:  # no trainer left behind to load the machine
            trainer.kill()
            _, err = trainer.communicate()
            pytest.fail(
                f"the trainer ran on 60 s after SIGINT; its stderr:\n{err.decode()[-3000:]}"
            )
    assert (run / "config.yaml").read_bytes() == config  # eval.episodes not written back
    iters = [r["iteration"] for r in read_metrics(run)]
    assert iters == list(range(1, len(iters) + 1)) and len(iters) >= 2  # nothing truncated
    dumps = sorted(p.name for p in (run / "trajectories").glob("iter_*.jsonl.gz"))
    assert len(dumps) >= len(iters)  # none deleted
    assert len(list((run / "eval").glob("iter_*-2.json"))) >= 1


# what the loaders raised when a thread deleted the checkpoint while cairn eval read it
# (60 tries at delays of 0-120 ms): ValueError, OSError, FileNotFoundError, and a TypeError
# from transformers opening the generation_config.json it had found a moment before
VANISHED = [
    ValueError("cannot load checkpoint {} from local safetensors files"),
    OSError("{} does not appear to have a file named generation_config.json"),
    TypeError("expected str, bytes or os.PathLike object, not NoneType"),
]


@pytest.mark.parametrize("vanished", VANISHED, ids=lambda e: type(e).__name__)
def test_eval_retries_when_the_checkpoint_vanishes_while_read(tmp_path, monkeypatch, vanished):
    """A live trainer prunes the checkpoint eval picked: the loaders report the missing file
    in one of several ways, and eval takes the newer checkpoint (the CI flakes of
    test_eval_of_a_run_that_is_still_training); an error on a checkpoint still there is
    raised as it is."""
    import cairn.train.evaluate as ev

    run = tmp_path / "run"
    (run / "checkpoints" / "iter_000003").mkdir(parents=True)
    (run / "config.yaml").write_text("name: x\nenv: {name: sokoban}\n")
    picks = iter([Checkpoint(run / "checkpoints" / f"iter_00000{n}") for n in (2, 3)])
    monkeypatch.setattr(ev, "newest_checkpoint", lambda _: next(picks))

    def load(cfg, ckpt):
        if not ckpt.exists():
            raise type(vanished)(str(vanished.args[0]).format(ckpt))
        return {"eval/success": 0.5}, []

    monkeypatch.setattr(ev, "evaluate_checkpoint", load)
    result, _ = ev.evaluate_run(run, episodes=2)
    assert result["checkpoint"] == "iter_000003" and result["eval/success"] == 0.5

    def broken(cfg, ckpt):
        raise type(vanished)("bad weights")

    newest = Checkpoint(run / "checkpoints" / "iter_000003")
    monkeypatch.setattr(ev, "newest_checkpoint", lambda _: newest)
    monkeypatch.setattr(ev, "evaluate_checkpoint", broken)
    with pytest.raises(type(vanished), match="bad weights"):
        ev.evaluate_run(run, episodes=2)


def test_eval_racing_pruning_names_the_prune_not_the_model_path(tmp_path, monkeypatch):
    """With checkpoint.keep=1 every checkpoint eval picks may be pruned while it is read: the
    error names the pruning, not the loader's "point model.path at a local folder"."""
    import itertools

    import cairn.train.evaluate as ev

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("name: x\nenv: {name: sokoban}\ncheckpoint: {keep: 1}\n")
    numbers = itertools.count(200)
    monkeypatch.setattr(
        ev,
        "newest_checkpoint",
        lambda _: Checkpoint(run / "checkpoints" / f"iter_{next(numbers):06d}"),
    )

    def load(cfg, ckpt):  # the folder is gone by the time the weights are read
        raise ValueError(
            f"cannot load checkpoint {ckpt} from local safetensors files (Repo id must be in "
            "the form 'repo_name'); point model.path at a local folder with model.safetensors"
        )

    monkeypatch.setattr(ev, "evaluate_checkpoint", load)
    with pytest.raises(ev.CheckpointPruned, match=r"was pruned while it was read .*keep=1") as err:
        ev.evaluate_run(run, episodes=2)
    assert "model.path" not in str(err.value)


def test_held_out_envs_take_eval_env_options_over_env_options(tmp_path):
    """``eval.env_options`` (e.g. a test split) build the held-out envs of the trainer and of
    ``cairn eval``; training keeps ``env.options``; a bad one fails at load naming the key."""
    from cairn._errors import ConfigError
    from cairn.train.evaluate import open_checkpoint

    cfg = load_config(None, [*TINY, "eval.env_options={max_steps: 7}"])
    assert cfg.eval_env_options() == {**cfg.env.options, "max_steps": 7}
    assert cfg.env.options["max_steps"] == 15  # the demo's, for training
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert trainer.parts.eval_envs.factory.options["max_steps"] == 7
        assert trainer.parts.train_envs.factory.options["max_steps"] == 15
    finally:
        trainer.close()
    with open_checkpoint(cfg, None) as (_, envs, _):
        assert envs.factory.options["max_steps"] == 7
    with pytest.raises(ConfigError, match=r"eval\.env_options.*max_steps"):
        load_config(None, ["eval.env_options={max_steps: 0}"])
