"""Environments: text in, text out, Gymnasium's conventions (``cairn.envs.base.TextEnv``),
built by name from the registry (``cairn.envs.registry``): ``make(name, **options)`` and
``available()``. An env whose optional extra is not installed costs nothing until it is
asked for, and then fails with the name of the extra to install.
"""

from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv
from cairn.envs.registry import (
    ENVS,
    available,
    code_options,
    env_class,
    env_traits,
    make,
    register,
    validate_options,
)

__all__ = [
    "ENVS",
    "ReplaySnapshot",
    "StepResult",
    "TextEnv",
    "available",
    "code_options",
    "env_class",
    "env_traits",
    "make",
    "register",
    "validate_options",
]
