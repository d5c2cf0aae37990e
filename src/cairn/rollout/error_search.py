"""``error_search``: ELPO's binary search for the first irrecoverable step (arXiv 2602.09598,
Sec. 3: error localisation by binary search with adaptive sampling; the advantage is
``cairn.advantages.elpo``, the widened clip is the loss's business).

Mechanics, per task instance (group) with the total rollout budget ``budget`` (N_total 16,
the ``group_size`` initial episodes and every probe continuation count toward it):

1. Sample ``group_size`` episodes, keeping the env state after every step and each
   response's normalised entropy H (``cairn.rollout.branching.response_entropy``).
2. Rank the failed episodes by their entropy rise ``max_{t>=1} H_t - H_root`` (H_root:
   the response to the task prompt) and localise up to ``max_failures`` (3) of them, one
   after another (a group's searches share its budget; across groups they run together).
3. Binary search over a failure of K steps: L = 0, R = K - 1. Probe m = floor((L+R)/2):
   sample X_m continuations from the state *after* step m (a branch that copies steps
   0..m and restores the env there). If any succeeds, step m did not lose the task, so
   the first irrecoverable step is later: L = m + 1; else R = m. At L = R, t_crit = L.
   This is the invariant ``t_crit in [L, R]`` with probes after step m: probing the state
   before step m (a reading of the paper's "prefix ending before step m") could not tell
   whether step m itself was the error. About ceil(log2 K) probes.
4. ``X_m = round(x_min + (x_max - x_min) * sigmoid(beta * (H_m - H_root)))``, x_min 1,
   x_max 3, beta 5, where H_m is the entropy of the response after step m's feedback
   (the episode's response at turn m+1). X_m is cut to the budget left; when no budget
   is left the search stops unresolved and t_crit = R (the steps from R on are past the
   error whichever way the remaining probes would have gone).

Output: the group's episodes and all probe continuations, as the leaves of one rollout
tree (each a complete episode; rows carry the ``path`` of the node that generated them,
``cairn.rollout.branching``), for the ``elpo`` estimator; every step gets ``after_error``
(a step column, and a loss flag that widens eps_low, see ``LossConfig``): True
on a localised failure's rows t >= t_crit, and on the rows t >= t_crit of continuations
that branched after t_crit (their prefix holds the error); False elsewhere.
``episode.meta`` of a localised failure holds ``t_crit``, ``probes`` (count),
``continuations`` and ``resolved``.

A continuation that succeeds proves its start state recoverable; a probe whose X_m
continuations all fail only suggests the state is lost, so with a weak policy the search
can stop too early (t_crit below the true step). More continuations (``x_min``/``x_max``)
trade budget for accuracy: ``benchmarks/credit/error_search.py`` measures it against the
sokoban solver's exact answer. A continuation an env fault ended counts as not successful;
an episode a fault ended is never searched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.data.episode import Episode
from cairn.rollout.branching import Forest, Path, sigmoid

if TYPE_CHECKING:
    from cairn.rollout import RolloutContext

__all__ = ["ErrorSearchStrategy", "Search", "continuations", "entropy_rise"]


def _check(name: str, value: object, low: float, integer: bool) -> None:
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:
        kind = "an int" if integer else "a number"
        raise ValueError(f"error_search option {name} must be {kind} >= {low}, got {value!r}")


def continuations(
    h_m: float, h_root: float, x_min: int = 1, x_max: int = 3, beta: float = 5.0
) -> int:
    """ELPO's adaptive sample count ``X_m``, rounded half up."""
    x = x_min + (x_max - x_min) * sigmoid(beta * (h_m - h_root))
    return math.floor(x + 0.5)


def entropy_rise(episode: Episode) -> float:
    """``max_{t>=1} H_t - H_0`` over the episode's responses (-inf for one step)."""
    h = episode.meta.get("entropy", [])
    return max((x - h[0] for x in h[1:]), default=-math.inf)


@dataclass(eq=False)
class Search:
    """One failure's binary search: ``t_crit`` in ``[lo, hi]``; probes as (m, X, success)."""

    path: Path
    lo: int
    hi: int
    probes: list[tuple[int, int, bool]] = field(default_factory=list)
    branches: list[Path] = field(default_factory=list)
    stopped: bool = False  # out of budget

    @property
    def open(self) -> bool:
        return self.lo < self.hi and not self.stopped

    @property
    def t_crit(self) -> int:
        """The first irrecoverable step (``hi`` while unresolved: the conservative end)."""
        return self.hi


