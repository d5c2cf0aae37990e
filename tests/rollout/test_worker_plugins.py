"""Env workers load the plugins a config names (``imports``, entry points) before they
build an env, so what those modules register, and what they do on import, holds in a fresh
interpreter too (a spawned process, a Ray actor), not only in a forked worker that inherits
the driver's modules."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from cairn.envs import ENVS, register
from cairn.rollout import EnvFactory, WorkerPool
from cairn.rollout.envpool.workers import ray_available


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """(a plugin module's name, the factory of an env reporting whether it is imported)."""
    name = f"worker_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("")  # registers nothing: only its import is seen
    monkeypatch.syspath_prepend(str(tmp_path))  # a spawned worker gets the driver's sys.path
    register("plugin_probe", "rollout_helpers:PluginProbe")
    yield name, EnvFactory.of("plugin_probe", module=name)
    del ENVS.entries["plugin_probe"]


def _first_observation(factory: EnvFactory, backend: str, **kw) -> str:
    pool = WorkerPool(factory, 1, backend, **kw)
    try:
        return pool.take(1)[0].reset(seed=0)[0]
    finally:
        pool.close()


def test_a_spawned_worker_imports_the_configs_modules_before_it_builds_the_env(plugin):
    name, factory = plugin
    with_imports = replace(factory, imports=(name,))
    assert _first_observation(with_imports, "process", start_method="spawn") == "loaded"
    assert _first_observation(factory, "process", start_method="spawn") == "missing"


@pytest.mark.slow  # starts Ray
@pytest.mark.skipif(not ray_available(), reason="needs Ray: pip install 'cairn-rl[ray]'")
def test_a_ray_actor_imports_the_configs_modules_before_it_builds_the_env(plugin):
    name, factory = plugin
    assert _first_observation(replace(factory, imports=(name,)), "ray") == "loaded"
