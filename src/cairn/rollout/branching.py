"""Shared machinery of the branching strategies (``tree``, ``entropy_branch``, ``mc_values``,
``error_search``): live paths with their own env, prefix clones, lock-step play, tree labels.

A *path* is one episode being sampled on its own env instance. A branch copies a path's
first ``t`` steps into a new episode (the steps are copied, not regenerated: that is the
prefix sharing that saves the model's forward tokens) and restores the env state before
step t into a free env of the pool (``env.restore(snapshot)``; the base class falls back
to replaying the action prefix from the seed, which is exact for deterministic envs).

All live paths of all groups advance together, one batched ``policy.generate`` per turn
(``cairn.rollout.loop.play``), so prompts repeated across paths are prefilled once.

Tree labels (``label_paths``), in the row representation the ``treepo``, ``arpo`` and
``elpo`` estimators read: every leaf is a complete episode (t = 0..T-1), the rows of a
prefix shared by k leaves appear k times, and a row's ``path`` is the tuple of branch ids of
the tree node that generated it. Independent samples of a group take root ids ``(0,)``,
``(1,)``, ...; where a path branches before step t, its own rows from t on extend its path
by ``0`` and the j-th new branch at that point gets ``j`` (1, 2, ...). Branch points may be
created in any order (ELPO's binary search probes late steps before early ones): labels
are assigned once, after sampling. ``Episode.path`` is the path of its final step.

Env faults (``cairn.rollout.loop``): a path whose env fails in ``reset``, ``snapshot``,
``restore`` or a step ends there and gives its env up (the pool rebuilds it, it never
returns to the free list); ``Forest.episodes`` leaves it out by ``drop_faulted``'s rule.
Its branches made before the fault are complete episodes of their own and stay (a branch
does not inherit a fault that came after its prefix); a branch whose parent's ``snapshot``
failed ends with the parent's fault before its first turn.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn._env_host import EnvFault
from cairn.data.episode import Episode
from cairn.data.events import EpisodeMeta
from cairn.envs import TextEnv
from cairn.policies.hf import Generation
from cairn.rollout.envpool.calls import reset_all, restore_guarded, snapshot_guarded
from cairn.rollout.envpool.local import EnvPool
from cairn.rollout.envpool.workers import WorkerPool
from cairn.rollout.loop import TASK_INFO_KEYS, Policy, drop_faulted, end_by_fault, play
from cairn.rollout.turn import State

if TYPE_CHECKING:
    from cairn.rollout.context import RolloutContext

__all__ = [
    "EnvSlots",
    "Forest",
    "Path",
    "clone_prefix",
    "label_paths",
    "response_entropy",
    "sigmoid",
]


def sigmoid(x: float) -> float:
    """Logistic function, safe for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def clone_prefix(episode: Episode, t: int) -> Episode:
    """A new episode holding copies of ``episode``'s first ``t`` steps (id -1, not ended).

    Step objects are copied (their ``columns`` dicts too, so labelling one copy leaves the
    other alone); token lists are shared, they are never modified. The events are the
    prefix's (``EpisodeEvents.prefix``); the per-step ``entropy`` payload is cut at ``t``,
    and the parent's end-of-episode ``task_blind`` judgement is not copied.
    """
    if not 0 <= t <= len(episode.steps):
        raise ValueError(f"branch point t={t} outside 0..{len(episode.steps)} (episode length)")
    payload = {k: v[:t] if k == "entropy" else v for k, v in episode.meta.payload.items()}
    payload.pop("task_blind", None)  # judged at the end of each episode, the clone's own
    meta = EpisodeMeta(payload, events=episode.events.prefix(t))
    steps = [copy.copy(s) for s in episode.steps[:t]]
    for s in steps:
        s.columns = dict(s.columns)
    return Episode(
        id=-1, group=episode.group, task=episode.task, steps=steps, source=episode.source, meta=meta
    )


