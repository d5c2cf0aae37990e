"""End-to-end training on CPU: a short run, its run directory, and exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cairn.train.checkpoint.read import latest_checkpoint
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

SMALL = [
    "rollout.groups=4",
    "rollout.group_size=4",
    "optim.minibatch_size=32",
    "optim.epochs=2",
    "eval.episodes=8",
    "eval.every=2",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
]


def _cfg(tmp_path, *extra: str):
    return load_config(None, [*SMALL, f"out_dir={tmp_path}", *extra])


def _same(a: dict, b: dict) -> bool:
    """Equal metrics apart from timings (and the extra evaluation a run does as it stops)."""
    strip = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "eval/"))}  # noqa: E731
    return strip(a) == strip(b)


def test_short_run_writes_the_run_directory(tmp_path):
    run = tmp_path / "run"
    summary = Trainer(_cfg(tmp_path, "train.iterations=3"), run).run()
    for name in ("config.yaml", "metrics.jsonl", "summary.json"):
        assert (run / name).exists(), name
    assert not (run / "curves.png").exists()  # plots: drawn by the CLI (tests/report)
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[-1]["episodes"] == 3 * 16 and summary["episodes"] == 48
    assert {"rollout/success", "actor/clipfrac", "actor/entropy", "adv/mean"} <= set(rows[0])
    saved = json.loads((run / "summary.json").read_text())
    for key in ("untrained_success", "eval_success", "wall_seconds", "train_seconds"):
        assert saved[key] is not None, key
    assert latest_checkpoint(run).name == "iter_000003"
    assert len(list((run / "trajectories").glob("iter_*.jsonl.gz"))) == 3


def test_resume_repeats_an_uninterrupted_run_exactly(tmp_path, run_stopped):
    cfg = _cfg(tmp_path, "train.iterations=3")  # the default linear lr schedule included
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(cfg, full).run()
    run_stopped(cfg, part, 2)
    Trainer(cfg, part, resume=True).run()
    a, b = read_metrics(full), read_metrics(part)
    assert [r["iteration"] for r in b] == [1, 2, 3]
    assert all(_same(x, y) for x, y in zip(a, b, strict=True)), (a[-1], b[-1])


def test_resume_after_a_kill_mid_iteration_drops_the_unfinished_rows(tmp_path):
    run = tmp_path / "run"
    Trainer(_cfg(tmp_path, "train.iterations=2", "checkpoint.every=1"), run).run()
    # Simulate a kill after iteration 3's metrics line but before its checkpoint.
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"iteration": 3, "episodes": 999}) + "\n")
    Trainer(_cfg(tmp_path, "train.iterations=3"), run, resume=True).run()
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [1, 2, 3] and rows[-1]["episodes"] == 48


def test_resume_after_a_kill_mid_write_trims_the_half_written_line(tmp_path):
    """A kill inside the metrics append leaves a last line with no newline, not JSON."""
    run = tmp_path / "run"
    Trainer(_cfg(tmp_path, "train.iterations=2", "checkpoint.every=1"), run).run()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 3, "episodes": 4')  # cut short
    Trainer(_cfg(tmp_path, "train.iterations=3"), run, resume=True).run()
    text = (run / "metrics.jsonl").read_text()
    assert text.endswith("}\n") and '"episodes": 4\n' not in text
    rows = [json.loads(line) for line in text.splitlines()]  # every line whole again
    assert [r["iteration"] for r in rows] == [1, 2, 3] and rows[-1]["episodes"] == 48


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(_cfg(tmp_path), tmp_path / "empty", resume=True)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gigpo"])
def test_each_estimator_trains(tmp_path, estimator):
    cfg = _cfg(
        tmp_path, "train.iterations=1", f"advantage.name={estimator}", "advantage.options={}"
    )
    summary = Trainer(cfg, tmp_path / estimator).run()
    assert summary["iterations"] == 1


def test_ppo_with_critic_trains_and_resumes_exactly(tmp_path, run_stopped):
    ppo = ["advantage.name=gae", "advantage.whiten=true", "critic.enabled=true"]
    cfg = _cfg(tmp_path, "train.iterations=2", *ppo)
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(cfg, full).run()
    run_stopped(cfg, part, 1)
    Trainer(cfg, part, resume=True).run()
    a, b = read_metrics(full), read_metrics(part)
    assert "critic/loss" in a[-1]
    assert all(_same(x, y) for x, y in zip(a, b, strict=True))
    assert (latest_checkpoint(part).path / "critic" / "critic.safetensors").exists()


class _CritStrategy:
    """A test strategy: group rollout, then every step of a failed episode is `after_error`."""

    def collect(self, ctx, seeds, group_size):
        from cairn.rollout import GroupStrategy

        episodes = GroupStrategy().collect(ctx, seeds, group_size)
        for e in episodes:
            for s in e.steps:
                s.flags["after_error"] = not e.success
        return episodes


def test_after_error_rows_reach_the_loss_as_a_wider_lower_clip(tmp_path, monkeypatch):
    import cairn.losses.policy as policy_mod
    import cairn.rollout as rollout_pkg

    monkeypatch.setitem(
        rollout_pkg.STRATEGIES.entries, "crit_test", (f"{__name__}:_CritStrategy", None)
    )
    seen = []
    real = policy_mod.ppo_clip

    def spy(*args, **kwargs):
        seen.append(kwargs["clip_low_per_token"])
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_mod, "ppo_clip", spy)
    cfg = _cfg(tmp_path, "train.iterations=1", "rollout.strategy=crit_test")
    Trainer(cfg, tmp_path / "crit").run()
    values = {round(v, 4) for v in torch.cat([c.flatten() for c in seen]).unique().tolist()}
    assert values == {0.2, 0.315}  # failed episodes' steps widened, successful ones not


_MADE: list[tuple[list, bool]] = []  # (a group's episodes, whether it was given signal)


class _HalfFlatStrategy:
    """A test strategy: group rollout, then every other group it has made is flat (all
    rewards 0: equal returns, no signal) and the others get signal (their first episode's
    first step earns 1). Known by construction, independently of the code under test."""

    def collect(self, ctx, seeds, group_size):
        from cairn.rollout import GroupStrategy

        episodes = GroupStrategy().collect(ctx, seeds, group_size)
        groups: dict[int, list] = {}
        for e in episodes:
            groups.setdefault(e.group, []).append(e)
        for members in groups.values():
            signal = len(_MADE) % 2 == 1
            for e in members:
                for s in e.steps:
                    s.reward, s.penalty, s.shaped = 0.0, 0.0, {}
            members[0].steps[0].reward = 1.0 if signal else 0.0
            _MADE.append((members, signal))
        return episodes


def test_dynamic_sampling_keeps_only_groups_with_signal(tmp_path, monkeypatch):
    """4 groups per iteration, 3 rounds: round 1 makes groups flat, signal, flat, signal
    (keeps 2), round 2 needs 2 (flat, signal: keeps 3), round 3 needs 1 (flat): 3 groups
    reach the estimator, all with signal, and 4 were dropped."""
    import dataclasses

    import cairn.rollout as rollout_pkg
    from cairn.advantages import _registry

    monkeypatch.setitem(
        rollout_pkg.STRATEGIES.entries, "half_flat", (f"{__name__}:_HalfFlatStrategy", None)
    )
    seen = []  # per estimator call: {group: distinct episode returns}, from the rows
    grpo = _registry.get("grpo")

    def spy(batch, **options):
        returns: dict[int, dict[int, float]] = {}
        for g, ep, r in zip(batch.group, batch.episode, batch.reward, strict=True):
            by_ep = returns.setdefault(int(g), {})
            by_ep[int(ep)] = by_ep.get(int(ep), 0.0) + float(r)
        seen.append({g: {round(v, 9) for v in eps.values()} for g, eps in returns.items()})
        return grpo.fn(batch, **options)

    monkeypatch.setitem(_registry._REGISTRY, "grpo", dataclasses.replace(grpo, fn=spy))
    _MADE.clear()
    cfg = _cfg(
        tmp_path,
        "train.iterations=1",
        "rollout.dynamic_sampling=true",
        "rollout.max_sampling_rounds=3",
        "rollout.strategy=half_flat",
        "advantage.name=grpo",
    )
    Trainer(cfg, tmp_path / "dapo").run()
    assert [signal for _, signal in _MADE] == [False, True, False, True, False, True, False]
    (groups,) = seen
    assert len(groups) == 3 and all(len(r) == 2 for r in groups.values())  # signal: 1 vs 0
    made = {members[0].group for members, signal in _MADE if signal}
    assert set(groups) == made  # exactly the groups made with signal, by their final ids
    (row,) = read_metrics(tmp_path / "dapo")
    assert row["rollout/dropped_groups"] == 4
    assert row["episodes"] == 7 * 4  # every sampled episode counts, dropped groups included


# the real-model presets (*_smol) train in tests/train/test_real_presets.py, at their own size
PRESETS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "configs").glob("sokoban_*.yaml")
    if not p.stem.endswith("_smol")
)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_sokoban_preset_trains_one_iteration(tmp_path, preset):
    small_warmup = ["warmup.demos=8", "warmup.epochs=1"]  # sokoban_text's warm-up stage
    cfg = load_config(preset, [*SMALL, *small_warmup, f"out_dir={tmp_path}", "train.iterations=1"])
    summary = Trainer(cfg, tmp_path / preset.stem).run()
    assert summary["iterations"] == 1 and summary["eval_success"] is not None


@pytest.mark.parametrize(
    ("schedule", "factors"),
    [
        ("constant", [1.0, 1.0, 1.0, 1.0]),
        # progress k/4 before iteration k+1; lr_final 0.1: 1 - 0.9 * k/4
        ("linear", [1.0, 0.775, 0.55, 0.325]),
        # 0.1 + 0.9 * (1 + cos(pi k/4)) / 2
        ("cosine", [1.0, 0.8681980515, 0.55, 0.2318019485]),
    ],
)
def test_lr_schedule_follows_the_iteration_budget(tmp_path, schedule, factors):
    cfg = _cfg(tmp_path, "train.iterations=4", "optim.lr=0.002", f"optim.lr_schedule={schedule}")
    Trainer(cfg, tmp_path / "run").run()
    lrs = [r["actor/lr"] for r in read_metrics(tmp_path / "run")]
    assert lrs == pytest.approx([0.002 * f for f in factors], rel=1e-9)


def test_a_nan_loss_skips_the_update_and_is_counted(tmp_path):
    # one update per iteration (one epoch, one minibatch); its scores are NaN once
    cfg = _cfg(tmp_path, "optim.epochs=1", "optim.minibatch_size=100000", "eval.at_start=false")
    trainer = Trainer(cfg, tmp_path / "nan")
    real, calls = trainer.policy.score, []

    def nan_once(*args, **kwargs):
        logp, entropy = real(*args, **kwargs)
        calls.append(1)
        return (logp * float("nan"), entropy) if len(calls) == 1 else (logp, entropy)

    trainer.policy.score = nan_once
    before = {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters()}
    trainer.iteration = 1
    row = trainer.train_iteration()
    after = dict(trainer.policy.model.named_parameters())
    assert all(torch.equal(before[k], after[k]) for k in before)  # the NaN never landed
    assert row["actor/skipped_updates"] == 1 and trainer.opt.state_dict()["state"] == {}
    trainer.iteration = 2
    row = trainer.train_iteration()  # the next update is finite and changes the weights
    assert row["actor/skipped_updates"] == 0
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.model.named_parameters())


def test_wall_seconds_add_up_over_resumed_sessions(tmp_path, run_stopped, monkeypatch):
    import time
    import types

    import cairn.train.trainer as trainer_mod

    # a clock that advances 10 s at every read (0 when the trainer is built): session 1
    # starts at 10 and checkpoints at 20 (10 s kept); session 2 starts at 10 and ends at
    # 30: the summary says 10 + 20 = 30 (the last session alone would say 20)
    clock = iter(range(0, 10_000, 10))
    fake = types.SimpleNamespace(time=lambda: float(next(clock)), perf_counter=time.perf_counter)
    monkeypatch.setattr(trainer_mod, "time", fake)
    cfg = _cfg(tmp_path, "train.iterations=2", "eval.at_start=false", "eval.every=0")
    part = tmp_path / "part"
    run_stopped(cfg, part, 1)
    clock = iter(range(0, 10_000, 10))  # session 2 on its own clock
    summary = Trainer(cfg, part, resume=True).run()
    assert summary["wall_seconds"] == 30.0
    assert json.loads((part / "summary.json").read_text())["wall_seconds"] == 30.0


def test_an_update_without_the_step_table_is_refused_when_a_learner_reads_it():
    import types

    # the actor alone may update without the step table (tests/scale/ddp_job.py does);
    # a critic beside it reads its values: a clear error instead of a crash inside its loss
    trainer = Trainer.__new__(Trainer)
    trainer.learners = [types.SimpleNamespace(name="critic")]
    with pytest.raises(ValueError, match=r"beside the actor \(critic\) need the step table"):
        trainer.update(tokens=None)
