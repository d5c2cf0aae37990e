"""Exploration methods: memory (EMPO2), demonstrations (LUFFY), strategies (SGE), variants
(LADDER), self-search (SSRL), composed around any rollout strategy.

The trainer talks to one object, built from the config's ``exploration`` section:

    exploration = Exploration(cfg.exploration, policy=..., prompt=..., env_factory=...,
                              run_dir=..., seed=...)
    strategy = exploration.wrap(make_strategy(...))   # collect() now explores
    ...rewards...
    exploration.observe(episodes)                     # after rewards: write memory tips
    row.update(exploration.metrics())

One ``collect`` of the wrapped strategy, top to bottom:

    curriculum (LADDER)  seeds -> problems of the current stage, envs built per problem
    mode (EMPO2)         draw on_policy / tips / off_policy; tips enter via the prompt
    sample               SGE (strategy first) | SSRL (self-search) | the inner strategy
    mark (EMPO2)         memory-guided episodes: source 2, tips shown, tip-free train prompts
    mix (LUFFY)          n_off demonstrations per group, source 1

Env faults outside the rollout cost what they touch, counted with the rollout's faults: a
failed instruction reset (EMPO2) the tips of that task's episodes, a failed demonstration
env call (LUFFY) that demonstration (its env rebuilt).

With nothing enabled the wrapper is the inner strategy itself (``wrap`` returns it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

import numpy as np

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.envs import TextEnv
from cairn.rollout.envpool import EnvFault, EnvPool, GuardedEnv, reset_all

__all__ = ["Exploration"]


class Exploration:
    """The exploration methods of a run; see the module docstring."""

    def __init__(
        self,
        cfg: Any,
        *,
        policy: Any,
        prompt: PromptBuilder,
        env_factory: Callable[[], TextEnv],
        run_dir: Path,
        seed: int,
        generator: Any = None,
    ):
        self.cfg, self.policy, self.prompt = cfg, policy, prompt
        self.env_factory = env_factory
        self.rng = np.random.default_rng([seed, 11])
        self.generator = generator
        self.memory = self._build_memory(Path(run_dir)) if cfg.memory.enabled else None
        self.demos = self._build_demos() if cfg.demos.enabled else None
        self.sampler = self._build_sampler()
        self.curriculum = self._build_curriculum() if cfg.variants.enabled else None
        self._demo_envs: EnvPool | None = None
        self._instructions: dict[int, str] = {}  # episode id -> task instruction (partition)
        self.last: dict[str, float] = {}

    @property
    def active(self) -> bool:
        return any(x is not None for x in (self.memory, self.demos, self.sampler, self.curriculum))

    # -- building ------------------------------------------------------------------------------
    def _build_memory(self, run_dir: Path):
        from cairn.exploration.embed import make_embedder
        from cairn.exploration.memory import MemoryStore, TipMemory
        from cairn.exploration.tips import make_writer

        m = self.cfg.memory
        store = MemoryStore(Path(m.path) if m.path else run_dir / "memory.sqlite", m.capacity)
        self.writer = make_writer(m.writer, self.policy, self.prompt, **m.writer_options)
        return TipMemory(store, make_embedder(m.embedder), m.threshold, m.top_k)

    def _build_demos(self):
        from cairn.exploration.demos import make_source

        return make_source(self.cfg.demos.source, **self.cfg.demos.options)

    def _build_sampler(self):
        if self.cfg.strategy.enabled:
            from cairn.exploration.strategy import StrategyGuided

            s = self.cfg.strategy
            return StrategyGuided(s.temperature, s.max_tokens, s.reflection, s.reflections)
        if self.cfg.self_search.enabled:
            from cairn.exploration.self_search import SelfSearch

            s = self.cfg.self_search
            return SelfSearch(s.max_info_tokens, s.search_pattern)
        return None

    def _build_curriculum(self):
        from cairn.exploration.variants import Curriculum, make_generator

        v = self.cfg.variants
        gen = make_generator(v.generator, policy=self.policy, **v.generator_options)
        return Curriculum.build(
            gen, self.env_factory, v.originals, v.per_problem, v.depth, v.advance_at,
            v.stage_iterations, self.rng, problems=v.problems,
        )  # fmt: skip

    # -- the trainer's calls ---------------------------------------------------------------------
    def wrap(self, inner: Any) -> Any:
        """The rollout strategy with exploration around it (``inner`` when nothing is on)."""
        return _Wrapped(self, inner) if self.active else inner

    def observe(self, episodes: Sequence[Episode]) -> None:
        """After the rewards: write every rollout episode's tips (one commit per episode)."""
        if self.memory is None:
            return
        rollouts = [e for e in episodes if e.id in self._instructions]
        instructions = [self._instructions[e.id] for e in rollouts]
        for tips, ins in zip(self.writer.write(rollouts, instructions), instructions, strict=True):
            self.memory.add(ins, tips)
        self._instructions = {}
        self.last["memory/tips"] = float(self.memory.store.count())

    def metrics(self) -> dict[str, float]:
        out, self.last = dict(self.last), {}
        return out

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": self.rng.bit_generator.state}
        if self.sampler is not None and hasattr(self.sampler, "state_dict"):
            state["sampler"] = self.sampler.state_dict()
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
            # The variant tree: an LLM generator's depends on the weights it was built with.
            state["curriculum_nodes"] = [list(astuple(n)) for n in self.curriculum.nodes]
        if self.memory is not None:  # memory.sqlite back to the checkpoint on --resume
            state["memory"] = self.memory.store.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        if "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])
        if "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        if "curriculum_nodes" in state:
            from cairn.exploration.variants import Node

            nodes = [Node(*n) for n in state["curriculum_nodes"]]
            self.curriculum.nodes, self.curriculum.depth = nodes, max(n.depth for n in nodes)
        if "memory" in state:
            self.memory.store.load_state_dict(state["memory"])

    def close(self) -> None:
        if self.memory is not None:
            self.memory.store.close()
        if self._demo_envs is not None:
            self._demo_envs.close()

    # -- one collect -------------------------------------------------------------------------------
    def collect(self, inner: Any, ctx: Any, seeds: Sequence[int], group_size: int):
        # --- curriculum (LADDER): seeds index the current stage's problems ----------------
        if self.curriculum is not None:
            ctx, seeds = self.curriculum.context(ctx, seeds)
        # --- mode (EMPO2): tips reach every prompt through the prompt builder -------------
        mode, builder = "on_policy", None
        if self.memory is not None:
            from cairn.exploration.memory import TipPromptBuilder, draw_mode

            mode = draw_mode(self.rng, self.cfg.memory.probs)
            if mode != "on_policy":
                builder = TipPromptBuilder(ctx.prompt, self.memory)
                ctx = replace(ctx, prompt=builder)
            self.last["memory/mode"] = float(("on_policy", "tips", "off_policy").index(mode))
        # --- sample --------------------------------------------------------------------------
        sampler = self.sampler if self.sampler is not None else inner
        episodes = sampler.collect(ctx, seeds, group_size)
        # --- mark (EMPO2) ----------------------------------------------------------------------
        if self.memory is not None:
            self._instructions.update(_instructions(episodes, ctx.envs))
        if builder is not None:
            from cairn.exploration.memory import apply_mode

            tipped = apply_mode(
                episodes, mode, builder.shown, self.policy.encode, builder.shown_ids
            )
            self.last["memory/tipped_steps"] = tipped / max(1, sum(len(e.steps) for e in episodes))
        if self.curriculum is not None:
            self.last.update(self.curriculum.observe(episodes))
        # --- mix (LUFFY) -------------------------------------------------------------------------
        if self.demos is not None:
            episodes = episodes + self._demonstrations(ctx, episodes)
        return episodes

    def _demonstrations(self, ctx: Any, episodes: list[Episode]) -> list[Episode]:
        from cairn.exploration.demos import mix_demos

        if self._demo_envs is None:
            self._demo_envs = EnvPool(self.env_factory)
        stats = getattr(ctx.envs, "faults", None)
        if stats is not None:  # demonstration faults count with the rollout's
            self._demo_envs.faults = stats
        pool = ctx.envs if self.curriculum is not None else self._demo_envs
        name = getattr(self.env_factory, "name", "")  # an EnvFactory's env name
        demos = mix_demos(
            episodes, self.demos, self.cfg.demos.n_off, env=GuardedEnv(pool.take(1)[0], name),
            policy=self.policy, prompt=self.prompt, settings=ctx.settings,
            only_successful=self.cfg.demos.only_successful,
            on_fault=lambda: GuardedEnv(pool.take(1)[0], name),
        )  # fmt: skip
        groups = len({e.group for e in episodes})
        self.last["demos/per_group"] = len(demos) / max(1, groups)
        return demos


class _Wrapped:
    """A rollout strategy whose ``collect`` goes through ``Exploration.collect``."""

    def __init__(self, exploration: Exploration, inner: Any):
        self.exploration, self.inner = exploration, inner

    def collect(self, ctx: Any, seeds: Sequence[int], group_size: int) -> list[Episode]:
        return self.exploration.collect(self.inner, ctx, seeds, group_size)


def _instructions(episodes: Sequence[Episode], envs: Any) -> dict[int, str]:
    """Each episode's task instruction (its memory partition), by episode id.

    Envs whose instruction depends on the seed (search_qa) are reset to it again. A reset
    that fails costs the tips of that task's episodes (left out here; counted by the pool,
    which rebuilds the env), not the run.
    """
    cache: dict[int, str | None] = {}
    for e in episodes:
        if e.task not in cache:
            env = envs.take(1)[0]  # after a fault: the rebuilt env
            state = reset_all([env], [e.task])[0]
            cache[e.task] = None if isinstance(state, EnvFault) else env.instruction
    return {e.id: cache[e.task] for e in episodes if cache[e.task] is not None}
