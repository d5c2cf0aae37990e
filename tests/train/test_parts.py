"""TrainParts: what a trainer is built from, one object with its own state dict; resume
and the warm-up act on it, and the trainer reads each part through it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cairn.train.checkpoint.layout import CheckpointError
from cairn.train.checkpoint.resume import restore_trainer, trainer_state
from cairn.train.checkpoint.schema import check_trainer_state
from cairn.train.checkpoint.state import TrainState
from cairn.train.config import load_config
from cairn.train.distributed import Dist
from cairn.train.parts import TrainParts, build_parts
from cairn.train.warmup import run_warmup_stage

SMALL = ["rollout.groups=2", "rollout.group_size=2", "train.iterations=1"]


def _parts(tmp_path: Path, *overrides: str) -> TrainParts:
    cfg = load_config(None, [*SMALL, *overrides])
    return build_parts(cfg, tmp_path, Dist.from_env(), None)


@pytest.fixture
def parts(tmp_path):
    built = _parts(tmp_path, "loss.kl_coef=0.01")
    yield built
    built.close()


def _step(parts: TrainParts) -> None:
    """One optimizer step of the actor, so that its state holds tensors."""
    model = parts.policy.model
    loss = sum(p.float().pow(2).mean() for p in model.parameters())
    parts.opt.zero_grad()
    loss.backward()
    parts.opt.step()


def test_the_parts_and_the_loop_state_make_the_checkpoints_trainer_state(parts):
    state = TrainState.start(seed=0)
    state.iteration = 1  # a checkpoint is written after an iteration
    saved = trainer_state(parts, state, 1.5, [{"iteration": 1}])
    assert check_trainer_state(saved) == 1  # the checkpoint's schema, unchanged
    assert set(parts.state_dict()) == {
        "optimizer", "ref_model", "exploration", "rewards",
    }  # fmt: skip
    assert saved["metrics"] == [{"iteration": 1}] and saved["wall_seconds"] == 1.5
    assert saved["ref_model"] is not None  # kl_coef > 0: a frozen copy of the weights


def test_restore_puts_the_optimizer_and_the_streams_back(tmp_path, parts):
    _step(parts)
    state = TrainState.start(seed=3)
    state.iteration = 4
    saved = trainer_state(parts, state, 0.0, [])
    other, fresh = _parts(tmp_path / "b", "loss.kl_coef=0.01"), TrainState.start(seed=0)
    try:
        restore_trainer(other, fresh, saved)
        assert fresh.iteration == 4
        a, b = parts.opt.state_dict()["state"], other.opt.state_dict()["state"]
        assert a.keys() == b.keys() and all(
            torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a
        )
    finally:
        other.close()


def test_a_misfit_optimizer_state_changes_nothing(parts):
    _step(parts)
    saved = trainer_state(parts, TrainState.start(seed=0), 0.0, [])
    index = next(iter(saved["optimizer"]["state"]))
    saved["optimizer"]["state"][index]["exp_avg"] = torch.zeros(3, 3, 3)
    saved["iteration"] = 9
    state, before = TrainState.start(seed=0), parts.opt.state_dict()
    with pytest.raises(CheckpointError, match=rf"optimizer\.state\.{index}\.exp_avg: shape"):
        restore_trainer(parts, state, saved)
    assert state.iteration == 0 and parts.opt.state_dict()["state"].keys() == before["state"].keys()


def test_the_warmup_stage_points_the_kl_reference_at_the_warmed_up_weights(tmp_path):
    cfg = load_config(None, [*SMALL, "loss.kl_coef=0.01", "warmup.demos=2", "warmup.epochs=1"])
    parts = build_parts(cfg, tmp_path, Dist.from_env(), None)
    try:
        old_ref, said = parts.ref_model, []
        stats = run_warmup_stage(parts, cfg, said.append)
        assert stats["warmup/updates"] >= 1 and said[0].startswith("warm-up: ")
        assert parts.ref_model is not old_ref and parts.ref_model is not None
        weights = dict(parts.policy.model.named_parameters())
        assert all(torch.equal(v, weights[k]) for k, v in parts.ref_model.named_parameters())
    finally:
        parts.close()


def test_the_trainer_reads_its_parts_through(tmp_path):
    from cairn.train.trainer import Trainer

    trainer = Trainer(load_config(None, SMALL), tmp_path / "run")
    try:
        assert trainer.policy is trainer.parts.policy and trainer.opt is trainer.parts.opt
        replaced = torch.nn.Linear(1, 1)
        trainer.parts.ref_model = replaced  # as the warm-up does
        assert trainer.ref_model is replaced
        trainer.ref_model = None  # written through: the parts stay the one place
        assert trainer.parts.ref_model is None and "ref_model" not in vars(trainer)
    finally:
        trainer.close()
