"""A comparison owns its output folder: a second `cairn compare` into the same --out stops
in one line and leaves the first undisturbed; a seed folder another process writes is never
deleted by a clean start."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.data.rundir import RunLocked
from cairn.train import compare as compare_mod
from cairn.train.compare import compare

TINY = [
    "train.iterations=3",
    "train.time_budget_s=null",
    "rollout.groups=2",
    "rollout.group_size=2",
    "optim.epochs=1",
    "eval.episodes=2",
    "eval.every=0",
    "eval.at_start=false",
    "train.threads=1",
    "checkpoint.every=1",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *args], capture_output=True, text=True, timeout=120
    )


def _hold(path: Path) -> subprocess.Popen:
    """Another process holding an flock on ``path`` (with its pid in it), as a live writer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time; f = open(sys.argv[1], 'a+'); "
         "fcntl.flock(f, fcntl.LOCK_EX); f.write(f'{os.getpid()}\\n'); f.flush(); "
         "print('held', flush=True); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_compare_into_a_folder_another_compare_holds_stops_in_one_line(tmp_path):
    out = tmp_path / "cmp"
    holder = _hold(out / "compare.lock")
    try:
        res = _cli("compare", "sokoban_gigpo", "--seeds", "1", "--out", str(out))
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"process {holder.pid} runs a cairn compare" in res.stdout
    assert len(res.stdout.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["compare.lock"]  # nothing else written


@pytest.mark.slow
def test_a_second_compare_into_the_same_out_stops_in_one_line(tmp_path):
    out = tmp_path / "cmp"
    sets = [x for kv in [*TINY, "train.iterations=40"] for x in ("--set", kv)]
    first = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "compare", "sokoban_gigpo", "--seeds", "1",
         *sets, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lock = out / "sokoban_gigpo" / "seed0" / "run.lock"
    deadline = time.monotonic() + 90
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = _cli("compare", "sokoban_gigpo", "--seeds", "1", *sets, "--out", str(out))
    _, stderr = first.communicate(timeout=300)
    # Old code: the second one's clean start deleted the first run's folder, lock included;
    # the first crashed (FileNotFoundError) or its metrics ended with iterations [1, 1, 2].
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert "is in use" in second.stdout and "compare.lock" in second.stdout
    assert len(second.stdout.strip().splitlines()) == 1
    assert first.returncode == 0, stderr[-2000:]
    rows = (out / "sokoban_gigpo" / "seed0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == list(range(1, 41))


def test_a_seed_folder_held_by_another_process_is_never_deleted(tmp_path):
    run = tmp_path / "cmp" / "sokoban_gigpo" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n')  # a live run before its checkpoint
    holder = _hold(run / "run.lock")  # e.g. a cairn train --resume of that folder
    try:
        with pytest.raises(RunLocked, match=f"process {holder.pid} holds"):
            compare(["sokoban_gigpo"], 1, tmp_path / "cmp", TINY)
        assert (run / "metrics.jsonl").read_text() == '{"iteration": 1}\n'  # untouched
    finally:
        holder.kill()
        holder.wait()


def test_a_clean_start_keeps_the_lock_file_it_holds(tmp_path, monkeypatch):
    run = tmp_path / "seed0"
    run.mkdir()
    (run / "run.lock").write_text("")
    (run / "trajectories").mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    inode = (run / "run.lock").stat().st_ino
    with compare_mod._own(run):
        compare_mod._clear(run)
        assert sorted(p.name for p in run.iterdir()) == ["run.lock"]
        assert (run / "run.lock").stat().st_ino == inode
        with open(run / "run.lock") as f, pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still held, on the same file
    assert Path(run / "run.lock").exists()
