"""``mc_values``: VinePPO's Monte Carlo value estimates (Kazemnejad et al., arXiv 2410.01679,
Sec. 4, Eq. 5: ``V(s_t) ~= (1/K) sum_k R(tau_k)``, tau_k ~ pi(.|s_t)).

Mechanics: sample ``group_size`` episodes per task as ``group`` does, keeping the env state
before every step. Then, for each episode and each step t < ``max_valued_steps`` (25),
run ``k`` (9) continuations with the current policy from the state before step t (each
continuation copies the episode's steps before t, so the prompt history is the same, and
restores the env there), and set the step's ``value`` column to

    target="return":  V(s_t) = mean over continuations of sum_{j>=t} gamma^(j-t) r_j
    target="success": V(s_t) = fraction of continuations that succeed

where r_j is the reward the learner sees (env reward minus invalid-action penalty, as in
the ``reward`` column). Steps at or after the cap get the episode's realised value from t
(its own discounted return-to-go, or its own success), so their TD advantage is 0.
Continuations are played for every valued state of every episode together, ``parallel``
paths at a time, and are not returned: only the sampled episodes are training data. A
continuation an env fault ended is left out of its mean (all of them: the realised value).

Which target. The ``vineppo`` estimator computes ``A_t = r_t + gamma V(s_{t+1}) - V(s_t)``
from the ``reward`` column, which is an unbiased advantage only when V is the expected
return of that same reward: ``target="return"`` (the default). On envs whose reward is the
outcome alone (1 on success, else 0: countdown, search_qa with exact match) both targets
coincide, and a dead state (no successful continuation possible) has V = 0 exactly. With
step costs (sokoban: -0.1 per step, +1/-1 box on/off a target, +10 on solving) a dead
state's "return" value is the expected sum of its remaining step costs, not 0.
``target="success"`` estimates the success probability, which is 0 on a dead state and
the policy's success rate elsewhere (tests/rollout/test_mc_values.py checks both against
exact values), and then
``A_t = r_t + V(s_{t+1}) - V(s_t)`` is the env reward plus a potential-based shaping term
with potential P(success) (Ng et al. 1999), which leaves the optimal policy unchanged but
is not the advantage of the env return. ``gamma`` must match the estimator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cairn.data.episode import Episode
from cairn.rollout.branching import Forest, Path

if TYPE_CHECKING:
    from cairn.rollout.context import RolloutContext

__all__ = ["MCValueStrategy", "realised_values"]

_TARGETS = ("return", "success")


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"mc_values option {name} must be an int >= {low}, got {value!r}")
    return value


def realised_values(episode: Episode, target: str = "return", gamma: float = 1.0) -> list[float]:
    """The episode's own value from each step t (T,): discounted return-to-go or success."""
    if target == "success":
        return [float(episode.success)] * len(episode.steps)
    out, g = [0.0] * len(episode.steps), 0.0
    for t in range(len(episode.steps) - 1, -1, -1):
        g = episode.steps[t].total_reward + gamma * g
        out[t] = g
    return out


class MCValueStrategy:
    """``mc_values``: VinePPO MC value probes; see the module docstring.

    Options: ``k`` (continuations per valued state), ``max_valued_steps`` (cap per episode),
    ``target`` ("return" or "success"), ``gamma`` (discount of the "return" target),
    ``parallel`` (continuations played at once; bounds the envs held).
    """

    def __init__(
        self,
        k: int = 9,
        max_valued_steps: int = 25,
        target: str = "return",
        gamma: float = 1.0,
        parallel: int = 2048,
    ):
        self.k = _check_int("k", k, 1)
        self.max_valued_steps = _check_int("max_valued_steps", max_valued_steps, 0)
        if target not in _TARGETS:
            raise ValueError(f"mc_values option target must be one of {_TARGETS}, got {target!r}")
        self.target = target
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not 0 <= gamma <= 1:
            raise ValueError(f"mc_values option gamma must be a number in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.parallel = _check_int("parallel", parallel, 1)

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        forest = Forest(ctx, record=True)
        paths = [forest.root(g, int(s)) for g, s in enumerate(seeds) for _ in range(group_size)]
        forest.play(paths)
        self.estimate(forest, paths)
        forest.close()
        return forest.episodes(paths)

    def estimate(self, forest: Forest, paths: Sequence[Path]) -> None:
        """Fill ``value`` on every step of the finished ``paths`` (recorded by ``forest``)."""
        probes = [(p, t) for p in paths for t in range(min(p.t, self.max_valued_steps))]
        values: dict[tuple[int, int], float] = {}
        per_chunk = max(1, self.parallel // self.k)
        for i in range(0, len(probes), per_chunk):
            chunk = probes[i : i + per_chunk]
            runs = [[forest.branch(p, t, record=False) for _ in range(self.k)] for p, t in chunk]
            forest.play([c for run in runs for c in run])
            for (p, t), run in zip(chunk, runs, strict=True):
                done = [c for c in run if not c.episode.events.faulted]  # env faults: no say
                if done:
                    values[id(p), t] = sum(self._outcome(c.episode, t) for c in done) / len(done)
            forest.discard([c for run in runs for c in run])
        for p in paths:
            realised = realised_values(p.episode, self.target, self.gamma)
            for t, step in enumerate(p.episode.steps):
                step.columns["value"] = values.get((id(p), t), realised[t])

    def _outcome(self, episode: Episode, t: int) -> float:
        """What one continuation from step t says about V(s_t)."""
        if self.target == "success":
            return float(episode.success)
        return realised_values(episode, "return", self.gamma)[t]
