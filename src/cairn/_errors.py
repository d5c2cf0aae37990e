"""The error a bad configuration raises, at the bottom of the package: the config schema,
its loader, the preflight checks and the plugin loader all raise it, and the CLI prints it
as one line (``cairn.train.ConfigError`` is its public name)."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration problem, with the offending key, its value and what is allowed."""
