"""LADDER: recursive problem variants, easy-to-hard training, test-time RL (arXiv 2503.00735).

For each hard problem a *variant generator* writes easier variants, each with one parent,
recursively up to depth 3 (the variant tree, Sec. 3.1). Training is GRPO over the tree,
easiest first (Sec. 3.2): stage s uses the nodes of depth >= D - s, so the last stage
includes the originals; a stage advances once the rollout success on it reaches
``advance_at`` or after ``stage_iterations`` iterations. Test-time RL (TTRL, Sec. 3.3):
for one test problem, build its tree, run RL on it, answer the problem, then put the
weights back (``test_time_rl``; ``cairn ttrl``).

Generators (one protocol, ``variants(problem, n, rng) -> list[str]``, plus
``env_for(problem)`` and ``problem_of(info)``):
- ``symbolic``: for the ``integration`` env. Easier integrands by rewriting the sympy
  tree: keep one term of a sum, drop a factor of a product, set a coefficient to 1, lower
  a power, replace a compound argument ``f(u(x))`` by ``f(x)``; a variant must be smaller
  (``sympy.count_ops``) than its parent. Deterministic given the rng.
- ``llm``: the policy is asked for easier variants, one per line, at temperatures cycling
  over 0.8-1.4 (the paper's diversity device); lines that the safe parser accepts are kept.
  For real LLMs; the tiny default writes nothing parseable.

Rewards are the env's: the numerical antiderivative check (``verify_antiderivative``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import sympy as sp

from cairn.data.episode import Episode
from cairn.envs import TextEnv, make
from cairn.envs.base import StepResult
from cairn.exploration.registries import GENERATORS
from cairn.rollout.envpool.calls import GuardedEnv

if TYPE_CHECKING:
    import torch

    from cairn.policies.hf import HFPolicy

__all__ = [
    "GENERATORS",
    "Curriculum",
    "LLMVariants",
    "Node",
    "SymbolicVariants",
    "VariantGenerator",
    "build_tree",
    "make_generator",
    "test_time_rl",
]

TEMPERATURES = (0.8, 1.0, 1.2, 1.4)


class VariantGenerator(Protocol):
    def variants(self, problem: str, n: int, rng: np.random.Generator) -> list[str]: ...

    def problem_of(self, info: dict[str, Any]) -> str: ...

    def env_for(self, problem: str) -> TextEnv: ...


class _IntegrationProblems:
    """Problems are integrands of the ``integration`` env."""

    def __init__(self, max_steps: int = 1):
        self.max_steps = max_steps

    def problem_of(self, info: dict[str, Any]) -> str:
        if "integrand" not in info:
            raise ValueError("LADDER's integral generators need the integration env")
        return str(info["integrand"])

    def env_for(self, problem: str) -> TextEnv:
        return make("integration", integrand=problem, max_steps=self.max_steps)


class SymbolicVariants(_IntegrationProblems):
    """``symbolic``: easier integrands by rewriting the expression tree."""

    def variants(self, problem: str, n: int, rng: np.random.Generator) -> list[str]:
        from cairn.envs.antiderivative import parse_candidate

        expr = parse_candidate(problem)
        size = sp.count_ops(expr)
        found = {str(c): c for c in _easier(expr) if c.free_symbols and sp.count_ops(c) < size}
        found.pop(str(expr), None)
        options = sorted(found)
        out = []
        for i in rng.permutation(len(options))[: 3 * n]:  # a bounded number of checks
            if _elementary(found[options[i]]):
                out.append(options[i])
            if len(out) == n:
                break
        return sorted(out)


def _elementary(expr: sp.Expr) -> bool:
    """Whether sympy finds an elementary antiderivative (dropping a factor of a
    substitution integrand, u'(x) F(u(x)), usually leaves none)."""
    try:
        return not sp.integrate(expr, *expr.free_symbols).has(sp.Integral)
    except Exception:  # sympy may fail on odd inputs; such a variant is not kept
        return False


def _easier(expr: sp.Expr) -> list[sp.Expr]:
    """One-rewrite simplifications of ``expr`` (and of its direct arguments)."""
    x = next(iter(expr.free_symbols), sp.Symbol("x"))
    out: list[sp.Expr] = []
    if isinstance(expr, sp.Add):
        out += list(expr.args)
        out += [expr - a for a in expr.args]
    if isinstance(expr, sp.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff not in (1, -1):
            out.append(rest)
        factors = [a for a in expr.args if a.free_symbols]
        if len(factors) > 1:
            out += [coeff * f for f in factors]
    if isinstance(expr, sp.Pow) and expr.exp.is_Integer and abs(int(expr.exp)) > 1:
        out.append(expr.base ** (expr.exp - int(np.sign(int(expr.exp)))))
    if isinstance(expr, sp.Function) and len(expr.args) == 1 and expr.args[0] != x:
        out.append(expr.func(x))
    for i, a in enumerate(expr.args):  # one level down
        if isinstance(expr, sp.Add | sp.Mul) and a.free_symbols:
            for b in _easier(a)[:4]:
                args = list(expr.args)
                args[i] = b
                out.append(expr.func(*args))
    return [o for o in out if isinstance(o, sp.Expr)]


class LLMVariants(_IntegrationProblems):
    """``llm``: the policy writes easier variants (temperature cycling 0.8-1.4)."""

    PROMPT = (
        "Write {n} easier variants of the integral of f(x) = {problem}, one integrand per "
        "line, in Python syntax, each a simpler function of x.\n"
    )

    def __init__(self, policy: HFPolicy, max_new_tokens: int = 128, max_steps: int = 1):
        super().__init__(max_steps)
        self.policy, self.max_new_tokens, self.calls = policy, max_new_tokens, 0

    def variants(self, problem: str, n: int, rng: np.random.Generator) -> list[str]:
        from cairn.envs.antiderivative import parse_candidate

        temperature = TEMPERATURES[self.calls % len(TEMPERATURES)]
        self.calls += 1
        prompt = self.policy.encode(self.PROMPT.format(n=n, problem=problem))
        gen = self.policy.generate(
            [prompt], temperature=temperature, max_new_tokens=self.max_new_tokens
        )[0]
        out: list[str] = []
        for line in gen.text.splitlines():
            try:
                expr = parse_candidate(line.strip())
            except ValueError:
                continue
            text = str(expr)
            if expr.free_symbols and text != problem and text not in out:
                out.append(text)
        return out[:n]


def make_generator(
    name: str, *, policy: HFPolicy | None = None, **options: object
) -> VariantGenerator:
    """``symbolic`` or ``llm`` (which samples with ``policy``) with its keyword options."""
    return GENERATORS.build(name, options, policy=policy)


# -- the variant tree --------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    problem: str
    depth: int  # 0: an original
    parent: int  # index of the parent node, -1 for an original


def build_tree(
    generator: VariantGenerator,
    originals: Sequence[str],
    per_problem: int,
    depth: int,
    rng: np.random.Generator,
) -> list[Node]:
    """Originals, then their variants level by level (each problem appears once)."""
    nodes = [Node(p, 0, -1) for p in dict.fromkeys(originals)]
    seen = {n.problem for n in nodes}
    frontier = list(range(len(nodes)))
    for d in range(1, depth + 1):
        nxt = []
        for i in frontier:
            for v in generator.variants(nodes[i].problem, per_problem, rng):
                if v not in seen:
                    seen.add(v)
                    nodes.append(Node(v, d, i))
                    nxt.append(len(nodes) - 1)
        frontier = nxt
    return nodes


class CurriculumEnv(TextEnv):
    """Reset with seed = a node index: the env of that node's problem."""

    def __init__(self, curriculum: Curriculum):
        super().__init__()
        self.curriculum = curriculum
        self.env: TextEnv | None = None
        self.node = -1

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        node = int(seed or 0)
        # an env of its own: episodes of one problem run side by side
        if self.env is None or node != self.node:
            self.env, self.node = self.curriculum.env(node), node
        obs, info = self.env.reset(seed=0)
        self.instruction = self.env.instruction
        return obs, info

    def _step(self, action: str) -> StepResult:
        if self.env is None:  # the base class resets first; this names a broken subclass
            raise RuntimeError("a variant env stepped before its reset")
        return self.env.step(action)

    def vocabulary(self) -> list[str]:
        return []


class _Pool:
    def __init__(self, curriculum: Curriculum):
        self.curriculum, self.envs = curriculum, list[TextEnv]()

    def take(self, n: int) -> list[TextEnv]:
        while len(self.envs) < n:
            self.envs.append(CurriculumEnv(self.curriculum))
        return self.envs[:n]

    def close(self) -> None:
        self.envs = []


class Curriculum:
    """Easy-to-hard stages over a variant tree; see the module docstring."""

    def __init__(self, generator, nodes: list[Node], advance_at: float, stage_iterations: int):
        self.generator, self.nodes = generator, nodes
        self.advance_at, self.stage_iterations = advance_at, stage_iterations
        self.depth = max(n.depth for n in nodes)
        self.stage, self.stage_iter = 0, 0
        self.pool = _Pool(self)

    @classmethod
    def build(cls, generator, env_factory, originals, per_problem, depth, advance_at,
              stage_iterations, rng, problems: Sequence[str] = ()) -> Curriculum:  # fmt: skip
        if not problems:  # an env failure here names the env and the call (GuardedEnv)
            env = GuardedEnv(env_factory(), getattr(env_factory, "name", ""))
            problems = [generator.problem_of(env.reset(seed=s)[1]) for s in range(originals)]
            env.close()
        nodes = build_tree(generator, problems, per_problem, depth, rng)
        return cls(generator, nodes, advance_at, stage_iterations)

    def env(self, index: int) -> TextEnv:
        """A new env of node ``index``'s problem."""
        if not 0 <= index < len(self.nodes):
            raise ValueError(f"curriculum node {index} out of range 0..{len(self.nodes) - 1}")
        return self.generator.env_for(self.nodes[index].problem)

    def stage_nodes(self) -> list[int]:
        """Node indices trained in the current stage (depth >= D - stage)."""
        low = max(0, self.depth - self.stage)
        return [i for i, n in enumerate(self.nodes) if n.depth >= low]

    def context(self, ctx: Any, seeds: Sequence[int]) -> tuple[Any, list[int]]:
        """The rollout context on this stage's problems, and the node index of each seed."""
        nodes = self.stage_nodes()
        return replace(ctx, envs=self.pool), [nodes[int(s) % len(nodes)] for s in seeds]

    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        success = float(np.mean([e.success for e in episodes])) if episodes else 0.0
        self.stage_iter += 1
        full = self.stage >= self.depth
        if not full and (success >= self.advance_at or self.stage_iter >= self.stage_iterations):
            self.stage, self.stage_iter = self.stage + 1, 0
        return {"ladder/stage": float(self.stage), "ladder/stage_success": success}

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "stage_iter": self.stage_iter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage, self.stage_iter = state["stage"], state["stage_iter"]


# -- test-time RL ------------------------------------------------------------------------------
def test_time_rl(make_trainer: Callable[[], Any]) -> dict[str, Any]:
    """Train a fresh ``Trainer`` (its env fixed to the test problem, its variants on), then
    put the policy's weights back as they were before; returns the run's summary with
    ``weights_restored``."""
    trainer = make_trainer()
    model = trainer.policy.model
    before = copy.deepcopy(model.state_dict())
    summary = trainer.run()
    model.load_state_dict(before)
    after = model.state_dict()
    summary["weights_restored"] = all(torch_equal(before[k], after[k]) for k in before)
    return summary


def torch_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    return bool(torch.equal(a, b))
