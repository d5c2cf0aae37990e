"""What a checkpoint keeps of a trainer besides the weights, and putting it back: counters,
evaluations, the warm-up's stats, optimizer states (the actor's and each learner's,
``<name>_optimizer``), every random stream, the KL reference, and the state of exploration
and rewards. Restoring it makes a resumed run repeat the uninterrupted one exactly."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["restore_trainer", "trainer_state"]


def trainer_state(t: Any) -> dict[str, Any]:
    return {
        "iteration": t.iteration,
        "episodes": t.episodes,
        "train_seconds": t.train_seconds,
        "wall_seconds": t.wall(),
        "evals": t.evals,
        "warmup": t.warmup_stats,
        "optimizer": t.opt.state_dict(),
        "task_rng": t.task_rng.bit_generator.state,
        "shuffle_rng": t.shuffle_rng.bit_generator.state,
        "sample_gen": t.sample_gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "ref_model": t.ref_model.state_dict() if t.ref_model is not None else None,
        **{f"{x.name}_optimizer": x.opt.state_dict() for x in t.learners},
        "exploration": t.exploration.state_dict(),
        "rewards": [r.state_dict() if hasattr(r, "state_dict") else None for r in t.rewards],
    }


def restore_trainer(t: Any, state: dict[str, Any]) -> None:
    t.iteration, t.episodes = state["iteration"], state["episodes"]
    t.train_seconds, t.evals = state["train_seconds"], state["evals"]
    t.wall_seconds = state.get("wall_seconds", 0.0)  # older checkpoints: this session only
    t.warmup_stats = state.get("warmup", {})  # the warm-up ran before the first checkpoint
    t.opt.load_state_dict(state["optimizer"])
    t.task_rng.bit_generator.state = state["task_rng"]
    t.shuffle_rng.bit_generator.state = state["shuffle_rng"]
    t.sample_gen.set_state(state["sample_gen"])
    torch.set_rng_state(state["torch_rng"])
    if t.ref_model is not None and state["ref_model"] is not None:
        t.ref_model.load_state_dict(state["ref_model"])
    for x in t.learners:
        if state.get(f"{x.name}_optimizer") is not None:
            x.opt.load_state_dict(state[f"{x.name}_optimizer"])
    if "exploration" in state:
        t.exploration.load_state_dict(state["exploration"])
    for reward, saved in zip(t.rewards, state.get("rewards", []), strict=False):
        if saved is not None:
            reward.load_state_dict(saved)
