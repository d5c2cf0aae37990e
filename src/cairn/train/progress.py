"""The live line within a long iteration: episodes sampled, minibatches updated, elapsed.

A real model on a CPU spends minutes in one iteration (sokoban_smol: minutes of sampling,
then minutes of updates) and the per-iteration line comes only at its end. While an
iteration runs longer than ``after_s`` (10 s), ``LiveLine`` shows

    it    3 · episodes 5/16 · turn 4 · minibatches 0/18 · 42 s

from the counts the turn loop and the update loop report (``cairn._progress``). On a
terminal it is one transient line, redrawn every second and erased when the iteration
ends (the iteration's own line then takes its place); on a console that is not a terminal
(``log.progress: true`` into a file) a plain line is printed every ``every_s`` (30 s). It
goes to the console only, never to metrics.jsonl or the loggers, and with the live
progress off (``log.progress: false``, or unset and not a terminal) nothing starts.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from cairn import _progress

__all__ = ["LiveLine"]


class LiveLine:
    """``with LiveLine(console, enabled, iteration, episodes):`` around one iteration.

    ``episodes``: the episodes the iteration samples (N of "k/N"); ``after_s``: the line
    appears once the iteration has run this long; ``every_s``: the interval of plain lines
    on a console that is not a terminal; ``tick_s``: how often the counts are read.
    """

    def __init__(
        self,
        console: Console,
        enabled: bool,
        iteration: int,
        episodes: int,
        after_s: float = 10.0,
        every_s: float = 30.0,
        tick_s: float = 1.0,
    ):
        self.console, self.enabled = console, enabled
        self.iteration, self.episodes = iteration, episodes
        self.after_s, self.every_s, self.tick_s = after_s, every_s, tick_s
        self.ended = self.turn = self.minibatches = self.minibatch_total = 0
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._scope: Any = None

    # -- the sink of cairn._progress (called on the training thread) -----------------------
    def turn_done(self, turn: int, ended: int) -> None:
        self.turn, self.ended = turn, self.ended + ended

    def minibatch_done(self, done: int, total: int) -> None:
        self.minibatches, self.minibatch_total = done, total

    # -- the line ------------------------------------------------------------------------------
    def text(self) -> str:
        """The line as it stands now."""
        parts = [f"it {self.iteration:>4}", f"episodes {self.ended}/{self.episodes}"]
        if self.turn and self.ended < self.episodes and not self.minibatch_total:
            parts.append(f"turn {self.turn + 1}")  # the turn being sampled
        total = self.minibatch_total
        parts.append(f"minibatches {self.minibatches}/{total}" if total else "minibatches 0/?")
        parts.append(f"{time.monotonic() - self._start:.0f} s")
        return " · ".join(parts)

    def __enter__(self) -> LiveLine:
        self._start = time.monotonic()
        if self.enabled:
            self._scope = _progress.reporting(self)
            self._scope.__enter__()
            self._thread = threading.Thread(target=self._tick, name="cairn-live-line", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.enabled:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._live is not None:
            self._live.stop()  # transient: the line is erased
        self._scope.__exit__(kind, err, tb)

    def _tick(self) -> None:
        """The ticker thread: after ``after_s``, redraw (terminal) or print every ``every_s``."""
        last_print = None
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            if now - self._start < self.after_s:
                continue
            if self.console.is_terminal:
                if self._live is None:
                    self._live = Live(console=self.console, transient=True, auto_refresh=False)
                    self._live.start()
                self._live.update(Text(self.text(), style="dim"), refresh=True)
            elif last_print is None or now - last_print >= self.every_s:
                self.console.print(self.text(), markup=False, highlight=False)
                last_print = now
