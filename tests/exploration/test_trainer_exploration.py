"""The exploration methods inside the trainer: composition, flags reaching the loss, resume."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from cairn._errors import ConfigError
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

SMALL = [
    "rollout.groups=2",
    "rollout.group_size=3",
    "optim.minibatch_size=64",
    "optim.epochs=1",
    "eval.episodes=2",
    "eval.every=0",
    "eval.at_start=false",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "log.trajectories_every=0",
]

EMPO2_OFF = [
    "exploration.memory.enabled=true",
    "exploration.memory.embedder=tfidf",
    "exploration.memory.probs={off_policy: 1.0}",
    "rewards=[{name: novelty, options: {weight: 0.1}}]",
]


def _cfg(tmp_path, *extra):
    return load_config(None, [*SMALL, f"out_dir={tmp_path}", *extra])


def test_gigpo_empo2_luffy_compose_and_reach_the_loss(tmp_path, monkeypatch):
    import cairn.train.learners as learners_mod

    seen = []
    real = learners_mod.policy_loss

    def spy(*args, **kwargs):
        flags = kwargs["flags"]
        seen.append((flags.get("off_policy"), flags.get("tips_stripped")))
        return real(*args, **kwargs)

    monkeypatch.setattr(learners_mod, "policy_loss", spy)
    cfg = _cfg(
        tmp_path, "train.iterations=2", "advantage.name=gigpo", *EMPO2_OFF,
        "exploration.demos.enabled=true",
    )  # fmt: skip
    Trainer(cfg, tmp_path / "combo").run()
    rows = read_metrics(tmp_path / "combo")
    last = rows[-1]
    assert last["demos/per_group"] == 1.0 and last["memory/tips"] > 0
    assert last["actor/offpolicy_frac"] > 0  # demonstration tokens: LUFFY shaping
    # iteration 2 samples with the tips iteration 1 wrote, and trains without them
    assert last["memory/tipped_steps"] > 0 and "actor/turn_masked_frac" in last
    assert any(ts is not None and ts.any() for _, ts in seen)
    assert all(off is not None for off, _ in seen)


@pytest.mark.slow
def test_empo2_resume_repeats_an_uninterrupted_run(tmp_path, run_stopped):
    extra = [*EMPO2_OFF, "exploration.memory.probs={on_policy: 0.5, off_policy: 0.5}"]
    cfg = _cfg(tmp_path, "train.iterations=3", *extra)
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(cfg, full).run()
    run_stopped(cfg, part, 2)
    Trainer(cfg, part, resume=True).run()
    strip = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "eval/"))}  # noqa: E731
    a, b = read_metrics(full), read_metrics(part)
    assert [strip(x) for x in a] == [strip(y) for y in b]


_KILL = """
import os, signal, sys
from cairn.exploration.memory import MemoryStore
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

calls = {"n": 0}
real_add = MemoryStore.add

def add(self, partition, tips):
    out = real_add(self, partition, tips)
    calls["n"] += 1
    if calls["n"] == int(sys.argv[2]):  # mid-iteration 3: tips committed, no checkpoint
        os.kill(os.getpid(), signal.SIGKILL)
    return out

MemoryStore.add = add
cfg = load_config(None, sys.argv[3:])
Trainer(cfg, sys.argv[1]).run()
"""


def _tips(run) -> set[tuple[str, str]]:
    db = sqlite3.connect(run / "memory.sqlite")
    return set(db.execute("SELECT context, text FROM tips").fetchall())


@pytest.mark.slow
def test_killed_empo2_run_keeps_every_tip_after_resume(tmp_path):
    run = tmp_path / "run"
    args = [*SMALL, f"out_dir={tmp_path}", "train.iterations=3", *EMPO2_OFF]
    per_iteration = 2 * 3  # groups x group_size episodes, one store.add each
    kill_at = 2 * per_iteration + 3
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _KILL, str(run), str(kill_at), *args], env=env, timeout=300
    )
    assert done.returncode == -signal.SIGKILL
    before = _tips(run)
    assert before
    Trainer(load_config(None, args), run, resume=True).run()
    after = _tips(run)
    assert before <= after  # nothing written before the kill is lost
    assert [r["iteration"] for r in read_metrics(run)] == [1, 2, 3]


def test_exploration_config_checks():
    with pytest.raises(ConfigError, match="sum to 1"):
        load_config(None, ["exploration.memory.probs={tips: 0.3}"])
    with pytest.raises(ConfigError, match=r"exploration\.demos"):
        load_config(None, ["exploration.demos.n_off=0"])
    cfg = load_config(None)
    assert not any(getattr(cfg.exploration, s).enabled for s in ("memory", "demos", "variants"))
