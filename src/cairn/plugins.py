"""User code that registers envs, rewards and advantage estimators, found before a config is
checked: the modules a config's ``imports`` names, and the entry points of installed packages.

    # my_pkg/tasks.py: importable (on PYTHONPATH, or installed)
    from cairn.envs import TextEnv, register
    class Guess(TextEnv): ...
    register("guess", Guess)

    cairn train --set 'imports=[my_pkg.tasks]' --set env.name=guess

An installed package may instead declare an entry point in one of ``ENTRY_POINT_GROUPS``
(pyproject.toml: ``[project.entry-points."cairn.envs"] guess = "my_pkg.tasks"``). Its value
names a module, imported (it registers on import), or a function, called with no argument
(``"my_pkg.tasks:register"``). ``cairn.train.preflight.check_config`` calls ``load_plugins``
first, so every check, and the run, sees what they register.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points

from cairn._errors import ConfigError

__all__ = ["ENTRY_POINT_GROUPS", "load_plugins"]

#: Entry point groups read by ``load_plugins``: what their modules register.
ENTRY_POINT_GROUPS = ("cairn.envs", "cairn.rewards", "cairn.advantages")

_loaded: set[tuple[str, str, str]] = set()  # (group, name, value) of entry points run once


def load_plugins(imports: Sequence[str] = ()) -> None:
    """Run each entry point of ``ENTRY_POINT_GROUPS`` not run yet in this process, then
    import the modules ``imports`` names (a module already imported is not run again).

    Idempotent. Raises ConfigError, one line naming the module or entry point, when one
    cannot be imported or its ``register()`` fails."""
    for group in ENTRY_POINT_GROUPS:
        for ep in entry_points(group=group):
            key = (group, ep.name, ep.value)
            if key not in _loaded:
                _run_entry_point(group, ep)
                _loaded.add(key)
    for name in imports:
        try:
            importlib.import_module(name)
        except Exception as err:
            raise ConfigError(
                f"imports: cannot import {name!r}: {_one_line(err)} (a module name on "
                "PYTHONPATH or in an installed package, e.g. my_pkg.tasks)"
            ) from err


def _run_entry_point(group: str, ep: EntryPoint) -> None:
    where = f"entry point {ep.name!r} = {ep.value!r} (group {group}"
    where += f", package {ep.dist.name})" if ep.dist is not None else ")"
    try:
        target = ep.load()
    except Exception as err:
        raise ConfigError(f"{where} cannot be loaded: {_one_line(err)}") from err
    if inspect.ismodule(target):
        return  # it registered on import
    if not inspect.isroutine(target):
        raise ConfigError(
            f"{where} names a {type(target).__name__}; name a module that registers on "
            "import, or a function register() to call"
        )
    try:
        target()
    except Exception as err:
        raise ConfigError(f"{where}: its register() failed: {_one_line(err)}") from err


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
