"""Env workers: envs on Ray actors or local processes give the very episodes of the
in-process path; calls to different workers overlap; errors come back to the caller."""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch

from cairn.agent import PromptBuilder
from cairn.envs import make
from cairn.rollout import EnvPool, RolloutSettings, rollout, tasks_for_groups
from cairn.rollout.envpool.calls import reset_all, step_all
from cairn.rollout.envpool.workers import RemoteEnv, WorkerPool, make_env_pool, ray_available

FACTORY = partial(make, "sokoban", render="compact", max_solution=5)
SETTINGS = RolloutSettings(max_new_tokens=4, restrict_to_admissible=True, max_turns=6)


def _episodes(policy, pool, seeds=(3, 11, 42), group_size=3):
    tasks = tasks_for_groups(list(seeds), group_size)
    gen = torch.Generator().manual_seed(7)
    return rollout(policy, pool.take(len(tasks)), tasks, PromptBuilder(), SETTINGS, gen)


def _same_episodes(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.id, x.group, x.task, x.success, x.terminated) == (
            y.id, y.group, y.task, y.success, y.terminated
        )  # fmt: skip
        assert [(s.observation, s.anchor, s.action, s.reward, s.valid) for s in x.steps] == [
            (s.observation, s.anchor, s.action, s.reward, s.valid) for s in y.steps
        ]
        assert [s.logprobs for s in x.steps] == [s.logprobs for s in y.steps]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_process_workers_give_the_in_process_episodes(tiny_policy, workers):
    local = _episodes(tiny_policy, EnvPool(FACTORY))
    pool = WorkerPool(FACTORY, workers, backend="process")
    try:
        remote = _episodes(tiny_policy, pool)
    finally:
        pool.close()
    assert any(len(e.steps) > 1 for e in local)  # multi-turn, so stepping order matters
    _same_episodes(local, remote)


@pytest.mark.skipif(not ray_available(), reason="needs Ray: pip install 'cairn-rl[ray]'")
def test_ray_workers_give_the_in_process_episodes(tiny_policy):
    local = _episodes(tiny_policy, EnvPool(FACTORY))
    pool = WorkerPool(FACTORY, 2, backend="ray")
    try:
        remote = _episodes(tiny_policy, pool)
        snap = pool.take(1)[0].snapshot()  # snapshots travel from one worker to another
        obs, _ = pool.take(2)[1].restore(snap)
    finally:
        pool.close()
    _same_episodes(local, remote)
    assert obs == FACTORY().restore(snap)[0]


class _SlowEnv:
    """A stand-in for a slow env (a JVM step): each step sleeps ``delay`` seconds."""

    instruction = "wait"

    def __init__(self, delay: float):
        self.delay = delay

    def reset(self, seed=None, options=None):
        return f"seed {seed}", {}

    def step(self, action):
        time.sleep(self.delay)
        return "obs", 0.0, False, False, {}

    def close(self):
        pass


def test_steps_on_different_workers_overlap():
    pool = WorkerPool(partial(_SlowEnv, 0.3), 4, backend="process")
    try:
        envs = pool.take(4)
        reset_all(envs, [0, 1, 2, 3])
        start = time.perf_counter()
        step_all(envs, ["a"] * 4)
        elapsed = time.perf_counter() - start
    finally:
        pool.close()
    assert elapsed < 4 * 0.3 * 0.75  # serial stepping would take 1.2 s; sleeps overlap


def test_worker_errors_reach_the_caller_and_the_worker_survives():
    pool = WorkerPool(FACTORY, 1, backend="process")
    try:
        env = pool.take(1)[0]
        obs, info = env.reset(seed=5)
        with pytest.raises(TypeError, match="action must be a str"):
            env.step(3)  # type: ignore[arg-type]
        again, _ = env.reset(seed=5)
        assert again == obs and env.instruction and "anchor" in info
        assert env.vocabulary()  # the remote env answers every TextEnv method
    finally:
        pool.close()


def test_answers_come_back_in_request_order_per_worker():
    pool = WorkerPool(FACTORY, 1, backend="process")  # all slots on one worker
    try:
        envs = pool.take(3)
        pending = [e.submit("reset", seed=s) for e, s in zip(envs, [1, 2, 3], strict=True)]
        late_first = [p.result() for p in reversed(pending)]  # read out of order
        direct = [FACTORY().reset(seed=s) for s in [3, 2, 1]]
        assert [o for o, _ in late_first] == [o for o, _ in direct]
    finally:
        pool.close()


def test_step_all_mixes_local_and_remote_envs():
    pool = WorkerPool(FACTORY, 1, backend="process")
    try:
        envs = [FACTORY(), pool.take(1)[0]]
        assert isinstance(envs[1], RemoteEnv)
        first = reset_all(envs, [9, 9])
        assert first[0][0] == first[1][0]
        out = step_all(envs, ["up", "up"])
        assert out[0][:4] == out[1][:4]
    finally:
        pool.close()


def test_bad_pools_are_clear_errors():
    with pytest.raises(ValueError, match="positive integer"):
        WorkerPool(FACTORY, 0)
    with pytest.raises(ValueError, match="allowed: auto, ray, process"):
        WorkerPool(FACTORY, 1, backend="threads")
    with pytest.raises(ValueError, match="2 envs but 1 actions"):
        step_all([FACTORY(), FACTORY()], ["up"])
    assert isinstance(make_env_pool(FACTORY, 0), EnvPool)
