"""A run's config, its lock and its stops: config.yaml is written once and a
resume checks it against the checkpoint's hash; one writer per run folder; SIGTERM and a
full disk stop a run in one line with its checkpoint intact; the time budget is checked
inside an iteration."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from cairn.cli import main

TINY = ["train.iterations=2", "train.time_budget_s=null", "rollout.groups=1"]
TINY += ["rollout.group_size=2", "eval.episodes=1", "eval.at_start=false", "log.progress=false"]
TINY += ["train.threads=1", "optim.epochs=1", "checkpoint.every=1"]


def _sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


def _one_line(out: str) -> str:
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out, out
    return lines[0]


def _last_line(out: str) -> str:
    """The line a stopped run ends with (after its progress lines), with no traceback."""
    assert "Traceback" not in out, out
    return out.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-iteration run (checkpoints iter_000001 and iter_000002), made once."""
    out = tmp_path_factory.mktemp("integrity")
    assert main(["train", *_sets(f"out_dir={out}", *TINY)]) == 0
    (run,) = out.iterdir()
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the finished run this test may change."""
    copy = tmp_path / trained.name
    shutil.copytree(trained, copy)
    return copy


def _rows(run: Path) -> list[int]:
    return [json.loads(x)["iteration"] for x in (run / "metrics.jsonl").read_text().splitlines()]


# -- config.yaml: written once, checked on resume ------------------------------------------------
def test_resume_never_rewrites_config_and_records_set_as_an_amendment(run, capsys):
    from cairn.train.checkpoint.runconfig import config_sha256
    from cairn.train.config import load_config

    before = (run / "config.yaml").read_bytes()
    assert yaml.safe_load(before)["train"]["iterations"] == 2
    assert main(["train", "--resume", str(run), *_sets("train.iterations=3")]) == 0
    # The old trainer rewrote config.yaml with iterations: 3 on every start.
    assert (run / "config.yaml").read_bytes() == before
    (row,) = [json.loads(x) for x in (run / "amendments.jsonl").read_text().splitlines()]
    assert row["iteration"] == 2  # made when resuming from iter_000002
    assert row["changes"] == [{"key": "train.iterations", "old": 2, "new": 3}]
    assert _rows(run) == [1, 2, 3]
    # iter_000003 records the amended config's hash; iter_000002's copy is the original.
    state = json.loads((run / "checkpoints/iter_000003/state.json").read_text())["state"]
    amended = load_config(run / "config.yaml", ["train.iterations=3"])
    assert state["config_sha256"] == config_sha256(amended)
    assert len(state["config_sha256"]) == 64
    copy = run / "checkpoints/iter_000003/run_config/config.yaml"
    assert yaml.safe_load(copy.read_text())["train"]["iterations"] == 3
    # A second resume (no --set) replays the amendment: the check passes, nothing is added.
    capsys.readouterr()
    assert main(["train", "--resume", str(run), *_sets("train.iterations=4")]) == 0
    rows = [json.loads(x) for x in (run / "amendments.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [2, 3]
    assert rows[1]["changes"] == [{"key": "train.iterations", "old": 3, "new": 4}]
    assert _rows(run) == [1, 2, 3, 4]


def _edit(path: Path, section: str, key: str, value) -> None:
    data = yaml.safe_load(path.read_text())
    data[section][key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


EDITS = {
    # what is done to config.yaml between the kill and the resume -> what the line says
    "empty": (lambda p: p.write_text(""), "is empty"),
    "missing": (lambda p: p.unlink(), "no config.yaml there"),
    "unparsable": (lambda p: p.write_text("train: {iterations: [\n"), "is not valid YAML"),
    "env name": (
        lambda p: _edit(p, "env", "name", "frozenlake") or _edit(p, "env", "options", {}),
        "env.name ('sokoban' -> 'frozenlake')",
    ),
    "hidden_size": (
        lambda p: _edit(p, "model", "hidden_size", 128),
        "model.hidden_size (64 -> 128)",
    ),
}


@pytest.mark.parametrize("edit", EDITS)
def test_resume_refuses_a_config_that_is_not_the_checkpoints(edit, run, capsys):
    change, needle = EDITS[edit]
    change(run / "config.yaml")
    metrics = (run / "metrics.jsonl").read_bytes()
    code = main(["train", "--resume", str(run), *_sets("train.iterations=3")])
    line = _one_line(capsys.readouterr().out)
    assert code == 2 and line.startswith("error: ") and needle in line, line
    # Nothing trained: the old code resumed with the defaults (or the edit) silently.
    assert (run / "metrics.jsonl").read_bytes() == metrics
    assert not (run / "checkpoints/iter_000003").exists()
    assert not (run / "amendments.jsonl").exists()


def test_refusal_without_a_copy_in_the_checkpoint_still_says_what(run, capsys):
    for ckpt in (run / "checkpoints").glob("iter_*"):
        shutil.rmtree(ckpt / "run_config")  # the copy is gone: the hash still refuses
        manifest = json.loads((ckpt / "manifest.json").read_text())
        manifest["files"] = {k: v for k, v in manifest["files"].items() if "run_config" not in k}
        (ckpt / "manifest.json").write_text(json.dumps(manifest))
    _edit(run / "config.yaml", "model", "hidden_size", 128)
    assert main(["train", "--resume", str(run)]) == 2
    assert "holds no intact copy to name the keys" in _one_line(capsys.readouterr().out)


# -- one writer per run folder -------------------------------------------------------------------
HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    f = open(sys.argv[1], "a+")
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0); f.truncate(); f.write(f"{os.getpid()}\\n"); f.flush()
    print("held", flush=True)
    time.sleep(60)
    """
)


