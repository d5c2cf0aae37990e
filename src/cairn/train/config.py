"""Run configuration: load a config (a YAML file or a preset, with ``--set`` overrides),
validate it against the schema and run the preflight checks.

    from cairn.train.config import load_config
    cfg = load_config("sokoban_grpo", ["rollout.group_size=4"])   # Config, or ConfigError

The modules it joins, each importable without torch:

    cairn.train.schema      ``Config`` and its sections, their defaults, help strings and
                            checks of types, ranges and rules between keys; ``describe``
    cairn.train.rollout_sections  the env, model, agent and rollout sections
    cairn.train.limits      the limits on counts and run names
    cairn.train.problems    the error messages
    cairn.train.configfile  the hardened YAML loader and ``--set`` overrides
    cairn.train.preflight   ``check_config``: the checks that need a registry, an env, a
                            model file or a probe, after the modules of ``imports`` load

A bad key or value fails at load time with the key, the value and what is allowed
(``cairn._errors.ConfigError``, public as ``cairn.train.ConfigError``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cairn._errors import ConfigError
from cairn.train.configfile import apply_overrides, check_sizes, config_mapping
from cairn.train.preflight import check_config
from cairn.train.problems import format_validation_error
from cairn.train.schema import Config

__all__ = ["load_config", "validate_config"]


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, *, check: bool = True
) -> Config:
    """Defaults <- YAML file or preset name <- ``--set`` overrides, validated, then (unless
    ``check`` is False) the preflight checks (``cairn.train.preflight.check_config``).

    Raises ConfigError."""
    data = config_mapping(path) if path is not None else {}
    apply_overrides(data, overrides or [])
    return validate_config(data, check=check)


def validate_config(data: dict[str, Any], *, check: bool = True) -> Config:
    """The Config of a nested dict (a loaded file with its overrides); ConfigError naming the
    key, the value and what is allowed. ``check``: run ``check_config`` on it too."""
    check_sizes(data, "config")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    if check:
        check_config(cfg)
    return cfg
