"""The exploration methods of a run, composed around its rollout strategy: memory (EMPO2),
demonstrations (LUFFY) and variants (LADDER) are hooks (``cairn.exploration.hooks``); SGE and
SSRL sample the episodes themselves, so they are rollout strategies (``rollout.strategy:
sge`` / ``ssrl``: ``cairn.exploration.sge``, ``cairn.exploration.self_search``).

The trainer talks to one object, built from the config's ``exploration`` section:

    exploration = Exploration(cfg.exploration, policy=..., prompt=..., env_factory=...,
                              run_dir=..., seed=...)
    strategy = exploration.wrap(make_strategy(...))   # collect() now explores
    ...rewards...
    exploration.observe(episodes)                     # after rewards: write memory tips
    row.update(exploration.metrics())

One ``collect`` of the wrapped strategy, top to bottom (the hooks nest in ``HOOK_ORDER``:
``before_collect`` outside in, ``after_collect`` inside out):

    curriculum (LADDER)  seeds -> problems of the current stage, envs built per problem
    mode (EMPO2)         draw on_policy / tips / off_policy; tips enter via the prompt
    sample               the rollout strategy (e.g. SGE: a plan first; SSRL: self-search)
    mark (EMPO2)         memory-guided episodes: source 2, tips shown, tip-free train prompts
    observe (LADDER)     the rollouts' success moves the curriculum on
    mix (LUFFY)          n_off demonstrations per group, source 1

Env faults outside the rollout cost what they touch, counted with the rollout's faults: a
failed instruction reset (EMPO2) the tips of that task's episodes, a failed demonstration
env call (LUFFY) that demonstration (its env rebuilt).

With no hook enabled the wrapper is the inner strategy itself (``wrap`` returns it). The
rollout strategy's own state (SGE's reflections) is checkpointed here, under ``sampler``,
beside the hooks' state.

This module imports no torch, no hook and no rollout code at import time (they are imported
where used): the package ``cairn.exploration`` imports it, and config loading reads
``cairn.exploration.config``, which must stay free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.agent import PromptBuilder
    from cairn.data.episode import Episode
    from cairn.envs import TextEnv
    from cairn.exploration.config import ExplorationConfig
    from cairn.exploration.hooks import ExplorationHook
    from cairn.policies.hf import HFPolicy
    from cairn.rollout import RolloutContext, Strategy

__all__ = ["HOOK_ORDER", "Exploration"]

#: The hooks' nesting, outermost first: LUFFY mixes demonstrations into what LADDER's stage
#: and EMPO2's mode produced.
HOOK_ORDER = ("demos", "variants", "memory")


class Exploration:
    """The exploration methods of a run; see the module docstring."""

    def __init__(
        self,
        cfg: ExplorationConfig,
        *,
        policy: HFPolicy,
        prompt: PromptBuilder,
        env_factory: Callable[[], TextEnv],
        run_dir: Path,
        seed: int,
        generator: Any = None,
    ):
        import numpy as np

        from cairn.exploration.hooks import DemosHook, MemoryHook, VariantsHook

        self.cfg, self.policy, self.prompt = cfg, policy, prompt
        self.env_factory = env_factory
        self.rng = np.random.default_rng([seed, 11])  # drawn by the hooks, in build order
        self.generator = generator
        on: dict[str, Any] = {}
        if cfg.memory.enabled:
            on["memory"] = MemoryHook(cfg.memory, policy, prompt, Path(run_dir), self.rng)
        if cfg.demos.enabled:
            on["demos"] = DemosHook(cfg.demos, policy, prompt, env_factory, cfg.variants.enabled)
        self.strategy: Any = None  # the rollout strategy, once ``wrap`` has it
        if cfg.variants.enabled:
            on["variants"] = VariantsHook(cfg.variants, policy, env_factory, self.rng)
        self.hooks: list[ExplorationHook] = [on[k] for k in HOOK_ORDER if k in on]
        self._on = on
        self.last: dict[str, float] = {}

    @property
    def active(self) -> bool:
        return bool(self.hooks)

    @property
    def memory(self) -> Any:
        """EMPO2's ``TipMemory`` (None when off)."""
        return self._on["memory"].memory if "memory" in self._on else None

    @property
    def curriculum(self) -> Any:
        """LADDER's ``Curriculum`` (None when off)."""
        return self._on["variants"].curriculum if "variants" in self._on else None

    # -- the trainer's calls ---------------------------------------------------------------------
    def wrap(self, inner: Strategy) -> Strategy:
        """The rollout strategy with exploration around it (``inner`` when no hook is on)."""
        self.strategy = inner
        return _Wrapped(self, inner) if self.active else inner

    def observe(self, episodes: Sequence[Episode]) -> None:
        """After the rewards: every hook sees the scored episodes (EMPO2 writes its tips)."""
        for hook in self.hooks:
            hook.observe(episodes)
            self.last.update(hook.metrics())

    def metrics(self) -> dict[str, float]:
        out, self.last = dict(self.last), {}
        return out

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": self.rng.bit_generator.state}
        if hasattr(self.strategy, "state_dict"):
            state["sampler"] = self.strategy.state_dict()
        for hook in self.hooks:
            state.update(hook.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        if "sampler" in state:
            if not hasattr(self.strategy, "load_state_dict"):
                raise ValueError(
                    "the checkpoint holds a rollout strategy's state ('sampler'), but this "
                    f"run's strategy ({type(self.strategy).__name__}) keeps none"
                )
            self.strategy.load_state_dict(state["sampler"])
        for hook in self.hooks:
            hook.load_state_dict(state)

    def close(self) -> None:
        for hook in self.hooks:
            hook.close()

    # -- one collect -------------------------------------------------------------------------------
    def collect(
        self, inner: Strategy, ctx: RolloutContext, seeds: Sequence[int], group_size: int
    ) -> list[Episode]:
        for hook in self.hooks:
            ctx, seeds = hook.before_collect(ctx, seeds)
            self.last.update(hook.metrics())
        episodes = inner.collect(ctx, seeds, group_size)
        for hook in reversed(self.hooks):
            episodes = hook.after_collect(ctx, episodes)
            self.last.update(hook.metrics())
        return episodes


class _Wrapped:
    """A rollout strategy whose ``collect`` goes through ``Exploration.collect``."""

    def __init__(self, exploration: Exploration, inner: Strategy):
        self.exploration, self.inner = exploration, inner

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        return self.exploration.collect(self.inner, ctx, seeds, group_size)
