"""What a checkpoint keeps of a trainer besides the weights, and putting it back: the
loop's counters, evaluations, the warm-up's stats and every random stream
(``cairn.train.state.TrainState``), the parts' optimizer states (the actor's and each
learner's, ``<name>_optimizer``), KL reference and the state of exploration and rewards
(``cairn.train.parts.TrainParts.state_dict``), and the metrics rows logged since the
previous checkpoint (``metrics``: a resume rebuilds from them a row that metrics.jsonl
lost). Restoring it makes a resumed run repeat the uninterrupted one exactly.

The state was checked against its schema when it was read (``cairn.train.state_schema``);
``restore_trainer`` also checks what only the live parts know (each optimizer's groups
and its tensors' shapes against the model's parameters) before it changes anything, and
turns any error while putting a part back into a CheckpointError naming the key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.train.parts import TrainParts
    from cairn.train.state import TrainState

__all__ = ["restore_trainer", "trainer_state"]


def trainer_state(
    parts: TrainParts, state: TrainState, wall_seconds: float, unsaved_rows: Iterable[dict]
) -> dict[str, Any]:
    """What a checkpoint keeps of a trainer besides its weights (module docstring): the
    loop's ``state`` (with the run's ``wall_seconds`` so far), the ``parts``' and the
    metrics rows not yet in a checkpoint."""
    return {
        **state.state_dict(wall_seconds=wall_seconds),  # counters, random streams
        **parts.state_dict(),  # optimizers, KL reference, exploration, rewards
        "metrics": list(unsaved_rows),
    }


def restore_trainer(parts: TrainParts, state: TrainState, saved: dict[str, Any]) -> None:
    """Put ``saved`` back into the loop's ``state`` and the ``parts``; CheckpointError (one
    line, naming the key) when a part does not fit them, checked before anything changes."""
    parts.check_state_dict(saved)
    state.load_state_dict(saved)
    parts.load_state_dict(saved)
