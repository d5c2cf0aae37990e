"""``entropy_branch``: ARPO's entropy-based adaptive rollout (Dong et al., arXiv 2507.19849,
Sec. 3.1, "Entropy-based Adaptive Rollout").

Mechanics, per task instance (group) with the rollout budget ``M = group_size`` leaves:

1. ``initial`` (N) global samples start from the reset state (root ids 0..N-1).
2. All live paths advance one turn at a time. The response to the task prompt (turn 0)
   gives each root its initial entropy ``H_initial``; every later turn answers an env
   (tool) result, and its response's entropy ``H_t`` is measured on its first
   ``entropy_tokens`` (20) generated tokens: the mean over those tokens of the entropy of
   the distribution each was sampled from, normalised by the log of the number of tokens
   it could take (with restricted decoding, the admissible ones), so H lies in [0, 1]
   (``cairn.rollout.branching.response_entropy``; ARPO normalises a top-k entropy).
3. With ``dH = H_t - H_initial`` and ``u ~ U[0, 1)`` drawn per decision, the path
   *branches* before turn t when ``u - beta * dH <= tau`` (beta 0.2, tau 0.5) and the
   group has budget left: a new partial rollout copies the path's steps before t,
   restores the env state before t and samples its own turn t onwards (it inherits
   ``H_initial``; it is not re-branched at its own first turn).
4. When every path has ended, the remaining budget ``M - paths`` is filled with new
   global samples (new root ids), played to the end.

Every leaf is a complete episode whose rows carry the ``path`` of the node that generated
them (``cairn.rollout.branching``), which the ``arpo`` estimator's ``hard`` attribution
reads (``soft``, its default, needs only the leaves). ``episode.meta["entropy"]`` keeps
each step's H_t. With ``tau >= 1`` and ``beta = 0`` every decision branches; with
``tau < 0`` and ``beta = 0`` none does and the strategy is ``group`` sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from cairn.data.episode import Episode
from cairn.rollout.branching import Forest, Path

if TYPE_CHECKING:
    from cairn.rollout.context import RolloutContext

__all__ = ["EntropyBranchStrategy"]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"entropy_branch option {name} must be a number, got {value!r}")
    return float(value)


class EntropyBranchStrategy:
    """``entropy_branch``: ARPO entropy-triggered branching; see the module docstring.

    Options: ``initial`` (N global samples per task; None: half the budget, at least 1),
    ``beta`` (weight of the entropy rise), ``tau`` (branch threshold), ``entropy_tokens``
    (leading tokens of a response whose entropy is measured).
    """

    def __init__(
        self,
        initial: int | None = None,
        beta: float = 0.2,
        tau: float = 0.5,
        entropy_tokens: int = 20,
    ):
        if initial is not None and (
            isinstance(initial, bool) or not isinstance(initial, int) or initial < 1
        ):
            raise ValueError(f"entropy_branch option initial must be an int >= 1, got {initial!r}")
        if isinstance(entropy_tokens, bool) or not isinstance(entropy_tokens, int):
            raise ValueError(
                f"entropy_branch option entropy_tokens must be an int >= 1, got {entropy_tokens!r}"
            )
        if entropy_tokens < 1:
            raise ValueError(
                f"entropy_branch option entropy_tokens must be an int >= 1, got {entropy_tokens!r}"
            )
        self.initial = initial
        self.beta = _number("beta", beta)
        self.tau = _number("tau", tau)
        self.entropy_tokens = entropy_tokens

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        n = self.initial if self.initial is not None else max(1, group_size // 2)
        if n > group_size:
            raise ValueError(f"entropy_branch: initial ({n}) exceeds group_size ({group_size})")
        forest = Forest(ctx, record=True, entropy_tokens=self.entropy_tokens)
        groups = [[forest.root(g, int(s)) for _ in range(n)] for g, s in enumerate(seeds)]
        live = [p for paths in groups for p in paths]
        while live:
            forest.play(live, turns=1)
            for p in live:
                paths = groups[p.episode.group]
                if len(paths) < group_size and self._decide(p, ctx.generator):
                    paths.append(forest.branch(p, p.t - 1))
            live = [p for paths in groups for p in paths if not p.done]
        extra = [
            forest.root(g, int(s))
            for g, s in enumerate(seeds)
            for _ in range(group_size - len(groups[g]))
        ]
        forest.play(extra)
        forest.close()
        return forest.episodes()

    def _decide(self, path: Path, generator: torch.Generator | None) -> bool:
        """Whether ``path`` branches before the turn it has just played (``u - beta*dH <= tau``)."""
        t = path.t - 1
        if t < 1 or t <= path.t0:
            return False  # turn 0 answers the prompt; a branch's first turn was decided already
        entropy = path.episode.meta["entropy"]
        dH = entropy[t] - entropy[0]  # entropy[0]: the root's H_initial (copied into branches)
        u = float(torch.rand((), generator=generator))
        return u - self.beta * dH <= self.tau
