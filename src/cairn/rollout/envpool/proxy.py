"""What the pools' env wrappers share: the env protocol forwarded to one ``_call``, and
the handles a call answers with (``result()`` waits for the answer, or raises its error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, NoReturn, Protocol, TypeVar, cast

from cairn._env_host import EnvFault
from cairn.envs import StepResult

__all__ = ["Done", "EnvProxy", "Failed", "Handle", "Pending", "Reply", "Request", "Reset"]

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")
Reset = tuple[str, dict[str, Any]]  # what ``reset`` and ``restore`` answer: (obs, info)
# a worker's answer to a call: (value, the env's instruction[, its constants after a reset])
Reply = tuple[object, ...]


class Request(NamedTuple):
    """A call for a worker: the env's slot, the method and its arguments (sent as a plain
    tuple, ``tuple(request)``, so that a worker needs no cairn module to read it)."""

    slot: int
    method: str
    args: tuple[object, ...]
    kwargs: dict[str, object]


class Handle(Protocol[T_co]):
    """A call sent to an env; ``result()`` waits for its answer (or raises its error)."""

    def result(self) -> T_co: ...


class Done(Generic[T]):
    """A handle whose answer is already here."""

    def __init__(self, value: T):
        self.value = value

    def result(self) -> T:
        return self.value


class Failed:
    """A handle on a call that was never sent: ``result()`` raises ``fault``."""

    def __init__(self, fault: EnvFault):
        self.fault = fault

    def result(self) -> NoReturn:
        raise self.fault


class Pending:
    """A call sent to a worker, answered later: ``result()`` has ``wait`` (the backend's)
    take answers until this one's has come (``answer`` or ``fail``)."""

    def __init__(self, wait: Callable[[Pending], None]):
        self._wait = wait
        self.done = False
        self._reply: Reply = ()
        self._error: BaseException | None = None

    def answer(self, reply: Reply) -> None:
        self._reply, self.done = reply, True

    def fail(self, error: BaseException) -> None:
        self._error, self.done = error, True

    def result(self) -> Reply:
        self._wait(self)
        if self._error is not None:
            raise self._error
        return self._reply


class EnvProxy:
    """The env protocol's calls, each forwarded to ``_call(method, ...)`` (a thread, a
    worker process or a Ray actor answers it)."""

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        raise NotImplementedError

    def reset(self, seed: int | None = None, options: dict | None = None) -> Reset:
        return cast(Reset, self._call("reset", seed=seed, options=options))

    def step(self, action: str) -> StepResult:
        return cast(StepResult, self._call("step", action))

    def snapshot(self) -> object:
        return self._call("snapshot")

    def restore(self, snap: object) -> Reset:
        return cast(Reset, self._call("restore", snap))
