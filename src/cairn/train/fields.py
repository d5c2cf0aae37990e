"""The names a trainer is read by: each of its parts (``trainer.policy`` is
``trainer.parts.policy``, ``cairn.train.parts.TrainParts``) and each of its counters
(``trainer.iteration`` is ``trainer.state.iteration``,
``cairn.train.checkpoint.state.TrainState``), read and written through, so that each
lives in one place (warm-up, resume and checkpoints act on the parts and the state).
``cairn.train.trainer.Trainer`` is a ``TrainerFields``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast, overload

import torch

from cairn.agent import PromptBuilder
from cairn.exploration import Exploration
from cairn.policies.engines import Engine
from cairn.policies.hf import HFPolicy
from cairn.rewards import RewardContext, RewardFn
from cairn.rollout import EnvFactory, EnvPool, RolloutSettings, Strategy, WorkerPool
from cairn.train.checkpoint.state import TrainState
from cairn.train.learners import Actor, SideLearner
from cairn.train.parts import TrainParts

__all__ = ["TrainerFields"]

T = TypeVar("T")


class _Part(Generic[T]):
    """``trainer.<name>``: the part ``trainer.parts.<name>``, read and written through, so
    that the parts stay the one place a part lives (warm-up and resume act on them). A bare
    ``Trainer.__new__`` instance (tests) has no parts: the name is its own attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, trainer: None, owner: type) -> _Part[T]: ...

    @overload
    def __get__(self, trainer: TrainerFields, owner: type) -> T: ...

    def __get__(self, trainer: TrainerFields | None, owner: type) -> T | _Part[T]:
        if trainer is None:
            return self
        parts = vars(trainer).get("parts")
        if parts is not None:
            return cast(T, getattr(parts, self.name))
        if self.name in vars(trainer):
            return cast(T, vars(trainer)[self.name])
        raise AttributeError(f"this trainer has no {self.name} (no parts yet)")

    def __set__(self, trainer: TrainerFields, value: T) -> None:
        parts = vars(trainer).get("parts")
        if parts is None:
            vars(trainer)[self.name] = value
        else:
            setattr(parts, self.name, value)


class TrainerFields:
    """A trainer's parts and counters by name (module docstring)."""

    parts: TrainParts
    state: TrainState

    # -- the parts (``self.parts``'s), read by name ------------------------------------------
    env_factory = _Part[EnvFactory]()
    train_envs = _Part[EnvPool | WorkerPool]()
    eval_envs = _Part[EnvPool | WorkerPool]()
    policy = _Part[HFPolicy]()
    engine = _Part[Engine]()
    prompt = _Part[PromptBuilder]()
    opt = _Part[torch.optim.Optimizer]()
    ref_model = _Part[torch.nn.Module | None]()
    actor = _Part[Actor]()
    learners = _Part[list[SideLearner]]()
    sampling = _Part[RolloutSettings]()
    strategy = _Part[Strategy]()
    exploration = _Part[Exploration]()
    rewards = _Part[list[RewardFn]]()
    reward_ctx = _Part[RewardContext]()
    curriculum = _Part[Any]()  # cairn.train.curriculum's, or None

    # -- the counters (``self.state``'s), read and written by name ----------------------------
    @property
    def iteration(self) -> int:
        return self.state.iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        self.state.iteration = value

    @property
    def episodes(self) -> int:
        return self.state.episodes

    @episodes.setter
    def episodes(self, value: int) -> None:
        self.state.episodes = value

    @property
    def train_seconds(self) -> float:
        return self.state.train_seconds

    @train_seconds.setter
    def train_seconds(self, value: float) -> None:
        self.state.train_seconds = value
