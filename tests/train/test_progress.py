"""The live line within a long iteration (cairn.train.progress): a fake slow iteration that
reports its turns and minibatches as the turn loop and the learners do."""

from __future__ import annotations

import io
import json
import re
import time

import numpy as np
from rich.console import Console

from cairn import _progress
from cairn.train.learners import run_epochs
from cairn.train.progress import LiveLine
from cairn.train.runlog import RunLog


def _slow_iteration(pause: float) -> None:
    """8 episodes over 2 turns (3 end in the first), then 2 minibatch updates."""
    _progress.turn_done(1, 3)
    time.sleep(pause)
    _progress.turn_done(2, 5)
    time.sleep(pause)
    _progress.minibatch_done(1, 2)
    time.sleep(pause)
    _progress.minibatch_done(2, 2)
    time.sleep(pause)


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=120, highlight=False), out


def test_plain_console_prints_counts_and_elapsed_while_the_iteration_runs():
    console, out = _console(terminal=False)
    with LiveLine(console, True, iteration=3, episodes=8, after_s=0.0, every_s=0.0, tick_s=0.02):
        _slow_iteration(0.15)
    lines = out.getvalue().splitlines()
    # each stage was on screen at least once: the turn being sampled, then the updates
    assert any("episodes 3/8 · turn 2 · minibatches 0/?" in x for x in lines), lines
    assert any("episodes 8/8 · minibatches 1/2" in x for x in lines), lines
    assert all(x.startswith("it    3 · ") and x.endswith(" s") for x in lines), lines


def test_terminal_line_is_redrawn_and_erased():
    console, out = _console(terminal=True)
    with LiveLine(console, True, iteration=1, episodes=8, after_s=0.0, tick_s=0.02):
        _slow_iteration(0.1)
    text = out.getvalue()
    assert "minibatches 2/2" in text or "minibatches 1/2" in text
    assert "\x1b[" in text  # cursor control: one line redrawn in place, not a log of lines


def test_quiet_before_after_s_and_when_disabled():
    for enabled, after in ((True, 60.0), (False, 0.0)):
        console, out = _console(terminal=False)
        with LiveLine(console, enabled, 1, 8, after_s=after, every_s=0.0, tick_s=0.01):
            _slow_iteration(0.05)
        assert out.getvalue() == ""


def test_no_sink_outside_the_iteration():
    seen = []

    class Sink:
        def turn_done(self, turn: int, ended: int) -> None:
            seen.append(("turn", turn, ended))

        def minibatch_done(self, done: int, total: int) -> None:
            seen.append(("mb", done, total))

    with _progress.reporting(Sink()):
        run_epochs(6, 2, 3, np.random.default_rng(0), lambda idx: {})
    _progress.turn_done(1, 1)  # no sink: ignored
    assert seen == [("mb", k, 6) for k in range(1, 7)]


def test_runlog_live_line_follows_log_progress_and_stays_off_the_metrics(tmp_path):
    cfg = {"log": {"loggers": ["jsonl"]}}
    quiet = RunLog(tmp_path / "quiet", progress=False, config=cfg)
    assert quiet.live_line(1, 8).enabled is False
    log = RunLog(tmp_path / "live", progress=True, config=cfg)
    log.console.file = io.StringIO()
    line = log.live_line(2, 8)
    line.after_s, line.every_s, line.tick_s = 0.0, 0.0, 0.02
    with line:
        _slow_iteration(0.1)
    log.metrics({"iteration": 2, "episodes": 8})
    assert "episodes 8/8" in log.console.file.getvalue()
    rows = [json.loads(x) for x in (tmp_path / "live" / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"iteration": 2, "episodes": 8}]


def test_a_training_run_shows_the_line_within_its_iterations(tmp_path, monkeypatch):
    """The trainer wraps each iteration in the live line: with the thresholds at zero a
    tiny-model run prints the counts of its turns and minibatches, and metrics.jsonl has
    only the iteration rows."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    make_line = RunLog.live_line

    def fast(self, iteration, episodes):
        line = make_line(self, iteration, episodes)
        line.after_s, line.every_s, line.tick_s = 0.0, 0.0, 0.005
        return line

    monkeypatch.setattr(RunLog, "live_line", fast)
    sets = ["rollout.groups=2", "rollout.group_size=4", "optim.minibatch_size=8",
            "optim.epochs=1", "eval.at_start=false", "eval.every=0", "eval.episodes=2",
            "train.time_budget_s=null", "train.threads=1", "train.iterations=1",
            "log.progress=true", f"out_dir={tmp_path}"]  # fmt: skip
    trainer = Trainer(load_config(None, sets), tmp_path / "run")
    trainer.log.console.file = out = io.StringIO()
    trainer.run()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", out.getvalue())  # the redraws, as lines
    assert re.search(r"it    1 · episodes [0-8]/8 · turn \d+ · minibatches 0/\? · \d+ s", shown)
    assert re.search(r"it    1 · episodes 8/8 · minibatches 1/\d+ · \d+ s", shown)
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and "episodes 8/8" not in rows[0]