def test_a_second_writer_is_refused_naming_the_holders_pid(run, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run / "run.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        metrics = (run / "metrics.jsonl").read_bytes()
        code = main(["train", "--resume", str(run), *_sets("train.iterations=3")])
        line = _one_line(capsys.readouterr().out)
        assert code == 2 and f"process {holder.pid} holds" in line, line
        assert (run / "metrics.jsonl").read_bytes() == metrics  # the old code trained on
        # Readers take no lock: cairn eval of the held run works (and writes only eval/).
        assert main(["eval", str(run), "--episodes", "1", "--out", str(run / "e.json")]) == 0
    finally:
        holder.kill()
        holder.wait()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), *_sets("train.iterations=3")]) == 0
    assert (run / "run.lock").read_text() == ""  # released: no stale pid left


def test_the_lock_is_held_for_the_life_of_the_run(tmp_path, monkeypatch):
    from cairn.data.rundir import RunLock
    from cairn.train.trainer import Trainer

    seen = []
    original = Trainer.train_iteration

    def probe(self):
        seen.append((self.dir / "run.lock").read_text().strip())
        return original(self)

    monkeypatch.setattr(Trainer, "train_iteration", probe)
    assert main(["train", *_sets(f"out_dir={tmp_path}", *TINY)]) == 0
    assert seen == [str(os.getpid())] * 2
    (run,) = tmp_path.iterdir()
    with RunLock(run):  # free again once the run ended
        assert (run / "run.lock").read_text().strip() == str(os.getpid())


