"""How a bad run configuration is told: one line per problem (``key = value: message``),
the ``ConfigError`` message holding them, pydantic's validation errors in that form (an
unknown key lists the known ones of its section) and the closest known word to a
misspelled one. ``cairn.train.config.load_config`` and the preflight raise with these.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from cairn.train.schema import Config

__all__ = ["config_problem", "config_problems", "did_you_mean", "format_validation_error"]


def config_problem(loc: str, value: Any, message: str) -> str:
    """One problem as a line: ``key = value: message`` (a section's value is not shown;
    an empty ``loc`` is the whole config, ``(top level)``)."""
    shown = "" if isinstance(value, dict | BaseModel) else f" = {_short(value)}"
    return f"{loc or '(top level)'}{shown}: {message}"


def config_problems(lines: Sequence[str]) -> str:
    """The message of a ConfigError holding ``lines`` (one line when there is one)."""
    if len(lines) == 1:
        return f"invalid config: {lines[0]}"
    return "invalid config:\n  " + "\n  ".join(lines)


def format_validation_error(err: ValidationError) -> str:
    """pydantic's errors as ``config_problems`` lines; an unknown key lists the known ones."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            section = _section_at(e["loc"][:-1])
            allowed = ", ".join(section.model_fields) if section else "?"
            shown = _short(e["input"])
            hint = did_you_mean(str(e["loc"][-1]), section.model_fields if section else [])
            lines.append(f"unknown key {loc!r} (value {shown}); allowed here: {allowed}{hint}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(config_problem(loc, e.get("input"), msg))
    return config_problems(lines)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` naming the known word closest to a misspelled ``word``, or
    "" when none is close (difflib's ratio of at least 0.6)."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a bad value may be long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _section_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    for p in loc:
        field = model.model_fields.get(str(p))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model
