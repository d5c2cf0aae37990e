"""The recipes of docs/architecture.md ("Recipes"), followed from a user's package outside
src/ with the public API only: when the docs and the code disagree, these tests fail.

Nothing is parsed from the markdown; each step below quotes the recipe step it follows.
The user's package is written into a temp folder put on sys.path; its registrations are
undone afterwards, so the registry-driven tests never see them.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import cairn.advantages
import cairn.envs
from cairn._errors import ConfigError
from cairn.cli import main
from cairn.data import StepBatch
from cairn.envs.testing import check_env
from cairn.plugins import load_plugins
from cairn.train.config import load_config
from cairn.train.preflight import check_config

#: The fast settings of tests/test_plugins.py: two iterations of the tiny model.
TINY = ["train.iterations=2", "train.time_budget_s=null", "rollout.groups=2"]
TINY += ["rollout.group_size=2", "eval.episodes=2", "eval.at_start=false", "log.progress=false"]
TINY += ["optim.epochs=1", "checkpoint.every=1"]

# Recipe "Add an environment", step 1: "a `envs/base.py: TextEnv` subclass with
# `_reset(seed, options)` and `_step(action)`; info carries `anchor`, `valid`, `success`
# (at the end) and `admissible` where known. Optional: ... `vocabulary` (the tiny word
# tokenizer)".
ENV_MODULE = """
from cairn.envs import TextEnv, register

WORDS = ["even", "odd"]


class Parity(TextEnv):
    instruction = "Say whether the number is even or odd."
    example_action = "even"

    def __init__(self, limit: int = 9, max_steps: int = 2):
        super().__init__()
        self.limit, self.max_steps = limit, max_steps

    def _reset(self, seed, options):
        self.number, self.t = (seed or 0) % (self.limit + 1), 0
        return str(self.number), self._info(str(self.number), True, False)

    def _step(self, action):
        self.t += 1
        word = action.strip()
        valid = word in WORDS
        won = valid and WORDS[self.number % 2] == word
        done = won or self.t >= self.max_steps
        obs = "right" if won else ("wrong" if valid else "invalid")
        return obs, float(won), won, done and not won, self._info(obs, valid, won)

    def _info(self, anchor, valid, won):
        return {"anchor": anchor, "valid": valid, "success": won, "admissible": list(WORDS)}

    def vocabulary(self):
        return [*WORDS, *map(str, range(self.limit + 1)), "right", "wrong", "invalid"]


# Step 2: "`cairn.envs.register(...)` from your own code, no cairn file touched: a module
# named in the config's `imports`".
register(ENV_NAME, Parity)
"""

# Recipe "Add an advantage estimator", step 1: "`@register("<name>", checks={...})` on
# `fn(batch, *, option=default) -> (N,) float64` ... Use the segment primitives
# (`advantages/segments.py: normalize_in_segments`), never `view(-1, G)`"; and "from your
# own code" like an env: a module named in the config's `imports`.
ESTIMATOR_MODULE = """
import numpy as np

from cairn.advantages import NORM, register, real
from cairn.advantages.segments import normalize_in_segments


