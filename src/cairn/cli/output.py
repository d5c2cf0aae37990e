"""What the command line prints: messages through rich's console (imported on first use),
and the one ``error:`` line a refused command ends with (no rich: it answers at once)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["console", "error_line", "fmt", "say"]

_CONSOLE: Console | None = None


def console() -> Console:
    """The console every message goes through (rich, imported on first use)."""
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        _CONSOLE = Console(highlight=False, soft_wrap=True)
    return _CONSOLE


def say(text: str, style: str | None = None) -> None:
    """Print ``text`` as it is (its brackets escaped, never read as console markup), in
    ``style`` (e.g. "red") if given."""
    from rich.markup import escape

    body = escape(text)
    console().print(f"[{style}]{body}[/{style}]" if style else body)


def error_line(text: str) -> None:
    """``error: TEXT`` on stdout, "error:" in red on a terminal (as rich would print it,
    without importing rich: a config error answers at once); ``TEXT`` printed as it is."""
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    head = "\033[31merror:\033[0m" if color else "error:"
    print(f"{head} {text}", flush=True)


def fmt(x: float | None) -> str:
    """A success rate to three decimals, ``n/a`` where there is none."""
    return "n/a" if x is None else f"{x:.3f}"
