"""What a checkpoint keeps of a trainer besides the weights, and putting it back: the
loop's counters, evaluations, the warm-up's stats and every random stream
(``state.TrainState``), the parts' optimizer states (the actor's and each learner's,
``<name>_optimizer``), KL reference, the state of exploration and rewards and the
curriculum's level and window (``cairn.train.parts.TrainParts.state_dict``), and the
metrics rows logged since the previous checkpoint (``metrics``: a resume rebuilds from
them a row that metrics.jsonl lost). Restoring it makes a resumed run repeat the
uninterrupted one exactly.

The state was checked against its schema when it was read (``schema``); ``restore_trainer``
also checks what only the live parts know (each optimizer's groups and its tensors' shapes
against the model's parameters) before it changes anything, and turns any error while
putting a part back into a CheckpointError naming the key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cairn.policies.modelio import SavesPretrained
from cairn.train.checkpoint.layout import CheckpointError

if TYPE_CHECKING:
    from cairn.train.checkpoint.state import TrainState

__all__ = ["Resumable", "check_optimizer", "restore_trainer", "trainer_state"]


class _Weights(Protocol):
    """The policy as a checkpoint writes it: its model and tokenizer, each written by its
    own ``save_pretrained``."""

    @property
    def model(self) -> torch.nn.Module: ...

    @property
    def tokenizer(self) -> SavesPretrained: ...


class _Folder(Protocol):
    """A learner beside the actor, whose weights a checkpoint keeps in a folder of its name."""

    @property
    def name(self) -> str: ...

    def save(self, folder: Path) -> None: ...


class Resumable(Protocol):
    """A trainer's parts as a checkpoint sees them (``cairn.train.parts.TrainParts``): the
    weights it writes and the state it keeps and puts back."""

    @property
    def policy(self) -> _Weights: ...

    @property
    def learners(self) -> Sequence[_Folder]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """CheckpointError unless ``state`` fits; changes nothing (``check_optimizer``)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def trainer_state(
    parts: Resumable,
    state: TrainState,
    wall_seconds: float,
    unsaved_rows: Iterable[dict[str, Any]],
) -> dict[str, Any]:
    """What a checkpoint keeps of a trainer besides its weights (module docstring): the
    loop's ``state`` (with the run's ``wall_seconds`` so far), the ``parts``' and the
    metrics rows not yet in a checkpoint."""
    return {
        **state.state_dict(wall_seconds=wall_seconds),  # counters, random streams
        **parts.state_dict(),  # optimizers, KL reference, exploration, rewards
        "metrics": list(unsaved_rows),
    }


def restore_trainer(parts: Resumable, state: TrainState, saved: dict[str, Any]) -> None:
    """Put ``saved`` back into the loop's ``state`` and the ``parts``; CheckpointError (one
    line, naming the key) when a part does not fit them, checked before anything changes."""
    parts.check_state_dict(saved)
    state.load_state_dict(saved)
    parts.load_state_dict(saved)


def check_optimizer(opt: torch.optim.Optimizer, saved: Mapping[str, Any] | None, key: str) -> None:
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
