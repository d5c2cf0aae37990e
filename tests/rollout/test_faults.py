"""Env faults cost one episode, not the run: an env that raises at reset or at a step, hangs
past ``env_timeout_s`` or whose worker process is SIGKILLed ends that episode, the episode
(or its group, below 2 survivors) is dropped, the env is rebuilt, the counts reach the
metrics, and only a loss rate past ``rollout.max_env_error_rate`` stops a run."""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial

import pytest
import torch
from rollout_helpers import DEMO, FaultyEnv, SlowStepEnv

from cairn._env_host import EnvFault, EnvFaultRateError
from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.envs import make, register
from cairn.rollout import (
    EnvFactory,
    EnvPool,
    GroupStrategy,
    RolloutContext,
    RolloutSettings,
    WorkerPool,
    make_strategy,
    tasks_for_groups,
)
from cairn.rollout.envpool.calls import GuardedEnv, reset_all, step_all
from cairn.rollout.envpool.faults import EnvTimeout, FaultStats
from cairn.rollout.envpool.local import TimedEnv
from cairn.rollout.envpool.workers import ray_available
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

SEEDS = [3, 11, 42]
SETTINGS = RolloutSettings(restrict_to_admissible=True, max_turns=4)


@pytest.fixture(autouse=True)
def _count_resets_from_zero():
    FaultyEnv.resets = 0


def _collect(policy, pool, group_size: int = 3):
    ctx = RolloutContext(policy, pool, PromptBuilder(), SETTINGS, torch.Generator().manual_seed(0))
    return GroupStrategy().collect(ctx, SEEDS, group_size)


def _groups(episodes) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for e in episodes:
        out.setdefault(e.group, []).append(e.id)
    return out


@pytest.mark.parametrize("mode", ["reset", "step"])
def test_a_raising_env_costs_its_episode_and_is_rebuilt(demo_policy, mode):
    pool = EnvPool(partial(FaultyEnv, mode, at_reset=4))  # slot 4: group 1's second episode
    first = pool.take(9)[4]
    episodes = _collect(demo_policy, pool)
    assert _groups(episodes) == {0: [0, 1, 2], 1: [3, 5], 2: [6, 7, 8]}
    assert not any("fault" in e.meta for e in episodes)
    assert pool.envs[4] is not first and pool.envs[3] is pool.take(9)[3]  # slot 4 rebuilt
    assert pool.faults.end_iteration() == {
        "rollout/env_errors": 1,
        "rollout/env_timeouts": 0,
        "rollout/env_restarts": 1,
        "rollout/worker_restarts": 0,
    }
    again = _collect(demo_policy, pool)  # the rebuilt env plays (reset 9 on is not bad)
    assert len(again) == 9 and pool.faults.end_iteration()["rollout/env_errors"] == 0


def test_a_group_left_with_one_episode_is_dropped_whole(demo_policy):
    pool = EnvPool(partial(FaultyEnv, "step", at_reset=2))  # group 1's first of 2
    episodes = _collect(demo_policy, pool, group_size=2)
    assert _groups(episodes) == {0: [0, 1], 2: [4, 5]}
    assert (pool.faults.episodes, pool.faults.lost) == (6, 1)


def test_a_hung_step_times_out_in_process(demo_policy):
    pool = EnvPool(partial(FaultyEnv, "hang", at_reset=4, hang_s=60.0), timeout_s=1.0)
    start = time.perf_counter()
    episodes = _collect(demo_policy, pool)
    assert time.perf_counter() - start < 30  # the hung call was abandoned, not waited for
    assert _groups(episodes) == {0: [0, 1, 2], 1: [3, 5], 2: [6, 7, 8]}
    counts = pool.faults.end_iteration()
    assert (counts["rollout/env_timeouts"], counts["rollout/env_errors"]) == (1, 0)
    assert counts["rollout/env_restarts"] == 1 and not pool.envs[4]._dead


