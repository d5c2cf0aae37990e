"""Progress inside one training iteration: counts the turn loop and the update loop report.

The rollout loop reports each turn and the episodes that ended in it, the learners' epoch
loop each minibatch it updates; whoever shows them (the trainer's live line,
``cairn.train.progress.LiveLine``) installs a sink for the duration of an iteration with
``reporting(sink)``. Without a sink (tests, verl, a library caller) a report is one context
variable lookup and nothing else. This module imports nothing from cairn, so any layer may
call it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

__all__ = ["ProgressSink", "minibatch_done", "reporting", "turn_done"]


class ProgressSink(Protocol):
    def turn_done(self, turn: int, ended: int) -> None:
        """The turn loop finished turn ``turn`` (1: the first); ``ended`` episodes ended
        in it."""

    def minibatch_done(self, done: int, total: int) -> None:
        """``done`` of ``total`` minibatch updates of the current learner are done."""


_SINK: ContextVar[ProgressSink | None] = ContextVar("cairn_progress_sink", default=None)


@contextmanager
def reporting(sink: ProgressSink) -> Iterator[ProgressSink]:
    """Send this context's reports to ``sink`` (the previous sink is restored after)."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def turn_done(turn: int, ended: int) -> None:
    """Report the end of turn ``turn`` (1: the first) and the ``ended`` episodes that
    ended in it (no-op without a sink)."""
    sink = _SINK.get()
    if sink is not None:
        sink.turn_done(turn, ended)


def minibatch_done(done: int, total: int) -> None:
    """Report ``done`` of ``total`` minibatch updates (no-op without a sink)."""
    sink = _SINK.get()
    if sink is not None:
        sink.minibatch_done(done, total)