class ErrorSearchStrategy:
    """``error_search``: ELPO first-error localisation; see the module docstring.

    Options: ``budget`` (N_total episodes per task, initial ones and continuations),
    ``x_min``/``x_max``/``beta`` (adaptive continuations per probe), ``max_failures``
    (failures localised per task), ``entropy_tokens`` (leading tokens whose entropy is
    measured).
    """

    def __init__(
        self,
        budget: int = 16,
        x_min: int = 1,
        x_max: int = 3,
        beta: float = 5.0,
        max_failures: int = 3,
        entropy_tokens: int = 20,
    ):
        _check("budget", budget, 1, True)
        _check("x_min", x_min, 1, True)
        _check("x_max", x_max, x_min, True)
        _check("beta", beta, 0, False)
        _check("max_failures", max_failures, 0, True)
        _check("entropy_tokens", entropy_tokens, 1, True)
        self.budget, self.x_min, self.x_max, self.beta = budget, x_min, x_max, float(beta)
        self.max_failures, self.entropy_tokens = max_failures, entropy_tokens

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        if group_size > self.budget:
            raise ValueError(
                f"error_search: group_size ({group_size}) exceeds the budget ({self.budget}) "
                "of episodes per task; raise budget or lower group_size"
            )
        forest = Forest(ctx, record=True, entropy_tokens=self.entropy_tokens)
        groups = [[forest.root(g, int(s)) for _ in range(group_size)] for g, s in enumerate(seeds)]
        forest.play([p for paths in groups for p in paths])
        queues = [self.choose(paths) for paths in groups]
        self.search(forest, queues, [self.budget - group_size] * len(groups))
        forest.close()
        episodes = forest.episodes()
        mark_crit(forest.paths, [s for q in queues for s in q])
        return episodes

    def choose(self, paths: Sequence[Path]) -> list[Search]:
        """Searches for the group's failures with the largest entropy rise (ties: order)."""
        failed = [
            p for p in paths if not p.episode.success and p.t > 0 and not p.episode.events.faulted
        ]
        failed.sort(key=lambda p: -entropy_rise(p.episode))
        return [Search(p, 0, p.t - 1) for p in failed[: self.max_failures]]

    def search(self, forest: Forest, queues: list[list[Search]], budgets: list[int]) -> None:
        """Run every group's searches, one at a time per group, all groups together.

        ``budgets[g]``: continuations group g may still sample (decremented in place).
        """
        while True:
            probes = []
            for g, queue in enumerate(queues):
                current = next((s for s in queue if s.open), None)
                if current is None:
                    continue
                m = (current.lo + current.hi) // 2
                x = min(self.x_m(current.path, m), budgets[g])
                if x == 0:
                    for s in queue:
                        s.stopped = s.stopped or s.open
                    continue
                budgets[g] -= x
                run = [forest.branch(current.path, m + 1, record=False) for _ in range(x)]
                probes.append((current, m, run))
            if not probes:
                return
            forest.play([c for _, _, run in probes for c in run])
            for s, m, run in probes:
                won = any(c.episode.success for c in run)
                s.probes.append((m, len(run), won))
                s.branches += run
                s.lo, s.hi = (m + 1, s.hi) if won else (s.lo, m)

    def x_m(self, path: Path, m: int) -> int:
        """Continuations for the probe after step m of ``path``."""
        h = path.episode.meta["entropy"]
        return continuations(h[m + 1], h[0], self.x_min, self.x_max, self.beta)


def mark_crit(paths: Sequence[Path], searches: Sequence[Search]) -> None:
    """Write ``after_error`` (column and loss flag) on every step of ``paths`` and the
    search results into ``meta``."""
    for p in paths:
        for step in p.episode.steps:
            step.columns["after_error"] = step.flags["after_error"] = False
    for s in searches:
        t_crit = s.t_crit
        s.path.episode.meta.update(
            t_crit=t_crit,
            probes=len(s.probes),
            continuations=sum(x for _, x, _ in s.probes),
            resolved=s.lo == s.hi,
        )
        holders = [s.path] + [c for c in s.branches if c.t0 > t_crit]
        for p in holders:
            for step in p.episode.steps[t_crit:]:
                step.columns["after_error"] = step.flags["after_error"] = True
