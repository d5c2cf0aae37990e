"""Env calls that answer a fault instead of raising it, and remote envs called together.

``step_all`` / ``reset_all`` send one request per env first and then collect the answers,
so the N workers of a ``WorkerPool`` step at the same time while each worker steps its own
envs in order. An env that raised, ran past its timeout or whose worker died answers with
an ``EnvFault`` in place of its result; the turn loop ends that episode as an
infrastructure failure (``cairn.rollout.loop``) and the pool that owns the env counts the
fault and rebuilds the env (``faults.report``). ``GuardedEnv`` is the same guard for code
outside the turn loop, which raises the fault instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from cairn._env_host import EnvFault
from cairn.envs import StepResult
from cairn.rollout.envpool.faults import as_fault, report
from cairn.rollout.envpool.proxy import Done, EnvProxy, Handle, Reset
from cairn.rollout.envpool.workers import RemoteEnv

__all__ = ["GuardedEnv", "reset_all", "restore_guarded", "snapshot_guarded", "step_all"]


def _guarded(env: object, method: str, *args: object, **kwargs: object) -> Handle[object]:
    """A handle on ``env.method(...)`` whose ``result()`` is an ``EnvFault`` where it failed."""
    if isinstance(env, RemoteEnv):
        return _Caught(env, env.submit(method, *args, **kwargs))
    try:
        return Done(getattr(env, method)(*args, **kwargs))
    except Exception as err:
        fault = as_fault(err)
        report(env, fault)
        return Done(fault)


class _Caught:
    """A remote call's handle whose error, once it comes, is answered as an ``EnvFault``."""

    def __init__(self, env: RemoteEnv, handle: Handle[object]):
        self.env, self.handle = env, handle

    def result(self) -> object:
        try:
            return self.handle.result()
        except Exception as err:
            fault = as_fault(err)
            report(self.env, fault)
            return fault


def step_all(envs: Sequence[object], actions: Sequence[str]) -> list[StepResult | EnvFault]:
    """``envs[i].step(actions[i])`` for all i; remote envs step concurrently.

    A failed call answers with its ``EnvFault`` (the owning pool rebuilds the env).
    """
    if len(envs) != len(actions):
        raise ValueError(f"{len(envs)} envs but {len(actions)} actions")
    pending = [_guarded(e, "step", a) for e, a in zip(envs, actions, strict=True)]
    return [cast("StepResult | EnvFault", p.result()) for p in pending]


def reset_all(envs: Sequence[object], seeds: Sequence[int | None]) -> list[Reset | EnvFault]:
    """``envs[i].reset(seed=seeds[i])`` for all i; remote envs reset concurrently.

    A failed call answers with its ``EnvFault`` (the owning pool rebuilds the env).
    """
    if len(envs) < len(seeds):
        raise ValueError(f"{len(seeds)} seeds but only {len(envs)} envs")
    pending = [_guarded(e, "reset", seed=s) for e, s in zip(envs, seeds, strict=False)]
    return [cast("Reset | EnvFault", p.result()) for p in pending]


def restore_guarded(env: object, snap: object) -> Reset | EnvFault:
    """``env.restore(snap)``, or the ``EnvFault`` it ended in (the pool rebuilds the env)."""
    return cast("Reset | EnvFault", _guarded(env, "restore", snap).result())


def snapshot_guarded(env: object) -> object:
    """``env.snapshot()``, or the ``EnvFault`` it ended in (the pool rebuilds the env)."""
    return _guarded(env, "snapshot").result()


class GuardedEnv(EnvProxy):
    """``env`` for code outside the turn loop (demonstrations, setup): a failed ``reset``,
    ``step``, ``snapshot`` or ``restore`` raises an ``EnvFault`` naming the env and the call
    (counted by ``env``'s pool, which rebuilds it) instead of the env's own exception, so
    the caller can tell an env fault from its own errors; ``vocabulary`` too. Other
    attributes pass through."""

    def __init__(self, env: object, name: str = ""):
        self._env, self._name = env, name or type(env).__name__

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        answer = _guarded(self._env, method, *args, **kwargs).result()
        if isinstance(answer, EnvFault):
            fault = type(answer)(f"env {self._name!r} failed in {method}(): {answer}")
            raise fault from answer
        return answer

    def vocabulary(self) -> list[str]:
        return cast("list[str]", self._call("vocabulary"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)
