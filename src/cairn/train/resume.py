"""What a checkpoint keeps of a trainer besides the weights, and putting it back: counters,
evaluations, the warm-up's stats, the curriculum's level and window, optimizer states (the
actor's and each learner's, ``<name>_optimizer``), every random stream, the KL reference,
the state of exploration and rewards, and the metrics rows logged since the previous
checkpoint (``metrics``: a resume rebuilds from them a row that metrics.jsonl lost).
Restoring it makes a resumed run repeat the uninterrupted one exactly.

The state was checked against its schema when it was read (``cairn.train.state_schema``);
``restore_trainer`` also checks what only the live trainer knows (each optimizer's groups
and its tensors' shapes against the model's parameters) before it changes anything, and
turns any error while putting a part back into a CheckpointError naming the key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from cairn.train.checkpoint import CheckpointError
from cairn.train.state import put

if TYPE_CHECKING:
    from cairn.train.trainer import Trainer

__all__ = ["restore_trainer", "trainer_state"]


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """What a checkpoint keeps of ``trainer`` besides its weights (module docstring)."""
    ref = trainer.ref_model
    return {
        **trainer.state.state_dict(wall_seconds=trainer.wall()),  # counters, random streams
        "optimizer": trainer.opt.state_dict(),
        "ref_model": ref.state_dict() if ref is not None else None,
        **{f"{x.name}_optimizer": x.opt.state_dict() for x in trainer.learners},
        "exploration": trainer.exploration.state_dict(),
        "rewards": [_reward_state(r) for r in trainer.rewards],
        "metrics": list(trainer.log.unsaved_rows),
        **({"curriculum": trainer.curriculum.state_dict()} if trainer.curriculum else {}),
    }


def restore_trainer(trainer: Trainer, state: dict[str, Any]) -> None:
    """Put ``state`` back into ``trainer``; CheckpointError (one line, naming the key)
    when a part does not fit this trainer, checked before anything changes."""
    _check_optimizer(trainer.opt, state["optimizer"], "optimizer")
    for x in trainer.learners:
        _check_optimizer(x.opt, state.get(f"{x.name}_optimizer"), f"{x.name}_optimizer")
    trainer.state.load_state_dict(state)
    put("optimizer", trainer.opt.load_state_dict, state["optimizer"])
    if trainer.ref_model is not None and state["ref_model"] is not None:
        put("ref_model", trainer.ref_model.load_state_dict, state["ref_model"])
    for x in trainer.learners:
        if state.get(f"{x.name}_optimizer") is not None:
            put(f"{x.name}_optimizer", x.opt.load_state_dict, state[f"{x.name}_optimizer"])
    if "exploration" in state:
        put("exploration", trainer.exploration.load_state_dict, state["exploration"])
    if trainer.curriculum is not None and state.get("curriculum") is not None:
        saved = state["curriculum"]
        level = trainer.curriculum.level
        put("curriculum", trainer.curriculum.load_state_dict, saved)
        new, trainer.curriculum.level = trainer.curriculum.level, level
        trainer.set_curriculum_level(new)  # the saved level's training envs
    saved_rewards = state.get("rewards", [])
    for i, (reward, saved) in enumerate(zip(trainer.rewards, saved_rewards, strict=False)):
        if saved is not None:
            put(f"rewards[{i}]", _load_reward, reward, saved)


@runtime_checkable
class _Stateful(Protocol):
    """A reward with a state (a count-based bonus keeps its table of states and counts)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _reward_state(reward: object) -> dict[str, Any] | None:
    """A reward's state; None when it keeps none."""
    return reward.state_dict() if isinstance(reward, _Stateful) else None


def _load_reward(reward: object, saved: dict[str, Any]) -> None:
    if not isinstance(reward, _Stateful):
        raise TypeError(f"this run's reward {type(reward).__name__} keeps no state")
    reward.load_state_dict(saved)


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