def response_entropy(gen: Generation, tokens: int, vocab: int) -> float:
    """Mean normalised entropy of the first ``tokens`` generated tokens, in [0, 1].

    Each token's entropy (of the distribution it was sampled from) is divided by the log of
    the number of tokens it could take (``len(allowed[i])`` under restricted decoding, else
    ``vocab``); forced tokens (one option) carry no choice and are skipped. 0 if none is left.
    """
    ents = (gen.entropies or [])[:tokens]
    sizes = [len(a) for a in gen.allowed[: len(ents)]] if gen.allowed else [vocab] * len(ents)
    parts = [h / math.log(k) for h, k in zip(ents, sizes, strict=True) if k > 1]
    return float(sum(parts) / len(parts)) if parts else 0.0


class EnvSlots:
    """Env instances of the pool lent to live paths; a path's env is released when it ends.

    ``acquire(seed)`` resets an env it has not lent before with ``seed``: some envs
    (frozenlake) cannot ``restore`` a snapshot before their first ``reset``.
    """

    def __init__(self, pool: EnvPool | WorkerPool):
        self.pool = pool
        self.free: list[TextEnv] = []
        self.used = 0

    def acquire(self, seed: int | None = None) -> TextEnv:
        if self.free:
            return self.free.pop()
        self.used += 1
        env = self.pool.take(self.used)[-1]
        if seed is not None and isinstance(reset_all([env], [seed])[0], EnvFault):
            env = self.pool.take(self.used)[-1]  # its pool has rebuilt it
        return env

    def release(self, env: TextEnv) -> None:
        self.free.append(env)


@dataclass(eq=False)
class Path:
    """A live (or finished) episode on its own env.

    ``parent``/``t0``/``k``: the path this one branched from, the branch point (its steps
    before ``t0`` are copies of the parent's) and its index among the parent's branches at
    ``t0`` (1, 2, ...); roots have ``parent=None``, ``t0=0`` and ``k`` = their root id.
    ``snaps[t]``: the env state before step t, recorded before each turn when ``record``.
    ``entropy`` per step is kept in ``episode.meta["entropy"]`` (see ``response_entropy``).
    """

    episode: Episode
    env: TextEnv | None
    state: State
    parent: Path | None = None
    t0: int = 0
    k: int = 0
    snaps: dict[int, object] = field(default_factory=dict)
    children: list[Path] = field(default_factory=list)
    record: bool = False

    @property
    def done(self) -> bool:
        return self.episode.terminated or self.episode.truncated

    @property
    def t(self) -> int:
        """Steps taken so far (the index of the next step)."""
        return len(self.episode.steps)

    @property
    def live_env(self) -> TextEnv:
        """The env of a path still playing (a path gives its env up when it ends)."""
        if self.env is None:
            raise RuntimeError(f"episode {self.episode.id} has no env left to play on: it ended")
        return self.env

    def anchors(self) -> list[Hashable]:
        """Anchors of the states visited before each step, then the current one."""
        info = self.state[1]
        return [s.anchor for s in self.episode.steps] + [info.get("anchor", self.state[0])]