def test_without_a_timeout_envs_are_called_directly_and_a_timeout_changes_nothing(
    demo_policy,
):
    plain, timed = (
        EnvPool(partial(make, "sokoban", **DEMO)),
        EnvPool(partial(make, "sokoban", **DEMO), timeout_s=30.0),
    )
    assert not isinstance(plain.take(1)[0], TimedEnv)
    assert isinstance(timed.take(1)[0], TimedEnv)
    a, b = _collect(demo_policy, plain), _collect(demo_policy, timed)
    assert [[(s.observation, s.action, s.reward, s.logprobs) for s in e.steps] for e in a] == [
        [(s.observation, s.action, s.reward, s.logprobs) for s in e.steps] for e in b
    ]
    timed.close()


def test_a_sigkilled_worker_process_costs_its_episodes_and_is_replaced(demo_policy, tmp_path):
    # 2 workers: worker 0 holds slots 0, 2, 4, 6, 8 and dies stepping slot 8 (its 5th reset);
    # every env it held is lost, so groups 0 and 2 keep one episode each and go whole.
    once = str(tmp_path / "killed")
    pool = WorkerPool(partial(FaultyEnv, "kill", at_reset=4, once=once), 2, backend="process")
    try:
        episodes = _collect(demo_policy, pool)
        assert _groups(episodes) == {1: [3, 5]}
        assert pool.faults.end_iteration() == {
            "rollout/env_errors": 5,
            "rollout/env_timeouts": 0,
            "rollout/env_restarts": 5,
            "rollout/worker_restarts": 1,
        }
        again = _collect(demo_policy, pool)  # the replaced worker serves every slot again
        assert len(again) == 9 and pool.faults.end_iteration()["rollout/env_errors"] == 0
    finally:
        pool.close()


def test_a_hung_worker_times_out_and_is_replaced(demo_policy, tmp_path):
    once = str(tmp_path / "hung")
    factory = partial(FaultyEnv, "hang", at_reset=4, hang_s=60.0, once=once)
    pool = WorkerPool(factory, 2, backend="process", timeout_s=2.0)
    try:
        episodes = _collect(demo_policy, pool)  # worker 0 hangs on slot 8, as above
        assert _groups(episodes) == {1: [3, 5]}
        counts = pool.faults.end_iteration()
        assert (counts["rollout/env_timeouts"], counts["rollout/env_errors"]) == (1, 4)
        assert counts["rollout/worker_restarts"] == 1
    finally:
        pool.close()


def _init_ray() -> None:
    import ray

    if not ray.is_initialized():  # the actors import rollout_helpers, as the driver does
        path = os.pathsep.join(p for p in sys.path if p)
        ray.init(
            include_dashboard=False, log_to_driver=False, configure_logging=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )  # fmt: skip


@pytest.mark.parametrize(
    "backend",
    [
        "process",
        pytest.param(
            "ray",
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(not ray_available(), reason="needs Ray"),
            ],
        ),
    ],
)
def test_a_worker_call_is_timed_from_when_the_worker_began_it(backend):
    # Worker 0's step takes 2 s, worker 1's 4.5 s, both started together; the timeout is
    # 3 s. Worker 1 has run past it by the time worker 0 answers: it times out (before,
    # its clock started only when the caller got to it, at 2 s, and the hang went unseen).
    if backend == "ray":
        _init_ray()
    pool = WorkerPool(partial(SlowStepEnv, {0: 2.0, 1: 4.5}), 2, backend, timeout_s=3.0)
    try:
        envs = pool.take(2)
        reset_all(envs, [0, 1])
        start = time.perf_counter()
        results = step_all(envs, ["up", "up"])
        assert not isinstance(results[0], EnvFault)
        assert isinstance(results[1], EnvTimeout)
        if backend == "process":  # Ray starts the new actor before answering: seconds more
            assert time.perf_counter() - start < 4.0
        assert (pool.faults.timeouts, pool.faults.errors) == (1, 0)
        assert not isinstance(step_all(envs, ["up", "up"])[0], EnvFault)  # worker 0 goes on
    finally:
        pool.close()


