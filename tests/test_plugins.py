"""User code without touching cairn: a package outside src/ (written here into a temp folder)
registers an env and a reward, through a config's ``imports`` and through an installed
package's entry points, and ``cairn train`` trains on it."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn._errors import ConfigError
from cairn.cli import main
from cairn.envs import ENVS
from cairn.plugins import load_plugins
from cairn.rewards import REWARDS
from cairn.train.config import load_config

TINY = ["train.iterations=2", "train.time_budget_s=null", "rollout.groups=2"]
TINY += ["rollout.group_size=2", "eval.episodes=2", "eval.at_start=false", "log.progress=false"]
TINY += ["optim.epochs=1", "checkpoint.every=1"]

#: A guessing game (the number is the seed mod 4) and a reward for valid guesses.
TASKS = """
from cairn.envs import TextEnv, register
from cairn.rewards import register_reward

DIGITS = ["0", "1", "2", "3"]


class Guess(TextEnv):
    instruction = "Guess the number from 0 to 3."
    example_action = "2"

    def __init__(self, max_steps: int = 3):
        super().__init__()
        self.max_steps = max_steps

    def _reset(self, seed, options):
        self.target, self.t = (seed or 0) % 4, 0
        return "guess", self._info("guess", True, False)

    def _step(self, action):
        self.t += 1
        guess = action.strip()
        valid = guess in DIGITS
        won = valid and int(guess) == self.target
        obs = "right" if won else ("wrong" if valid else "invalid")
        done = won or self.t >= self.max_steps
        return obs, float(won), won, not won and done, self._info(obs, valid, won)

    def _info(self, obs, valid, won):
        return {"anchor": obs, "valid": valid, "success": won, "admissible": list(DIGITS)}

    def vocabulary(self):
        return [*DIGITS, "guess", "right", "wrong", "invalid"]


class ValidGuess:
    name = "valid_guess"

    def __init__(self, weight: float = 0.1):
        self.weight = weight

    def __call__(self, episodes, ctx=None):
        for episode in episodes:
            for step in episode.steps:
                step.shaped[self.name] = self.weight * step.valid


def register_all(env_name, reward_name):
    register(env_name, Guess)
    register_reward(reward_name, ValidGuess)
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A fresh package name, its folder on sys.path; its registrations undone afterwards."""
    name = f"cairn_user_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    before = (set(ENVS.entries), set(REWARDS.entries))
    yield name, site
    for registry, names in zip((ENVS, REWARDS), before, strict=True):
        for added in set(registry.entries) - names:
            del registry.entries[added]
    for module in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[module]


def _train(tmp_path: Path, *sets: str) -> Path:
    out = tmp_path / "runs"
    argv = ["train"]
    for item in [*sets, *TINY, f"out_dir={out}"]:
        argv += ["--set", item]
    assert main(argv) == 0
    (run,) = out.iterdir()
    return run


def _trained_on(run: Path, env: str) -> None:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert f"name: {env}" in (run / "config.yaml").read_text()


def test_a_config_imports_a_package_that_registers_an_env_and_a_reward(package, tmp_path):
    name, site = package
    env, reward = f"guess_{name}", f"valid_{name}"
    tasks = TASKS + f"\nregister_all({env!r}, {reward!r})\n"
    (site / name / "tasks.py").write_text(tasks)
    with pytest.raises(ConfigError, match=f"unknown env '{env}'"):  # not imported: unknown
        load_config(None, [f"env.name={env}"])
    run = _train(
        tmp_path,
        f"imports=[{name}.tasks]",
        f"env.name={env}",
        f"rewards=[{{name: {reward}, options: {{weight: 0.2}}}}]",
    )
    _trained_on(run, env)
    assert f"- {name}.tasks" in (run / "config.yaml").read_text()  # eval / resume find it


def test_a_plugin_env_trains_on_env_worker_processes(package, tmp_path):
    """``rollout.workers``: the envs live in worker processes, which load the config's
    ``imports`` before building one (cairn._env_host)."""
    name, site = package
    env = f"guess_{name}"
    (site / name / "tasks.py").write_text(TASKS + f"\nregister_all({env!r}, 'valid_{name}')\n")
    workers = ["rollout.workers=2", "rollout.worker_backend=process"]
    run = _train(tmp_path, f"imports=[{name}.tasks]", f"env.name={env}", *workers)
    _trained_on(run, env)


def test_an_installed_package_registers_through_entry_points(package, tmp_path):
    name, site = package
    env, reward = f"guess_{name}", f"valid_{name}"
    plugin = f"def plugin():\n    register_all({env!r}, {reward!r})"  # a function to call
    tasks = f"{TASKS}\n\n{plugin}\n"
    (site / name / "tasks.py").write_text(tasks)
    info = site / f"{name}-0.1.dist-info"  # what pip install leaves behind
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[cairn.envs]\nguess = {name}.tasks:plugin\n")
    run = _train(tmp_path, f"env.name={env}", f"rewards=[{{name: {reward}}}]")
    _trained_on(run, env)


def test_a_module_that_cannot_be_imported_is_one_line_naming_it():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["imports=[no_such_package_here.tasks]"])
    assert "imports: cannot import 'no_such_package_here.tasks'" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_broken_entry_point_is_one_line_naming_it(package):
    name, site = package
    (site / name / "tasks.py").write_text("raise RuntimeError('boom')\n")
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[cairn.rewards]\nmine = {name}.tasks\n")
    with pytest.raises(ConfigError) as err:
        load_plugins([])
    text = str(err.value)
    assert f"entry point 'mine' = '{name}.tasks' (group cairn.rewards" in text
    assert "RuntimeError: boom" in text and "\n" not in text


def test_loading_twice_runs_a_module_once(package):
    name, site = package
    (site / name / "count.py").write_text(
        textwrap.dedent(
            """
            import builtins
            builtins.cairn_test_count = getattr(builtins, "cairn_test_count", 0) + 1
            """
        )
    )
    import builtins

    builtins.cairn_test_count = 0  # type: ignore[attr-defined]
    load_plugins([f"{name}.count"])
    load_plugins([f"{name}.count"])
    assert builtins.cairn_test_count == 1  # type: ignore[attr-defined]
    del builtins.cairn_test_count  # type: ignore[attr-defined]


def test_check_env_passes_the_users_env_and_fails_a_broken_one(package):
    """``cairn.envs.testing.check_env`` on the env the user's package registers, and on the
    same env broken (a reset that ignores its seed: another number each time): it names
    the clause."""
    from cairn.envs.testing import EnvCheckError, check_env

    name, site = package
    env = f"guess_{name}"
    broken = textwrap.dedent(
        """
        class Unseeded(Guess):
            calls = 0

            def _reset(self, seed, options):
                Unseeded.calls += 1
                return super()._reset(Unseeded.calls, options)
        """
    )
    tasks = TASKS + broken + f"\nregister_all({env!r}, 'valid_{name}')\n"
    tasks += f"register({env + '_broken'!r}, Unseeded)\n"
    (site / name / "tasks.py").write_text(tasks)
    load_plugins([f"{name}.tasks"])
    check_env(env)
    with pytest.raises(EnvCheckError, match="clause 'seeding'"):
        check_env(f"{env}_broken")
