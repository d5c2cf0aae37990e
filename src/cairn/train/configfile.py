"""Reading a config: the hardened YAML loader and ``--set key=value`` overrides.

A config file (or preset) is at most ``MAX_CONFIG_BYTES``, holds no YAML anchors or aliases
and nests at most ``MAX_DEPTH`` deep; every string in it, and every ``--set`` item, is at
most ``MAX_STRING`` characters. Every refusal is a one-line ``ConfigError``. Nothing here
knows the schema (``cairn.train.schema``) or imports anything heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cairn._errors import ConfigError
from cairn.train.presets import resolve_config

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_STRING",
    "apply_overrides",
    "check_sizes",
    "config_mapping",
    "parse_mapping",
]

# Input sizes: a config file, one --set item, any string in a config, YAML nesting depth.
MAX_CONFIG_BYTES = 1 << 20
MAX_STRING = 65_536
MAX_DEPTH = 32


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases (``&a`` / ``*a`` / ``<<: *a``: a
    1 KB file of them expands to gigabytes), nested at most ``MAX_DEPTH`` deep. Refusals are
    ConfigErrors naming the line; the input is never quoted (it may be huge)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ConfigError(
                f"YAML anchors and aliases (&name, *name) are not allowed ({where}): "
                "write the values out"
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise ConfigError(f"YAML nested deeper than {MAX_DEPTH} levels ({where})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _yaml(text: str) -> object:
    """``text`` parsed by `_PlainLoader` (yaml.YAMLError or ConfigError)."""
    loader = _PlainLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def check_sizes(obj: object, where: str) -> None:
    """Every string (key or value) in ``obj`` at most ``MAX_STRING`` characters."""
    if isinstance(obj, str) and len(obj) > MAX_STRING:
        raise ConfigError(f"{where}: a string of {len(obj)} characters; at most {MAX_STRING}")
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_sizes(k, f"{where} (a key)")
            check_sizes(v, f"{where}.{str(k)[:40]}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_sizes(v, f"{where}[{i}]")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings (values parsed as YAML) to a nested dict in place."""
    for item in overrides:
        if len(item) > MAX_STRING:
            raise ConfigError(f"--set: an item of {len(item)} characters; at most {MAX_STRING}")
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {p!r} is not a section")
            node = child
        try:
            node[parts[-1]] = _yaml(raw)
        except ConfigError as err:  # an alias, or nested too deeply
            raise ConfigError(f"--set {key.strip()}: {err}") from None
        except yaml.YAMLError as err:
            problem = str(getattr(err, "problem", None) or err).replace("\n", " ")
            raise ConfigError(
                f"--set {key.strip()}={raw}: the value is not valid YAML ({problem}); "
                "quote a string, e.g. key='\"[a\"'"
            ) from None
    return data


def config_mapping(path: str | Path, *, allow_empty: bool = True) -> dict[str, Any]:
    """The mapping in a YAML config file or preset, not yet validated: at most
    ``MAX_CONFIG_BYTES``, no anchors or aliases. ``allow_empty``: an empty file is ``{}``
    (all defaults), else a ConfigError (a run's own config.yaml is never empty)."""
    try:  # a file, or a preset shipped in the package (cairn.train.presets)
        source = resolve_config(path)
        if isinstance(source, Path):
            size = source.stat().st_size
            if size > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"config file {str(path)!r} has {size} bytes; at most {MAX_CONFIG_BYTES}"
                )
        text = source.read_text() if isinstance(source, Path) else source
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text: {err}") from None
    except OSError as err:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {err.strerror}") from None
    return parse_mapping(text, str(path), allow_empty=allow_empty)


def parse_mapping(text: str, name: str, *, allow_empty: bool = True) -> dict[str, Any]:
    """The mapping config text holds, read by the loader ``config_mapping`` reads files with
    (no anchors or aliases, bounded depth); ConfigError naming the file ``name`` otherwise."""
    try:
        data = _yaml(text)
    except yaml.YAMLError as err:  # PyYAML's message spans lines: problem + position
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"config file {name!r} is not valid YAML: {problem}{where}") from None
    if data is None and allow_empty:
        return {}
    if data is None:
        raise ConfigError(f"config file {name!r} is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {name!r} must hold a mapping at the top")
    return data