class Forest:
    """The paths of one ``collect``: roots, branches, lock-step play and tree labels.

    ``record``: keep ``env.snapshot()`` before every step (``Path.snaps``), for strategies
    that restart from arbitrary earlier steps. ``entropy_tokens``: how many leading tokens
    of each response ``response_entropy`` averages.
    """

    def __init__(self, ctx: RolloutContext, record: bool = False, entropy_tokens: int = 20):
        self.ctx = ctx
        self.slots = EnvSlots(ctx.envs)
        self.record = record
        self.entropy_tokens = entropy_tokens
        self.paths: list[Path] = []
        self._roots: dict[int, int] = defaultdict(int)
        config = getattr(ctx.policy.model, "config", None)
        self.vocab = int(getattr(config, "vocab_size", 0) or len(ctx.policy.tokenizer))

    # -- creating paths ----------------------------------------------------------------------
    def root(self, group: int, seed: int) -> Path:
        """A new independent episode of task ``seed`` in ``group`` (next root id)."""
        env = self.slots.acquire()
        state = reset_all([env], [seed])[0]
        k = self._roots[group]
        self._roots[group] += 1
        episode = Episode(id=-1, group=group, task=seed)
        path = Path(episode, env, ("", {}), k=k, record=self.record)
        if isinstance(state, EnvFault):
            _fail(path, state)
        else:
            path.state = state
            episode.meta.update({key: state[1][key] for key in TASK_INFO_KEYS if key in state[1]})
        self.paths.append(path)
        return path

    def branch(self, parent: Path, t: int | None = None, record: bool | None = None) -> Path:
        """A new path continuing ``parent``'s first ``t`` steps (default: all it has).

        The env state comes from ``parent.snaps[t]`` when recorded, else (t = now) from a
        fresh ``parent.env.snapshot()``. ``record``: keep the branch's own states (default:
        the forest's setting; probes that are never branched again do not need them).
        """
        t = parent.t if t is None else t
        if t < parent.t0 or t > parent.t:
            raise ValueError(
                f"a path can branch within its own steps {parent.t0}..{parent.t}, got t={t} "
                "(branch the path that generated that step instead)"
            )
        if t in parent.snaps:
            snap = parent.snaps[t]
        elif t == parent.t and parent.env is not None:
            snap = self.snapshot(parent)
        elif t == parent.t:
            raise ValueError(f"cannot branch after step {t - 1}: the episode ended there")
        else:
            raise ValueError(f"no env state recorded before step {t}; use Forest(record=True)")
        env: TextEnv | None
        state: State | EnvFault
        if isinstance(snap, EnvFault):  # the parent's env failed: no state to start from
            env, state = None, snap
        else:
            env = self.slots.acquire(seed=parent.episode.task)
            state = restore_guarded(env, snap)
        k = 1 + sum(c.t0 == t for c in parent.children)
        keep = self.record if record is None else record
        child = Path(clone_prefix(parent.episode, t), env, ("", {}), parent, t, k, record=keep)
        if isinstance(state, EnvFault):
            _fail(child, state)
        else:
            child.state = state
        child.snaps = {s: v for s, v in parent.snaps.items() if s <= t}
        parent.children.append(child)
        self.paths.append(child)
        return child

    def snapshot(self, path: Path) -> object:
        """``path.env.snapshot()``; where the env fails, the ``EnvFault``, and the path ends
        there (its env given up, as after a failed step)."""
        snap = snapshot_guarded(path.env)
        if isinstance(snap, EnvFault):
            _fail(path, snap)
        return snap

    def record_snapshots(self, paths: Sequence[Path]) -> list[Path]:
        """``paths[i].snaps[t]`` = the state before its next step (where not yet recorded);
        returns the paths still live (a failed snapshot ended its path)."""
        for p in paths:
            if p.t in p.snaps:
                continue
            snap = self.snapshot(p)
            if not isinstance(snap, EnvFault):
                p.snaps[p.t] = snap
        return [p for p in paths if not p.done]

    # -- sampling ------------------------------------------------------------------------------
    def play(self, paths: Sequence[Path], turns: int | None = None) -> None:
        """Advance the live ``paths`` together, to their end or for at most ``turns`` turns."""
        live = [p for p in paths if not p.done]
        played = 0
        while live and (turns is None or played < turns):
            self._turn(live)
            live = [p for p in live if not p.done]
            played += 1

    def _turn(self, live: list[Path]) -> None:
        ctx = self.ctx
        self.record_snapshots([p for p in live if p.record])
        live = [p for p in live if not p.done]
        if not live:
            return
        recorder = _Recorder(ctx.policy)
        states = [p.state for p in live]
        episodes = [p.episode for p in live]
        envs = [p.live_env for p in live]
        play(recorder, envs, episodes, states, ctx.prompt, ctx.settings, ctx.generator, turns=1)
        for p, state, gen in zip(live, states, recorder.last, strict=True):
            p.state = state
            h = response_entropy(gen, self.entropy_tokens, self.vocab)
            p.episode.meta.setdefault("entropy", []).append(h)
            if p.episode.events.faulted:
                p.env = None  # broken: its pool rebuilds it; never lent again
            elif p.done:
                self.release(p)

    def release(self, path: Path) -> None:
        """Stop ``path`` where it is (its env goes back to the pool)."""
        if path.env is not None:
            self.slots.release(path.env)
            path.env = None

    # -- output ----------------------------------------------------------------------------------
    def label(self, paths: Sequence[Path] | None = None) -> None:
        """``label_paths`` over ``paths`` (default: every path of the forest)."""
        label_paths(self.paths if paths is None else paths)

    def episodes(self, paths: Sequence[Path] | None = None) -> list[Episode]:
        """Label ``paths`` and return their episodes with ids ``first_episode_id + i``,
        without those an env fault ended (``drop_faulted``)."""
        paths = self.paths if paths is None else paths
        self.label(paths)
        for i, p in enumerate(paths):
            p.episode.id = self.ctx.first_episode_id + i
        stats = getattr(self.ctx.envs, "faults", None)
        return drop_faulted([p.episode for p in paths], stats)

    def discard(self, paths: Sequence[Path]) -> None:
        """Forget ``paths`` (leaves no one will return, e.g. value probes), freeing memory."""
        gone = {id(p) for p in paths}
        for p in paths:
            self.release(p)
            if p.parent is not None:
                p.parent.children = [c for c in p.parent.children if id(c) not in gone]
        self.paths = [p for p in self.paths if id(p) not in gone]

    def close(self) -> None:
        """Give every env still held back to the pool (paths stopped before their end)."""
        for p in self.paths:
            self.release(p)