@register(ESTIMATOR_NAME, checks={"scale": real(0.0, lo_open=True), "norm": NORM})
def scaled_group_reward(batch, *, scale=2.0, norm="mean"):
    groups, index = np.unique(batch.group, return_inverse=True)
    return scale * normalize_in_segments(batch.reward, index, len(groups), norm)
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A fresh package name and its folder on sys.path; its registrations undone after."""
    name = f"cairn_recipe_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    envs, estimators = set(cairn.envs.available()), set(cairn.advantages.available())
    yield name, site
    for added in set(cairn.envs.available()) - envs:
        del cairn.envs.ENVS.entries[added]
    for added in set(cairn.advantages.available()) - estimators:
        del cairn.advantages._registry._REGISTRY[added]  # no public unregister: test-only
    for module in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[module]


def _write(site: Path, package: str, module: str, text: str, **names: str) -> str:
    header = "".join(f"{key} = {value!r}\n" for key, value in names.items())
    (site / package / f"{module}.py").write_text(header + text)
    return f"{package}.{module}"


def test_add_an_environment_from_a_users_package(package, tmp_path):
    name, site = package
    env = f"parity_{name}"
    module = _write(site, name, "envs", ENV_MODULE, ENV_NAME=env)
    assert env not in cairn.envs.available()  # nothing in cairn knows it before the import
    load_plugins([module])
    assert env in cairn.envs.available()
    # Step 3: "The contract (`cairn.envs.testing.check_env`, also for envs outside cairn)
    # ... cover the new env as soon as it is registered".
    check_env(env)
    # Step 2: "Its options default to its constructor's (`env.options` not given)".
    built = cairn.envs.make(env)
    assert (built.limit, built.max_steps) == (9, 2)
    assert cairn.envs.make(env, max_steps=4).max_steps == 4
    with pytest.raises(ValueError, match="bogus"):
        cairn.envs.make(env, bogus=1)
    # Step 2: "a module named in the config's `imports`": it trains on it.
    out = tmp_path / "runs"
    argv = ["train", "--set", f"imports=[{module}]", "--set", f"env.name={env}"]
    for item in [*TINY, f"out_dir={out}"]:
        argv += ["--set", item]
    assert main(argv) == 0
    (run,) = out.iterdir()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    saved = (run / "config.yaml").read_text()
    assert f"name: {env}" in saved and f"- {module}" in saved


def _batch() -> StepBatch:
    """Two groups of two one-step episodes: rewards 1, 0 | 3, 3."""
    return StepBatch.from_columns(
        group=[0, 0, 1, 1],
        episode=[0, 1, 2, 3],
        t=[0, 0, 0, 0],
        reward=[1.0, 0.0, 3.0, 3.0],
        anchor=["a", "a", "b", "b"],
    )


def test_add_an_estimator_from_a_users_package(package):
    name, site = package
    estimator = f"scaled_{name}"
    module = _write(site, name, "estimators", ESTIMATOR_MODULE, ESTIMATOR_NAME=estimator)
    # Step 5: "Nothing in `train/`: the trainer finds it by `advantage.name`" -- once the
    # module is imported: unknown before.
    with pytest.raises(ConfigError, match=f"unknown advantage estimator '{estimator}'"):
        load_config(None, [f"advantage.name={estimator}"])
    load_plugins([module])
    assert estimator in cairn.advantages.available()
    assert cairn.advantages.options_of(estimator) == {"scale": 2.0, "norm": "mean"}
    adv = cairn.advantages.estimate(estimator, _batch())
    assert adv.dtype == np.float64
    np.testing.assert_allclose(adv, [1.0, -1.0, 0.0, 0.0])  # 2 * (r - group mean)
    np.testing.assert_allclose(cairn.advantages.estimate(estimator, _batch(), scale=1.0), adv / 2)
    # "Unknown names, unknown options and bad option values raise ValueError saying what
    # is allowed" (cairn.advantages).
    with pytest.raises(ValueError, match=r"allowed \(with defaults\): scale=2.0, norm='mean'"):
        cairn.advantages.estimate(estimator, _batch(), gamma=0.9)
    with pytest.raises(ValueError, match=r"scale=-1.0 is not allowed; allowed: a finite number"):
        cairn.advantages.estimate(estimator, _batch(), scale=-1.0)
    # A config names it by `advantage.name`, its module in `imports`: the preflight passes
    # it, and says what is allowed for a bad option.
    sets = [f"imports=[{module}]", f"advantage.name={estimator}"]
    check_config(load_config(None, [*sets, "advantage.options={scale: 0.5}"], check=False))
    bad = load_config(None, [*sets, "advantage.options={gamma: 0.9}"], check=False)
    with pytest.raises(ConfigError, match="allowed"):
        check_config(bad)
