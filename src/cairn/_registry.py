"""One import-path registry for the things a config names: envs, rollout strategies, rewards,
rollout engines, tip writers, demo sources, variant generators, embedders, loggers.

Entries are ``"package.module:Name"`` strings, so an entry whose optional extra is not
installed costs nothing until it is asked for, and then fails naming the extra; an entry
may also be the object itself (e.g. a logger registered by a user). An entry is a class or
a factory function; its options are its keyword parameters, checked before anything is
built, unless it defines its own ``validate_options(options)`` (which may check values too).
Context arguments that the caller supplies (a policy, a work directory) are passed by name
to the entries that take them and are never options.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["ImportRegistry", "check_options"]


def check_options(
    fn: Callable[..., object],
    options: Mapping[str, object],
    what: str,
    context: Collection[str] = (),
) -> None:
    """Raise ValueError naming each key of ``options`` that ``fn`` does not accept.

    ``what`` names the thing configured, e.g. ``"env 'sokoban'"``; names in ``context`` are
    supplied by the caller, so they are not options.
    """
    params = inspect.signature(fn).parameters
    allowed = [
        n
        for n, p in params.items()
        if n != "self" and n not in context and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    unknown = set(options) & set(context)  # supplied by the caller, never an option
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown |= set(options) - set(allowed)
    if unknown:
        raise ValueError(
            f"{what} has no option {', '.join(map(repr, sorted(unknown)))}; "
            f"allowed: {', '.join(allowed) or '(none)'}"
        )


class ImportRegistry:
    """name -> (import path or object, pip extra or None), for one ``kind`` (e.g. "env").

    An entry may also carry traits, facts about it known without importing it (an env's
    ``slow=True``: it starts a process or generates games, so the contract tests that
    iterate the registry mark it slow): ``register(name, target, extra, slow=True)``,
    read with ``traits(name)``.
    """

    def __init__(
        self,
        kind: str,
        entries: dict[str, str | tuple[str, str | None] | tuple[str, str | None, dict]],
    ):
        self.kind = kind
        self.entries: dict[str, tuple[Any, str | None]] = {}
        self._traits: dict[str, dict[str, Any]] = {}
        for name, target in entries.items():
            if not isinstance(target, tuple):
                self.register(name, target)
            else:
                self.register(name, target[0], target[1], **(target[2] if len(target) > 2 else {}))

    def register(self, name: str, target: object, extra: str | None = None, **traits: Any) -> None:
        """Add ``name`` -> ``target`` (``"package.module:Name"`` or the object itself)."""
        if name in self.entries and self.entries[name][0] != target:
            raise ValueError(
                f"{self.kind} {name!r} is already registered as {self.entries[name][0]}"
            )
        self.entries[name] = (target, extra)
        self._traits[name] = dict(traits)

    def traits(self, name: str) -> dict[str, Any]:
        """The traits ``name`` was registered with (e.g. ``{"slow": True}``); {} for none."""
        return dict(self._traits.get(self.check_name(name), {}))

    def available(self) -> list[str]:
        return sorted(self.entries)

    def check_name(self, name: str) -> str:
        """``name`` if it is registered, else ValueError listing the available names; imports
        nothing (a config names an entry whose extra may be missing)."""
        if name not in self.entries:
            close = difflib.get_close_matches(str(name), self.available(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown {self.kind} {name!r}; available: {', '.join(self.available())}{hint}"
            )
        return name

    def get(self, name: str) -> Any:
        """The class or function registered as ``name`` (imported on first use)."""
        target, extra = self.entries[self.check_name(name)]
        if not isinstance(target, str):
            return target
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            hint = f" (pip install 'cairn-rl[{extra}]')" if extra else ""
            raise ImportError(
                f"{self.kind} {name!r} needs a missing dependency{hint}: {err}"
            ) from err
        return getattr(module, attr)

    def validate(
        self, name: str, options: Mapping[str, object], context: Collection[str] = ()
    ) -> None:
        """Check ``options`` for ``name`` without building it; ``context`` names are not options."""
        target = self.get(name)
        clash = sorted(set(options) & set(context))
        if clash:
            raise ValueError(
                f"{self.kind} {name!r} has no option {', '.join(map(repr, clash))}; "
                f"{', '.join(context)} come from the caller"
            )
        own = getattr(target, "validate_options", None)
        if own is not None:
            own(options)
            return
        check_options(target, options, f"{self.kind} {name!r}", context)

    def probe(self, name: str, options: Mapping[str, object]) -> None:
        """``validate``, then check the values by building one and closing it: for things
        whose constructors only check and store their options (an env starts any process
        at reset). Raises ValueError naming the thing, its options and the problem."""
        self.validate(name, options)
        try:
            built = self.get(name)(**options)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.kind} {name!r}: {err} (options: {options})") from None
        close = getattr(built, "close", None)
        if callable(close):
            close()

    def make(self, name: str, **options: object) -> Any:
        self.validate(name, options)
        return self.get(name)(**options)

    def build(
        self, name: str, options: Mapping[str, object] | None = None, **context: object
    ) -> Any:
        """``name`` built from ``options`` plus the ``context`` values its signature takes."""
        options = dict(options or {})
        self.validate(name, options, context)
        target = self.get(name)
        params = inspect.signature(target).parameters
        taken = {k: v for k, v in context.items() if k in params}
        return target(**taken, **options)