def test_the_loss_rate_stops_only_past_the_threshold():
    stats = FaultStats(max_rate=0.1)
    for lost in (1, 0, 1):  # 2 of 30 over the window: under 10 %
        stats.episodes, stats.lost = 10, lost
        stats.end_iteration()
    stats.episodes, stats.lost, stats.last = 10, 3, "EnvFault: RuntimeError: boom"
    with pytest.raises(EnvFaultRateError) as err:  # 5 of 40 = 12.5 %
        stats.end_iteration()
    message = str(err.value)
    assert "\n" not in message
    assert "5 of 40 episodes" in message and "rollout.max_env_error_rate=0.1" in message
    assert "boom" in message


def _faulty_cfg(tmp_path, *extra: str):
    register("faulty_sokoban", "rollout_helpers:FaultyEnv")
    return load_config(
        None,
        [
            "env.name=faulty_sokoban", "rollout.groups=4", "rollout.group_size=4",
            "optim.minibatch_size=32", "eval.episodes=4", "eval.every=0",
            "train.iterations=3", "train.time_budget_s=null", "train.threads=1",
            "log.progress=false", f"out_dir={tmp_path}", *extra,
        ],
    )  # fmt: skip


def test_a_training_run_survives_env_faults_and_logs_them(tmp_path):
    cfg = _faulty_cfg(tmp_path, "env.options={mode: step, every: 13, at_reset: 5}")
    cfg = cfg.model_copy(
        update={"rollout": cfg.rollout.model_copy(update={"max_env_error_rate": 0.5})}
    )
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    errors = [r["rollout/env_errors"] for r in rows]
    assert sum(errors) >= 2 and errors == [r["rollout/env_restarts"] for r in rows]
    assert all(r["rollout/env_timeouts"] == 0 for r in rows)


def test_a_training_run_stops_with_one_line_past_the_error_rate(tmp_path):
    cfg = _faulty_cfg(tmp_path, "env.options={mode: step, every: 4, at_reset: 1}")
    trainer = Trainer(cfg, tmp_path / "run")
    with pytest.raises(EnvFaultRateError, match=r"rollout.max_env_error_rate=0.1; last: "):
        trainer.run()
    assert (
        not (tmp_path / "run" / "metrics.jsonl").exists()
        or not (tmp_path / "run" / "metrics.jsonl").read_text().strip()
    )


def test_an_env_registered_in_the_driver_is_known_in_a_spawned_worker():
    # A spawned worker (as a Ray actor) starts a fresh interpreter whose registry lacks
    # "custom_sokoban"; the EnvFactory carries the registration (fork would inherit it).
    register("custom_sokoban", "rollout_helpers:FaultyEnv")
    factory = EnvFactory.of("custom_sokoban", every=10**9, at_reset=-1)  # never fails
    pool = WorkerPool(factory, 1, backend="process", start_method="spawn")
    try:
        obs, _ = pool.take(1)[0].reset(seed=3)
    finally:
        pool.close()
    assert obs == make("sokoban", **DEMO).reset(seed=3)[0]
    plain = WorkerPool(partial(make, "custom_sokoban"), 1, "process", start_method="spawn")
    try:  # what a bare partial(make, name) gave before
        with pytest.raises(ValueError, match="unknown env 'custom_sokoban'"):
            plain.take(1)[0].reset(seed=3)
    finally:
        plain.close()


@pytest.mark.slow  # starts Ray and four actors: about a minute
@pytest.mark.skipif(not ray_available(), reason="needs Ray: pip install 'cairn-rl[ray]'")
def test_ray_workers_survive_a_raising_env_and_a_hung_actor(demo_policy, tmp_path):
    _init_ray()
    # 2 workers: only worker 0 (slots 0, 2, 4, 6, 8) sees a 5th reset, on slot 8.
    pool = WorkerPool(partial(FaultyEnv, "step", at_reset=4), 2, backend="ray")
    try:
        episodes = _collect(demo_policy, pool)  # the actor lives on, slot 8 is rebuilt
        assert _groups(episodes) == {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7]}
        counts = pool.faults.end_iteration()
        assert (counts["rollout/env_errors"], counts["rollout/worker_restarts"]) == (1, 0)
    finally:
        pool.close()
    once = str(tmp_path / "hung")
    factory = partial(FaultyEnv, "hang", at_reset=4, hang_s=60.0, once=once)
    pool = WorkerPool(factory, 2, backend="ray", timeout_s=3.0)
    try:
        episodes = _collect(demo_policy, pool)  # actor 0 is killed and replaced
        assert _groups(episodes) == {1: [3, 5]}
        counts = pool.faults.end_iteration()
        assert (counts["rollout/env_timeouts"], counts["rollout/env_errors"]) == (1, 4)
        assert counts["rollout/worker_restarts"] == 1
        assert len(_collect(demo_policy, pool)) == 9  # the new actor serves every slot
    finally:
        pool.close()


