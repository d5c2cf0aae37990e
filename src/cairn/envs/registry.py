"""The environment registry: names -> env classes by import path, with traits.

Entries are import paths (``cairn._registry.ImportRegistry``), so an env whose optional
extra is not installed costs nothing until it is asked for, and then fails with the name
of the extra to install. ``cairn.envs`` re-exports the names below.
"""

from __future__ import annotations

from cairn._registry import ImportRegistry
from cairn.envs.base import TextEnv

__all__ = [
    "ENVS",
    "SLOW",
    "available",
    "code_options",
    "env_class",
    "env_traits",
    "make",
    "register",
    "validate_options",
]

#: name -> (import path "module:Class", pip extra that provides its dependencies or None,
#: traits): ``slow`` envs start a process or generate games (tens of seconds), so the
#: contract and fuzz tests that iterate this registry mark them slow; ``free_text`` envs
#: take any short printable answer (a dataset's), so random printable text may be valid;
#: ``code_options`` names the options whose values name code (``TextEnv.code_options``),
#: known here without importing the env.
SLOW = {"slow": True}
ENVS = ImportRegistry(
    "env",
    {
        "sokoban": "cairn.envs.sokoban:Sokoban",
        "frozenlake": ("cairn.envs.frozenlake:FrozenLake", "gymnasium"),
        "countdown": "cairn.envs.countdown:Countdown",
        "dataset": (
            "cairn.envs.dataset:DatasetEnv",
            None,
            {"free_text": True, "code_options": ("reward", "feedback")},
        ),
        "integration": "cairn.envs.integration:Integration",
        "search_qa": ("cairn.envs.search_qa:SearchQA", "search"),
        "scienceworld": ("cairn.envs.scienceworld:ScienceWorld", "scienceworld", SLOW),
        "textworld": ("cairn.envs.textworld:TextWorld", "textworld", SLOW),
        "twx": ("cairn.envs.twx:TextWorldExpress", "twx", SLOW),
    },
)
register = ENVS.register  # register(name, "pkg.module:Class" or the class, extra=None, **traits)
available = ENVS.available  # names accepted by make
env_class = ENVS.get
env_traits = ENVS.traits  # {"slow": True} for the envs that take tens of seconds to test
validate_options = ENVS.validate  # ValueError naming options the constructor does not take


def code_options(name: str) -> tuple[str, ...]:
    """The options of env ``name`` whose values name code to import (``module:function``),
    without importing the env: the ``code_options`` trait it was registered with, and the
    class's own ``code_options`` where the registry holds the class itself; () for a name
    not registered (yet)."""
    if name not in ENVS.entries:
        return ()
    target = ENVS.entries[name][0]
    declared = [*ENVS.traits(name).get("code_options", ())]
    if not isinstance(target, str):
        declared += getattr(target, "code_options", ())
    return tuple(dict.fromkeys(declared))


def make(name: str, **options: object) -> TextEnv:
    """Build the env registered as ``name``; unknown names or options raise ValueError."""
    return ENVS.make(name, **options)