def _fail(path: Path, fault: EnvFault) -> None:
    """A path whose env failed before its first turn: ended, its env given up."""
    end_by_fault(path.episode, fault)
    path.env = None


def label_paths(paths: Sequence[Path]) -> None:
    """Write every step's ``columns["path"]`` and each ``Episode.path`` (module docstring).

    ``paths`` must hold every ancestor of every path in it, parents before children (the
    creation order); branches left out of it do not count as branch points.
    """
    kept = {id(p) for p in paths}
    points = {id(p): sorted({c.t0 for c in p.children if id(c) in kept}) for p in paths}
    base: dict[int, tuple[int, ...]] = {}
    for p in paths:
        if p.parent is None:
            base[id(p)] = (p.k,)
        else:
            j = bisect_left(points[id(p.parent)], p.t0)  # parent's branch points before t0
            base[id(p)] = base[id(p.parent)] + (0,) * j + (p.k,)
        own = points[id(p)]
        steps = p.episode.steps
        for s in range(p.t0, len(steps)):
            steps[s].columns["path"] = base[id(p)] + (0,) * bisect_right(own, s)
        if p.parent is not None:
            for s in range(p.t0):
                steps[s].columns["path"] = p.parent.episode.steps[s].columns["path"]
        p.episode.path = steps[-1].columns["path"] if steps else base[id(p)]


class _Recorder:
    """The policy as ``play`` sees it, keeping the generations of the last call."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.last: list[Generation] = []

    @property
    def eos_id(self) -> int | None:
        """The policy's: chat prompts splice sampled ids that end with it (``chat_ids``)."""
        return getattr(self.policy, "eos_id", None)  # test stand-ins may have none

    def encode(self, text: str) -> list[int]:
        return self.policy.encode(text)

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any) -> list[Generation]:
        self.last = self.policy.generate(prompts, **kwargs)
        return self.last