FORKING_HOLDER = """
import os, sys, time
from cairn.data.rundir import RunLock
RunLock(sys.argv[1]).acquire()
pid = os.fork()  # as an env worker is forked while the trainer holds the lock
if pid == 0:
    print("child", os.getpid(), flush=True)  # past fork: the at-fork handlers have run
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_a_forked_worker_outliving_a_killed_trainer_does_not_keep_the_run_locked(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", FORKING_HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    worker = int(holder.stdout.readline().split()[1])  # the child is running
    try:
        assert not _free(tmp_path / "run.lock")  # held by the trainer
        holder.kill()  # SIGKILL: no release
        holder.wait()
        assert _free(tmp_path / "run.lock")  # old code: False while the worker lived
    finally:
        holder.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


def _free(path: Path) -> bool:
    """Whether a new open file (as another process's) could flock ``path`` now."""
    import fcntl

    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


# -- SIGTERM and a full disk: one line, checkpoint intact, resumable --------------------------
def _stop_in_iteration(monkeypatch, k: int, stop) -> None:
    from cairn.train.trainer import Trainer

    original = Trainer.train_iteration

    def stopping(self):
        if self.iteration == k:
            stop()
        return original(self)

    monkeypatch.setattr(Trainer, "train_iteration", stopping)


def test_sigterm_is_handled_like_ctrl_c(tmp_path, monkeypatch, capsys):
    def not_handled(signum, frame):  # the old code left SIGTERM to the default: death
        raise AssertionError("SIGTERM reached the default handler")

    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        _stop_in_iteration(monkeypatch, 2, lambda: os.kill(os.getpid(), signal.SIGTERM))
        code = main(["train", *_sets(f"out_dir={tmp_path}", *TINY)])
        assert signal.getsignal(signal.SIGTERM) is not_handled  # put back afterwards
    finally:
        signal.signal(signal.SIGTERM, previous)
    (run,) = tmp_path.iterdir()
    line = _last_line(capsys.readouterr().out)
    assert code == 143
    assert (
        line
        == f"terminated (SIGTERM): iter_000001 is intact; resume with cairn train --resume {run}"
    )
    monkeypatch.undo()
    assert main(["train", "--resume", str(run)]) == 0
    assert _rows(run) == [1, 2]


def test_sighup_is_handled_like_sigterm(tmp_path, monkeypatch, capsys):
    # SIGHUP (a closed terminal) must end a run like SIGTERM: one line, checkpoint intact.
    def not_handled(signum, frame):  # the default would end the test process itself
        raise AssertionError("SIGHUP reached the default handler")

    previous = signal.signal(signal.SIGHUP, not_handled)
    try:
        _stop_in_iteration(monkeypatch, 2, lambda: os.kill(os.getpid(), signal.SIGHUP))
        code = main(["train", *_sets(f"out_dir={tmp_path}", *TINY)])
        assert signal.getsignal(signal.SIGHUP) is not_handled  # put back afterwards
    finally:
        signal.signal(signal.SIGHUP, previous)
    (run,) = tmp_path.iterdir()
    line = _last_line(capsys.readouterr().out)
    assert code == 129
    assert (
        line
        == f"terminated (SIGHUP): iter_000001 is intact; resume with cairn train --resume {run}"
    )


@pytest.mark.parametrize("where", ["metrics", "checkpoint"])
def test_disk_full_is_one_line_and_the_run_resumes(where, tmp_path, monkeypatch, capsys):
    import cairn.data.rundir as rundir_mod
    import cairn.train.checkpoint.write as write_mod

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    if where == "metrics":  # the row of iteration 2 cannot be appended
        original = rundir_mod.append_metrics

        def append(run_dir, row):
            if row["iteration"] == 2:
                with (Path(run_dir) / "metrics.jsonl").open("a") as f:
                    f.write('{"iteration": 2, "torn')  # what a full disk leaves
                full(Path(run_dir) / "metrics.jsonl")
            original(run_dir, row)

        monkeypatch.setattr(rundir_mod, "append_metrics", append)
    else:  # the checkpoint of iteration 2 cannot be written
        original = write_mod.write_checkpoint

        def save(run_dir, iteration, *args, **kwargs):
            if iteration == 2:
                (run_dir / "checkpoints/.iter_000002.tmp").mkdir()
                full(run_dir / "checkpoints/.iter_000002.tmp/model.safetensors")
            return original(run_dir, iteration, *args, **kwargs)

        monkeypatch.setattr(write_mod, "write_checkpoint", save)
    code = main(["train", *_sets(f"out_dir={tmp_path}", *TINY)])
    (run,) = tmp_path.iterdir()
    line = _last_line(capsys.readouterr().out)
    assert code == 2 and "No space left on device" in line, line
    assert line.endswith(f"iter_000001 is intact; resume with cairn train --resume {run}")
    monkeypatch.undo()
    assert main(["train", "--resume", str(run)]) == 0
    assert _rows(run) == [1, 2]


# -- the time budget inside an iteration --------------------------------------------------------
def test_time_budget_stops_the_ppo_epochs_of_the_iteration_in_flight(tmp_path, monkeypatch):
    import cairn.train.learners as learners_mod

    updates = []
    original = learners_mod.apply_gradients

    def counting(*args, **kwargs):
        updates.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(learners_mod, "apply_gradients", counting)
    sets = [*TINY, "optim.epochs=20", "optim.minibatch_size=4096", "train.iterations=5"]
    # 1 ms of budget: the first iteration overruns it during its first epoch. One minibatch
    # per epoch, so the old code made 20 updates (20 epochs) before it looked at the clock.
    assert main(["train", *_sets(f"out_dir={tmp_path}", *sets, "train.time_budget_s=0.001")]) == 0
    assert len(updates) == 1
    (run,) = tmp_path.iterdir()
    assert _rows(run) == [1]  # logged, checkpointed and ended as usual
    assert (run / "checkpoints/iter_000001/manifest.json").is_file()


def test_out_of_time_counts_the_iteration_in_flight(monkeypatch):
    import cairn.train.trainer as trainer_mod
    from cairn.train.checkpoint.state import TrainState
    from cairn.train.config import load_config

    t = trainer_mod.Trainer.__new__(trainer_mod.Trainer)
    t.cfg = load_config(None, ["train.time_budget_s=10"])
    t.state = TrainState.start(seed=0)  # the counters live here
    t.train_seconds, t.iteration_started = 8.0, 100.0  # 8 s before this iteration
    monkeypatch.setattr(trainer_mod.time, "perf_counter", lambda: 101.5)
    assert not t.out_of_time()  # 8 + 1.5 = 9.5 < 10
    monkeypatch.setattr(trainer_mod.time, "perf_counter", lambda: 102.0)
    assert t.out_of_time()  # 8 + 2 = 10 >= 10
    t.cfg = load_config(None, ["train.time_budget_s=null"])
    assert not t.out_of_time()


# -- cairn eval on a base model that does not load ------------------------------------------------
def test_eval_of_an_unloadable_base_model_is_one_line(run, tmp_path, monkeypatch, capsys):
    from transformers import AutoModelForCausalLM

    import cairn.train.evaluate as evaluate_mod

    base = tmp_path / "base"  # a LoRA checkpoint's base: a config and garbage weights
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (base / "model.safetensors").write_bytes(b"\xff" * 64)

    def load_base(*args, **kwargs):  # what the LoRA path does with model.path
        return AutoModelForCausalLM.from_pretrained(base)

    monkeypatch.setattr(evaluate_mod, "build_policy", load_base)
    assert main(["eval", str(run)]) == 2  # the old code: a SafetensorError traceback
    out, err = capsys.readouterr()
    line = _one_line(out)
    assert line.startswith(f"error: cannot evaluate {run}:") and "Traceback" not in err


def test_a_damaged_amendments_file_is_refused_in_one_line(run, capsys):
    (run / "amendments.jsonl").write_text('{"iteration": 1, "changes": [5]}\n')
    assert main(["train", "--resume", str(run)]) == 2
    assert "amendments.jsonl row 1 is not an amendment" in _one_line(capsys.readouterr().out)


def test_config_changes_and_their_replay_are_inverse():
    from cairn.train.checkpoint.runconfig import apply_changes, config_changes, describe_changes

    old = {"env": {"name": "sokoban", "options": {"size": 6}}, "train": {"iterations": 2}}
    new = {"env": {"name": "sokoban", "options": {"render": "grid"}}, "train": {"iterations": 3}}
    changes = config_changes(old, new)
    assert changes == [
        {"key": "env.options.size", "old": 6},  # removed: no "new"
        {"key": "env.options.render", "new": "grid"},  # added: no "old"
        {"key": "train.iterations", "old": 2, "new": 3},
    ]
    assert apply_changes(json.loads(json.dumps(old)), changes) == new
    assert describe_changes(changes[2:]) == "train.iterations (2 -> 3)"
