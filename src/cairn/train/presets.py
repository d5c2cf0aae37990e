"""Config presets shipped inside the package (``cairn/presets/*.yaml``, package data).

``cairn train sokoban_grpo`` and ``load_config("sokoban_grpo")`` find a preset by name;
a path to a YAML file works too. The files are read with ``importlib.resources``,
so an installed wheel needs nothing from the repository or the working directory.
"""

from __future__ import annotations

import difflib
import errno
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = ["available_presets", "preset_description", "preset_text", "resolve_config"]

_SUFFIX = ".yaml"


def _folder() -> Traversable:
    return files("cairn") / "presets"


def available_presets() -> list[str]:
    """Names of the shipped presets, sorted (``sokoban_gigpo``, ...)."""
    return sorted(
        p.name.removesuffix(_SUFFIX) for p in _folder().iterdir() if p.name.endswith(_SUFFIX)
    )


def preset_text(name: str) -> str:
    """The YAML text of preset ``name``; KeyError (listing the names) when there is none."""
    if name not in available_presets():
        raise KeyError(f"no preset {name!r}; presets: {', '.join(available_presets())}")
    return (_folder() / f"{name}{_SUFFIX}").read_text(encoding="utf-8")


def preset_description(name: str, width: int = 100) -> str:
    """First sentence of the preset's leading comment, on one line of at most ``width``."""
    lines = []
    for line in preset_text(name).splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    text = re.split(r"(?<=\S)[.:;] ", text, maxsplit=1)[0].rstrip(".:;")
    if len(text) > width:
        text = text[: width - 1].rsplit(" ", 1)[0] + "…"
    return text


def resolve_config(spec: str | Path) -> Path | str:
    """A config argument as something to read: an existing file stays a path; a preset name
    (``sokoban_grpo``, ``sokoban_grpo.yaml``, or ``configs/sokoban_grpo.yaml`` where that file
    is absent, as outside the repository) becomes the preset's YAML text. Otherwise
    FileNotFoundError, one line listing the presets; an OSError for a path that exists but
    is no regular file."""
    path = Path(spec)
    if path.is_file():
        return path
    if path.exists():  # a folder, FIFO or device: reading a FIFO would block forever
        raise OSError(errno.EINVAL, "not a regular file (a folder, FIFO or device)")
    name = path.name.removesuffix(_SUFFIX)
    by_name = path.parent == Path(".") or path.parent.name == "configs"
    if by_name and name in available_presets():
        return preset_text(name)
    close = difflib.get_close_matches(name, available_presets(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise FileNotFoundError(
        f"config {str(spec)!r} does not exist: neither a file nor a preset "
        f"(presets: {', '.join(available_presets())}){hint}"
    )
