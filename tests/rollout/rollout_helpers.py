"""Helpers of the rollout tests: contexts over sokoban, a tiny model, an oracle policy."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.envs import StepResult, TextEnv, make
from cairn.envs.sokoban.solver import parse_grid, solve
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.hf import Generation
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import EnvPool, RolloutContext, RolloutSettings

#: The demo preset's env (configs/sokoban_gigpo.yaml).
DEMO = {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5}

#: The player is walled in: every action leaves the state unchanged (box blocked by a wall).
ENCLOSED = "######\n#@$#.#\n######"


def tiny_policy(env: TextEnv, seed: int = 0) -> HFPolicy:
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(len(tok), pad_token_id=0, eos_token_id=2)
    return HFPolicy(build_tiny_model(config, seed=seed), tok)


def context(
    policy: Any,
    factory: Callable[[], TextEnv],
    seed: int = 0,
    history: int = 0,
    first_episode_id: int = 0,
) -> RolloutContext:
    settings = RolloutSettings(restrict_to_admissible=True)
    gen = torch.Generator().manual_seed(seed)
    return RolloutContext(
        policy, EnvPool(factory), PromptBuilder(history=history), settings, gen, first_episode_id
    )


def demo_context(policy: HFPolicy, seed: int = 0, **kw: Any) -> RolloutContext:
    return context(policy, lambda: make("sokoban", **DEMO), seed, **kw)


def room_factory(room: str, max_steps: int, render: str = "compact") -> Callable[[], TextEnv]:
    return lambda: make("sokoban", room=room, max_steps=max_steps, render=render)


class OraclePolicy:
    """Plays the solver's first move from the grid in the prompt (grid render, history 0).

    It wins from every state that can still be solved in the steps left and loses from
    every other, so one continuation per probe tells them apart exactly. Dead states get
    ``fallback``. Text is encoded one character per id.
    """

    def __init__(self, fallback: str = "left", entropy: float = 0.5):
        self.fallback, self.entropy = fallback, entropy
        self.forward_tokens = 0
        self.calls: list[int] = []  # rows per generate call
        self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=128))
        self.tokenizer = [chr(i) for i in range(128)]

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def generate(self, prompts: Sequence[Sequence[int]], **_: Any) -> list[Generation]:
        self.calls.append(len(prompts))
        out = []
        for ids in prompts:
            text = "".join(map(chr, ids))
            grid = text.rsplit("obs:", 1)[1].rsplit("act:", 1)[0].strip()
            plan = solve(parse_grid(grid))
            action = plan[0] if plan else self.fallback
            self.forward_tokens += len(ids)
            out.append(Generation([0], [0.0], action, "choice", None, [self.entropy]))
        return out


class ConstantPolicy(OraclePolicy):
    """Always answers ``action`` (any env)."""

    def __init__(self, action: str):
        super().__init__(fallback=action)

    def generate(self, prompts: Sequence[Sequence[int]], **_: Any) -> list[Generation]:
        self.calls.append(len(prompts))
        return [Generation([0], [0.0], self.fallback, "choice", None, [0.0]) for _ in prompts]


def replays_exactly(episode: Episode, factory: Callable[[], TextEnv]) -> bool:
    """Whether stepping a fresh env from the episode's seed reproduces every step."""
    env = factory()
    obs, info = env.reset(seed=episode.task)
    for step in episode.steps:
        if step.observation != obs or step.anchor != info.get("anchor", obs):
            return False
        obs, reward, terminated, truncated, info = env.step(step.action)
        if reward != step.reward:
            return False
    return bool(terminated or truncated) == (episode.terminated or episode.truncated)


class FaultyEnv(TextEnv):
    """Compact sokoban that fails on cue, for the fault-tolerance tests.

    Resets are numbered per process (``FaultyEnv.resets``, reset it before a test); reset
    number ``n`` is bad when ``n == at_reset`` (``every`` 0) or ``n % every == at_reset``.
    A bad episode fails at its reset (``mode="reset"``), at a ``snapshot`` once it took
    ``at_step`` steps (``"snapshot"``) or at its step ``at_step``: raises (``"step"``),
    sleeps ``hang_s`` (``"hang"``) or SIGKILLs its own process (``"kill"``, for worker
    processes only). ``once``: a file path; fail only while it does not exist
    (it is created on failing), so a replaced worker does not fail again.
    """

    resets = 0

    def __init__(
        self,
        mode: str = "step",
        at_reset: int = 0,
        every: int = 0,
        at_step: int = 1,
        hang_s: float = 5.0,
        once: str | None = None,
    ):
        super().__init__()
        self.inner = make("sokoban", **DEMO)
        self.mode, self.at_reset, self.every = mode, at_reset, every
        self.at_step, self.hang_s, self.once = at_step, hang_s, once
        self.bad, self.steps = False, 0

    @property
    def instruction(self) -> str:  # type: ignore[override]
        return self.inner.instruction

    def vocabulary(self) -> list[str]:
        return self.inner.vocabulary()

    def solve(self) -> list[str] | None:
        """The inner sokoban's plan (LUFFY's solver demonstrations)."""
        return self.inner.solve()

    def _fails(self) -> bool:
        n = FaultyEnv.resets
        FaultyEnv.resets += 1
        hit = n % self.every == self.at_reset if self.every else n == self.at_reset
        if hit and self.once is not None:
            if os.path.exists(self.once):
                return False
            open(self.once, "w").close()
        return hit

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.bad, self.steps = self._fails(), 0
        if self.bad and self.mode == "reset":
            raise RuntimeError("injected reset failure")
        return self.inner.reset(seed=seed)

    def snapshot(self) -> Any:
        if self.bad and self.mode == "snapshot" and self.steps >= self.at_step:
            raise RuntimeError("injected snapshot failure")
        return super().snapshot()

    def _step(self, action: str) -> StepResult:
        self.steps += 1
        if self.bad and self.steps == self.at_step:
            if self.mode == "step":
                raise RuntimeError("injected step failure")
            if self.mode == "hang":
                time.sleep(self.hang_s)
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.step(action)


class SlowStepEnv(TextEnv):
    """Compact sokoban whose steps take ``delays[seed]`` seconds (worker timing tests)."""

    def __init__(self, delays: dict[int, float]):
        super().__init__()
        self.inner, self.delays, self.delay = make("sokoban", **DEMO), delays, 0.0

    @property
    def instruction(self) -> str:  # type: ignore[override]
        return self.inner.instruction

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.delay = self.delays.get(seed, 0.0)
        return self.inner.reset(seed=seed)

    def _step(self, action: str) -> StepResult:
        time.sleep(self.delay)
        return self.inner.step(action)


class PluginProbe(TextEnv):
    """Says at reset whether module ``module`` is imported in the process it runs in:
    ``loaded`` or ``missing`` (an env worker loads a config's plugins before building)."""

    def __init__(self, module: str = ""):
        super().__init__()
        self.module = module

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        import sys

        obs = "loaded" if self.module in sys.modules else "missing"
        return obs, {"anchor": obs, "valid": True, "success": False, "admissible": None}

    def _step(self, action: str) -> StepResult:
        return "done", 0.0, True, False, {"anchor": "done", "valid": True, "success": False}