@pytest.mark.parametrize("mode", ["step", "reset"])
def test_strategy_guided_sampling_drops_a_faulted_episode(demo_policy, mode):
    from cairn.exploration.sge import SGEStrategy

    pool = EnvPool(partial(FaultyEnv, mode, at_reset=4))
    ctx = RolloutContext(
        demo_policy, pool, PromptBuilder(), SETTINGS, torch.Generator().manual_seed(0)
    )
    episodes = SGEStrategy().collect(ctx, SEEDS, 3)
    assert _groups(episodes) == {0: [0, 1, 2], 1: [3, 5], 2: [6, 7, 8]}
    assert pool.faults.errors == 1


@pytest.mark.parametrize("mode", ["step", "snapshot"])
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("tree", {"segment_turns": 1}),
        ("entropy_branch", {}),
        ("mc_values", {"k": 2, "max_valued_steps": 2}),
        ("error_search", {"budget": 6}),
    ],
)
def test_branching_strategies_finish_and_drop_faulted_paths(demo_policy, name, options, mode):
    pool = EnvPool(partial(FaultyEnv, mode, every=5, at_reset=2))
    ctx = RolloutContext(
        demo_policy, pool, PromptBuilder(), SETTINGS, torch.Generator().manual_seed(0)
    )
    episodes = make_strategy(name, **options).collect(ctx, SEEDS, 3)
    assert pool.faults.errors > 0 and pool.faults.restarts == pool.faults.errors
    assert not any("fault" in e.meta for e in episodes)
    assert all(len(ids) >= 2 for ids in _groups(episodes).values())
    assert pool.faults.lost <= pool.faults.errors  # probes that faulted are not episodes


# -- env calls outside the turn loop ----------------------------------------------------------
def _episodes(group_size: int) -> list[Episode]:
    tasks = tasks_for_groups(SEEDS, group_size)
    return [Episode(id=i, group=g, task=seed) for i, (g, seed) in enumerate(tasks)]


def test_an_empo2_instruction_reset_that_fails_costs_that_tasks_tips_only():
    from cairn.exploration.hooks import _instructions

    pool = EnvPool(partial(FaultyEnv, "reset", at_reset=1))  # the reset to task 11
    instructions = _instructions(_episodes(2), pool)
    assert sorted(instructions) == [0, 1, 4, 5]  # episodes 2 and 3 (task 11) write no tips
    assert (pool.faults.errors, pool.faults.restarts) == (1, 1)


def test_a_luffy_demonstration_whose_env_fails_is_skipped_and_counted(demo_policy):
    from cairn.exploration.demos import SolverDemos, mix_demos

    # Each demonstration resets twice (its source, then its replay): reset 3 is group 1's
    # replay, which raises at its first step.
    pool = EnvPool(partial(FaultyEnv, "step", at_reset=3))
    guarded = lambda: GuardedEnv(pool.take(1)[0], "faulty")  # noqa: E731
    settings = RolloutSettings(restrict_to_admissible=True)
    kw = {"policy": demo_policy, "prompt": PromptBuilder(), "settings": settings}
    demos = mix_demos(_episodes(2), SolverDemos(), 1, env=guarded(), on_fault=guarded, **kw)
    assert [d.group for d in demos] == [0, 2] and all(d.success for d in demos)
    assert (pool.faults.errors, pool.faults.restarts) == (1, 1)
    FaultyEnv.resets = 0  # without on_fault: one line naming the env and the call
    with pytest.raises(EnvFault, match=r"^env .faulty. failed in step\(\): RuntimeError: inj"):
        mix_demos(_episodes(2), SolverDemos(), 1, env=guarded(), **kw)


