"""Exploration hooks: EMPO2's memory, LADDER's variants and LUFFY's demonstrations, each one
object with one small protocol (``ExplorationHook``) that ``cairn.exploration.Exploration``
composes around the sampler of a run.

A hook sees an iteration at four points: ``before_collect`` may change the rollout context
and the task seeds the sampler gets, ``after_collect`` may change the episodes it returned
(mark them, add some), ``observe`` sees them again after the rewards, and ``metrics``
returns what it measured since it was last asked. ``state_dict``/``load_state_dict`` carry
what a resumed run needs to repeat the uninterrupted one, ``close`` releases files and envs.
Hooks nest like wrappers: ``before_collect`` in the container's order, ``after_collect`` in
the reverse order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from cairn._env_host import EnvFault
from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.envs import TextEnv
from cairn.rollout import RolloutContext
from cairn.rollout.envpool.calls import GuardedEnv, reset_all
from cairn.rollout.envpool.local import EnvPool

if TYPE_CHECKING:
    from cairn.exploration.config import DemosSection, MemorySection, VariantsSection
    from cairn.exploration.memory import TipPromptBuilder
    from cairn.policies.hf import HFPolicy
    from cairn.rollout.envpool.local import EnvPool
    from cairn.rollout.envpool.workers import WorkerPool

__all__ = ["DemosHook", "ExplorationHook", "Hook", "MemoryHook", "VariantsHook"]

#: EMPO2's rollout modes, in the order ``memory/mode`` logs them (0, 1, 2).
MODES = ("on_policy", "tips", "off_policy")


class ExplorationHook(Protocol):
    def before_collect(
        self, ctx: RolloutContext, seeds: Sequence[int]
    ) -> tuple[RolloutContext, Sequence[int]]:
        """The context and seeds the sampler gets (the arguments when the hook has none)."""
        ...

    def after_collect(self, ctx: RolloutContext, episodes: list[Episode]) -> list[Episode]:
        """The episodes of this collect; ``ctx``: the context they were sampled with."""
        ...

    def observe(self, episodes: Sequence[Episode]) -> None:
        """After the rewards: the episodes of the collect, scored."""
        ...

    def metrics(self) -> dict[str, float]:
        """What the hook measured since the last call (then forgotten)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class Hook:
    """A hook that does nothing at every point; subclasses override what they use and put
    their metrics into ``self.last``."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def before_collect(
        self, ctx: RolloutContext, seeds: Sequence[int]
    ) -> tuple[RolloutContext, Sequence[int]]:
        return ctx, seeds

    def after_collect(self, ctx: RolloutContext, episodes: list[Episode]) -> list[Episode]:
        return episodes

    def observe(self, episodes: Sequence[Episode]) -> None:
        return None

    def metrics(self) -> dict[str, float]:
        out, self.last = self.last, {}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryHook(Hook):
    """EMPO2: draws the iteration's mode; ``tips`` and ``off_policy`` sample with retrieved
    tips in the prompts (through the prompt builder), and ``off_policy`` trains on tip-free
    prompts (``apply_mode``). After the rewards, every rollout episode writes its tips into
    the memory of its task's instruction."""

    def __init__(
        self,
        cfg: MemorySection,
        policy: HFPolicy,
        prompt: PromptBuilder,
        run_dir: Path,
        rng: np.random.Generator,
    ):
        from cairn.exploration.embed import make_embedder
        from cairn.exploration.memory import MemoryStore, TipMemory
        from cairn.exploration.tips import make_writer

        super().__init__()
        self.cfg, self.policy, self.rng = cfg, policy, rng
        store = MemoryStore(Path(cfg.path) if cfg.path else run_dir / "memory.sqlite", cfg.capacity)
        self.writer = make_writer(cfg.writer, policy, prompt, **cfg.writer_options)
        self.memory = TipMemory(store, make_embedder(cfg.embedder), cfg.threshold, cfg.top_k)
        self._mode: str = MODES[0]
        self._builder: TipPromptBuilder | None = None
        self._instructions: dict[int, str] = {}  # episode id -> task instruction (partition)

    def before_collect(
        self, ctx: RolloutContext, seeds: Sequence[int]
    ) -> tuple[RolloutContext, Sequence[int]]:
        from cairn.exploration.memory import TipPromptBuilder, draw_mode

        self._mode, self._builder = draw_mode(self.rng, self.cfg.probs), None
        if self._mode != MODES[0]:
            self._builder = TipPromptBuilder(ctx.prompt, self.memory)
            ctx = replace(ctx, prompt=cast(PromptBuilder, self._builder))  # a wrapper of one
        self.last["memory/mode"] = float(MODES.index(self._mode))
        return ctx, seeds

    def after_collect(self, ctx: RolloutContext, episodes: list[Episode]) -> list[Episode]:
        from cairn.exploration.memory import apply_mode

        self._instructions.update(_instructions(episodes, ctx.envs))
        builder = self._builder
        if builder is not None:
            tipped = apply_mode(
                episodes, self._mode, builder.shown, self.policy.encode, builder.shown_ids
            )
            self.last["memory/tipped_steps"] = tipped / max(1, sum(len(e.steps) for e in episodes))
        return episodes

    def observe(self, episodes: Sequence[Episode]) -> None:
        rollouts = [e for e in episodes if e.id in self._instructions]
        instructions = [self._instructions[e.id] for e in rollouts]
        for tips, ins in zip(self.writer.write(rollouts, instructions), instructions, strict=True):
            self.memory.add(ins, tips)
        self._instructions = {}
        self.last["memory/tips"] = float(self.memory.store.count())

    def state_dict(self) -> dict[str, Any]:  # memory.sqlite back to the checkpoint on --resume
        return {"memory": self.memory.store.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "memory" in state:
            self.memory.store.load_state_dict(state["memory"])

    def close(self) -> None:
        self.memory.store.close()


class VariantsHook(Hook):
    """LADDER: seeds index the current stage's problems of a variant tree (envs built per
    problem); the rollouts' success moves the curriculum on."""

    def __init__(
        self,
        cfg: VariantsSection,
        policy: HFPolicy,
        env_factory: Callable[[], TextEnv],
        rng: np.random.Generator,
    ):
        from cairn.exploration.variants import Curriculum, make_generator

        super().__init__()
        gen = make_generator(cfg.generator, policy=policy, **cfg.generator_options)
        self.curriculum = Curriculum.build(
            gen, env_factory, cfg.originals, cfg.per_problem, cfg.depth, cfg.advance_at,
            cfg.stage_iterations, rng, problems=cfg.problems,
        )  # fmt: skip

    def before_collect(
        self, ctx: RolloutContext, seeds: Sequence[int]
    ) -> tuple[RolloutContext, Sequence[int]]:
        return self.curriculum.context(ctx, seeds)

    def after_collect(self, ctx: RolloutContext, episodes: list[Episode]) -> list[Episode]:
        self.last.update(self.curriculum.observe(episodes))
        return episodes

    def state_dict(self) -> dict[str, Any]:
        # The variant tree: an LLM generator's depends on the weights it was built with.
        nodes = [list(astuple(n)) for n in self.curriculum.nodes]
        return {"curriculum": self.curriculum.state_dict(), "curriculum_nodes": nodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from cairn.exploration.variants import Node

        if "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        if "curriculum_nodes" in state:
            nodes = [Node(*n) for n in state["curriculum_nodes"]]
            self.curriculum.nodes, self.curriculum.depth = nodes, max(n.depth for n in nodes)


class DemosHook(Hook):
    """LUFFY: ``n_off`` demonstrations of each group's task, replayed in an env built as the
    rollout's envs are (its pool's ``factory``: a curriculum's level, whose options change
    the task a seed gives, included); with LADDER in the rollout's pool itself, whose envs
    hold the stage's problems."""

    def __init__(
        self,
        cfg: DemosSection,
        policy: HFPolicy,
        prompt: PromptBuilder,
        env_factory: Callable[[], TextEnv],
        rollout_envs: bool = False,
    ):
        from cairn.exploration.demos import make_source

        super().__init__()
        self.cfg, self.policy, self.prompt = cfg, policy, prompt
        self.env_factory, self.rollout_envs = env_factory, rollout_envs
        self.source = make_source(cfg.source, **cfg.options)
        self._demo_envs: EnvPool | None = None

    def after_collect(self, ctx: RolloutContext, episodes: list[Episode]) -> list[Episode]:
        from cairn.exploration.demos import mix_demos

        factory = getattr(ctx.envs, "factory", self.env_factory)
        if self._demo_envs is None or self._demo_envs.factory != factory:
            if self._demo_envs is not None:
                self._demo_envs.close()
            self._demo_envs = EnvPool(factory)
        stats = getattr(ctx.envs, "faults", None)
        if stats is not None:  # demonstration faults count with the rollout's
            self._demo_envs.faults = stats
        pool: Any = ctx.envs if self.rollout_envs else self._demo_envs
        name = getattr(self.env_factory, "name", "")  # an EnvFactory's env name
        env = cast(TextEnv, GuardedEnv(pool.take(1)[0], name))  # a proxy of one
        demos = mix_demos(
            episodes, self.source, self.cfg.n_off, env=env,
            policy=self.policy, prompt=self.prompt, settings=ctx.settings,
            only_successful=self.cfg.only_successful,
            on_fault=lambda: cast(TextEnv, GuardedEnv(pool.take(1)[0], name)),
        )  # fmt: skip
        groups = len({e.group for e in episodes})
        self.last["demos/per_group"] = len(demos) / max(1, groups)
        return episodes + demos

    def close(self) -> None:
        if self._demo_envs is not None:
            self._demo_envs.close()


def _instructions(episodes: Sequence[Episode], envs: EnvPool | WorkerPool) -> dict[int, str]:
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
    return {e.id: ins for e in episodes if (ins := cache[e.task]) is not None}
