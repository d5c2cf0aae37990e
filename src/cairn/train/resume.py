"""What a checkpoint keeps of a trainer besides the weights, and putting it back: counters,
evaluations, the warm-up's stats, optimizer states (the actor's and each learner's,
``<name>_optimizer``), every random stream, the KL reference, the state of exploration
and rewards, and the metrics rows logged since the previous checkpoint (``metrics``: a
resume rebuilds from them a row that metrics.jsonl lost). Restoring it makes a resumed run
repeat the uninterrupted one exactly.

The state was checked against its schema when it was read (``cairn.train.state_schema``);
``restore_trainer`` also checks what only the live trainer knows (each optimizer's groups
and its tensors' shapes against the model's parameters) before it changes anything, and
turns any error while putting a part back into a CheckpointError naming the key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cairn.train.checkpoint import CheckpointError

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
        "metrics": list(t.log.unsaved_rows),
    }


def restore_trainer(t: Any, state: dict[str, Any]) -> None:
    """Put ``state`` back into trainer ``t``; CheckpointError (one line, naming the key)
    when a part does not fit this trainer, checked before anything changes."""
    _check_optimizer(t.opt, state["optimizer"], "optimizer")
    for x in t.learners:
        _check_optimizer(x.opt, state.get(f"{x.name}_optimizer"), f"{x.name}_optimizer")
    t.iteration, t.episodes = state["iteration"], state["episodes"]
    t.train_seconds, t.evals = state["train_seconds"], state["evals"]
    t.wall_seconds = state.get("wall_seconds", 0.0)  # older checkpoints: this session only
    t.warmup_stats = state.get("warmup", {})  # the warm-up ran before the first checkpoint
    _put("optimizer", t.opt.load_state_dict, state["optimizer"])
    _put("task_rng", setattr, t.task_rng.bit_generator, "state", state["task_rng"])
    _put("shuffle_rng", setattr, t.shuffle_rng.bit_generator, "state", state["shuffle_rng"])
    _put("sample_gen", t.sample_gen.set_state, state["sample_gen"])
    _put("torch_rng", torch.set_rng_state, state["torch_rng"])
    if t.ref_model is not None and state["ref_model"] is not None:
        _put("ref_model", t.ref_model.load_state_dict, state["ref_model"])
    for x in t.learners:
        if state.get(f"{x.name}_optimizer") is not None:
            _put(f"{x.name}_optimizer", x.opt.load_state_dict, state[f"{x.name}_optimizer"])
    if "exploration" in state:
        _put("exploration", t.exploration.load_state_dict, state["exploration"])
    for i, (reward, saved) in enumerate(zip(t.rewards, state.get("rewards", []), strict=False)):
        if saved is not None:
            _put(f"rewards[{i}]", reward.load_state_dict, saved)


def _put(key: str, load: Callable[..., Any], *args: Any) -> None:
    try:
        load(*args)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise CheckpointError(f"checkpoint state {key} does not fit this run: {first}") from None


def _check_optimizer(opt: torch.optim.Optimizer, saved: Any, key: str) -> None:
    """CheckpointError unless ``saved`` has ``opt``'s groups, parameter counts and, for
    every saved tensor but the step, its parameter's shape (torch checks only the counts,
    and a wrong shape would fail later, inside an update)."""
    if saved is None:
        return
    mine, theirs = opt.param_groups, saved["param_groups"]
    counts = [len(g["params"]) for g in mine], [len(g["params"]) for g in theirs]
    if counts[0] != counts[1]:
        raise CheckpointError(
            f"checkpoint state {key}: parameter groups of sizes {counts[1]}, this run's "
            f"optimizer has {counts[0]} (a different model?)"
        )
    params = dict(
        zip(
            (i for g in theirs for i in g["params"]),
            (p for g in mine for p in g["params"]),
            strict=True,
        )
    )
    for index, slots in saved["state"].items():
        shape = tuple(params[index].shape)
        for name, value in slots.items():
            if name != "step" and isinstance(value, torch.Tensor) and tuple(value.shape) != shape:
                raise CheckpointError(
                    f"checkpoint state {key}.state.{index}.{name}: shape {list(value.shape)}, "
                    f"its parameter has {list(shape)}"
                )
