"""Exploration hooks nest around the sampler like wrappers: before_collect in order,
after_collect in reverse, each seeing the context the episodes were sampled with; their
metrics and states reach the trainer through the one ``Exploration`` object."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cairn.data.episode import Episode
from cairn.exploration import Exploration
from cairn.exploration.config import ExplorationConfig
from cairn.exploration.hooks import Hook


@dataclass
class Ctx:  # stands in for a RolloutContext: only ``prompt`` is read here
    prompt: str


class Recorder(Hook):
    def __init__(self, name: str, calls: list[str]):
        super().__init__()
        self.name, self.calls = name, calls

    def before_collect(self, ctx: Any, seeds: Sequence[int]) -> tuple[Any, Sequence[int]]:
        self.calls.append(f"{self.name}.before({ctx.prompt}, {list(seeds)})")
        self.last[f"{self.name}/before"] = 1.0
        return replace(ctx, prompt=ctx.prompt + self.name), [s + 1 for s in seeds]

    def after_collect(self, ctx: Any, episodes: list[Episode]) -> list[Episode]:
        self.calls.append(f"{self.name}.after({ctx.prompt}, {len(episodes)})")
        self.last[f"{self.name}/after"] = 2.0
        return [*episodes, Episode(id=len(episodes), group=0, task=0)]

    def observe(self, episodes: Sequence[Episode]) -> None:
        self.calls.append(f"{self.name}.observe({len(episodes)})")

    def state_dict(self) -> dict[str, Any]:
        return {self.name: len(self.calls)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls.append(f"{self.name}.load({state[self.name]})")


class Inner:
    def __init__(self, calls: list[str]):
        self.calls = calls

    def collect(self, ctx: Any, seeds: Sequence[int], group_size: int) -> list[Episode]:
        self.calls.append(f"sample({ctx.prompt}, {list(seeds)}, {group_size})")
        return [Episode(id=0, group=0, task=seeds[0])]


def _exploration(tmp_path: Path) -> Exploration:
    return Exploration(
        ExplorationConfig(), policy=None, prompt=None, env_factory=None, run_dir=tmp_path, seed=0
    )


def test_nothing_on_leaves_the_strategy_alone(tmp_path: Path) -> None:
    exploration, inner = _exploration(tmp_path), Inner([])
    assert exploration.hooks == [] and not exploration.active
    assert exploration.wrap(inner) is inner
    assert (exploration.memory, exploration.curriculum) == (None, None)


def test_hooks_nest_like_wrappers(tmp_path: Path) -> None:
    calls: list[str] = []
    exploration = _exploration(tmp_path)
    exploration.hooks = [Recorder("a", calls), Recorder("b", calls)]
    episodes = exploration.wrap(Inner(calls)).collect(Ctx("p"), [10, 20], 4)
    # seeds pass a then b (+1 each); the sampler sees b's context; after runs b then a
    assert calls == [
        "a.before(p, [10, 20])",
        "b.before(pa, [11, 21])",
        "sample(pab, [12, 22], 4)",
        "b.after(pab, 1)",
        "a.after(pab, 2)",
    ]
    assert len(episodes) == 3  # the sampled one, and one added by each hook
    exploration.observe(episodes)
    assert calls[-2:] == ["a.observe(3)", "b.observe(3)"]
    # metrics in the order they were measured, then forgotten
    assert list(exploration.metrics()) == ["a/before", "b/before", "b/after", "a/after"]
    assert exploration.metrics() == {}


def test_states_of_all_hooks_are_saved_and_given_back(tmp_path: Path) -> None:
    calls: list[str] = []
    exploration = _exploration(tmp_path)
    exploration.hooks = [Recorder("a", calls), Recorder("b", calls)]
    calls += ["x", "y"]
    state = exploration.state_dict()
    assert list(state) == ["rng", "a", "b"] and (state["a"], state["b"]) == (2, 2)
    exploration.load_state_dict(state)
    assert calls[-2:] == ["a.load(2)", "b.load(2)"]
