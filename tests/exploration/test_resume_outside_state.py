"""State a run keeps outside its checkpoint (EMPO2's memory.sqlite) goes back to the
checkpoint on ``--resume``: a run killed with SIGKILL mid-run and resumed repeats the
uninterrupted run exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cairn.exploration.memory import MemoryStore, Tip
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

SHORT = [
    "rollout.groups=2",
    "rollout.group_size=3",
    "optim.minibatch_size=64",
    "optim.epochs=1",
    "eval.every=0",
    "eval.at_start=false",
    "train.time_budget_s=null",
    "train.max_episodes=null",
    "train.iterations=3",
    "train.threads=1",
    "checkpoint.every=1",
    "log.progress=false",
    "log.trajectories_every=0",
]
# every iteration samples with the tips so far: a stale tip changes the next rollout
MEMORY_EVERY_ITERATION = ["exploration.memory.probs={off_policy: 1.0}"]

# Run, and SIGKILL the process once iteration KILL_AT has trained and written its tips,
# before its metrics line and checkpoint (the newest checkpoint is KILL_AT - 1's).
_KILL = """
import os, signal, sys
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

real = Trainer.train_iteration

def train_iteration(self):
    row = real(self)
    if self.iteration == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return row

Trainer.train_iteration = train_iteration
Trainer(load_config(sys.argv[3], sys.argv[4:]), sys.argv[1]).run()
"""


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "eval/"))} for r in rows]


# Presets whose exploration keeps state between iterations: EMPO2's memory (outside the
# checkpoint until this was fixed), novelty counts, SGE's reflections, LADDER's stage.
KEPT_STATE = {
    "frozenlake_empo2": MEMORY_EVERY_ITERATION,
    "sokoban_gigpo_empo2_luffy": MEMORY_EVERY_ITERATION,
    "sokoban_sge": [],
    "integration_ladder": [
        "exploration.variants.originals=4",
        "exploration.variants.depth=2",
        "exploration.variants.stage_iterations=1",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(KEPT_STATE))
def test_a_killed_and_resumed_run_repeats_the_uninterrupted_run(tmp_path, preset):
    path = f"configs/{preset}.yaml"
    args = [*SHORT, *KEPT_STATE[preset], f"out_dir={tmp_path}"]
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(load_config(path, args), full).run()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _KILL, str(part), "2", path, *args], env=env, timeout=600
    )
    assert done.returncode == -signal.SIGKILL
    assert [r["iteration"] for r in read_metrics(part)] == [1]
    Trainer(load_config(path, args), part, resume=True).run()
    a, b = read_metrics(full), read_metrics(part)
    assert [r["iteration"] for r in b] == [1, 2, 3]
    if KEPT_STATE[preset] == MEMORY_EVERY_ITERATION:
        assert a[-1]["memory/tips"] > 0 and a[-1]["memory/tipped_steps"] > 0
    assert _strip(a) == _strip(b)


def test_memory_store_goes_back_to_its_saved_contents(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite", capacity=2)
    store.add("p", [Tip("c1", "t1", 0.5), Tip("c2", "t2", 1.0)])
    store.add("p", [Tip("c3", "t3", 0.0)])  # evicts c1: ids 2, 3 remain
    saved = store.state_dict()
    assert saved == {"rows": [[2, "p", "c2", "t2", 1.0], [3, "p", "c3", "t3", 0.0]], "next_id": 4}
    store.add("p", [Tip("c4", "t4", 2.0)])  # written after the checkpoint, then lost to a kill
    store.add("q", [Tip("c5", "t5", 0.1)])
    store.close()
    reopened = MemoryStore(tmp_path / "m.sqlite", capacity=2)
    version = reopened.version
    reopened.load_state_dict(saved)
    assert reopened.state_dict() == saved and reopened.version > version
    reopened.add("p", [Tip("c6", "t6", 0.0)])  # numbered as in the uninterrupted run
    assert [r[0] for r in reopened.rows("p")] == [3, 4]


def test_the_variant_tree_comes_back_from_the_checkpoint(tmp_path):
    """An LLM generator's tree depends on the weights it was built with, which a resumed run
    no longer has: the tree is part of the state (here: two seeds give two trees)."""
    from functools import partial

    from cairn.envs import make
    from cairn.exploration import Exploration

    overrides = ["exploration.variants.originals=2", "exploration.variants.per_problem=2"]
    cfg = load_config("configs/integration_ladder.yaml", overrides).exploration

    def build(seed: int) -> Exploration:
        factory = partial(make, "integration", level=[2, 3])
        return Exploration(
            cfg, policy=None, prompt=None, env_factory=factory, run_dir=tmp_path, seed=seed
        )

    saved, other = build(0), build(1)
    assert other.curriculum.nodes != saved.curriculum.nodes
    other.load_state_dict(saved.state_dict())
    assert other.curriculum.nodes == saved.curriculum.nodes
    assert other.curriculum.depth == saved.curriculum.depth