def test_a_probe_env_that_fails_at_setup_is_one_line_naming_env_and_call(tmp_path, capsys):
    from cairn.cli import main

    register("faulty_sokoban", "rollout_helpers:FaultyEnv")
    args = [
        "env.name=faulty_sokoban", "env.options={mode: reset, at_reset: 0}",
        "train.iterations=1", "train.threads=1", "log.progress=false", f"out_dir={tmp_path}",
    ]  # fmt: skip
    code = main(["train", *[x for a in args for x in ("--set", a)]])
    message = " ".join(capsys.readouterr().out.split())  # wrapped by the console
    assert code == 2 and "Traceback" not in message
    assert message.startswith(
        "error: the run could not start: env 'faulty_sokoban' failed in reset(): "
        "RuntimeError: injected reset failure"
    )


def test_an_env_that_fails_in_the_warmup_is_one_line_naming_env_and_call(tmp_path, capsys):
    """The warm-up replays solver plans outside any rollout, so a failed env call there has
    no episode to cost: one line naming the env and the call (it was a traceback)."""
    from cairn.cli import main

    register("faulty_sokoban", "rollout_helpers:FaultyEnv")
    FaultyEnv.resets = 0
    args = [
        "env.name=faulty_sokoban", "env.options={mode: step, every: 1, at_reset: 0}",
        "warmup.enabled=true", "warmup.demos=4", "train.iterations=1", "train.threads=1",
        "log.progress=false", f"out_dir={tmp_path}",
    ]  # fmt: skip
    code = main(["train", *[x for a in args for x in ("--set", a)]])
    message = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "Traceback" not in message
    assert "error: env 'faulty_sokoban' failed in step(): RuntimeError: injected step" in message


def test_the_cli_reports_a_fault_rate_stop_in_one_line(tmp_path, capsys):
    from cairn.cli import main

    register("faulty_sokoban", "rollout_helpers:FaultyEnv")
    args = [
        "env.name=faulty_sokoban", "env.options={mode: step, every: 4, at_reset: 1}",
        "rollout.groups=4", "rollout.group_size=4", "eval.at_start=false",
        "train.iterations=2", "train.time_budget_s=null", "train.threads=1",
        "log.progress=false", f"out_dir={tmp_path}",
    ]  # fmt: skip
    code = main(["train", *[x for a in args for x in ("--set", a)]])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 2 and lines[0].startswith("run directory:")
    message = " ".join(lines[1:])  # one line, wrapped by the console at its width
    assert message.startswith("error: env faults ended") and "Traceback" not in message
    assert "rollout.max_env_error_rate=0.1" in message


def test_faults_that_leave_no_group_stop_in_one_line_instead_of_an_empty_update():
    """Found by benchmarks/faults/faults.py: 4 workers, each holding one episode of every group,
    two killed in one iteration left no group with 2 episodes, and the update crashed on
    an empty token batch (ValueError from max()) before the fault-rate check could speak."""
    from cairn._env_host import EnvFaultRateError
    from cairn.data.episode import Episode
    from cairn.rollout.envpool.faults import FaultStats
    from cairn.rollout.loop import drop_faulted

    def group(g: int, faulted: int) -> list[Episode]:
        bad = [{"fault": "error"} if i < faulted else {} for i in range(3)]
        return [Episode(id=3 * g + i, group=g, task=g, meta=bad[i]) for i in range(3)]

    stats = FaultStats()
    kept = drop_faulted([*group(0, 1), *group(1, 2)], stats)  # group 1 keeps one: dropped
    assert [e.group for e in kept] == [0, 0] and (stats.episodes, stats.lost) == (6, 3)
    with pytest.raises(EnvFaultRateError, match=r"left no group of 2 with 2 episodes") as err:
        drop_faulted([*group(0, 2), *group(1, 2)])
    assert "\n" not in str(err.value) and "4 of 6 episodes" in str(err.value)
