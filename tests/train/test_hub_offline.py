"""A hub id ('org/name') as model.path with no network: read from the local Hugging Face
cache at once, or one line saying it is not cached, without waiting on network retries."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from cairn._errors import ConfigError
from cairn.train import preflight
from cairn.train.config import load_config


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache in tmp_path, the hub unreachable; the offline switches restored."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(preflight, "_hub_reachable", lambda timeout_s: False)
    return cache


def _cache(cache: Path, repo_id: str, folder: Path | None = None) -> None:
    """``repo_id`` in the hub cache's layout: refs/main -> snapshots/<rev>/ with its files."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    if folder is None:
        (snapshot / "config.json").write_text('{"model_type": "llama"}')
        return
    for f in folder.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())


def test_an_uncached_hub_id_offline_is_one_quick_line(offline_cache):
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.path=some-org/not-here"])
    assert time.perf_counter() - start < 30  # no retries (on a quiet machine: < 1 s)
    text = str(err.value)
    assert "'some-org/not-here' is not in the local Hugging Face cache" in text
    assert "huggingface-cli download some-org/not-here" in text and "\n" not in text
    assert not constants.HF_HUB_OFFLINE


def test_a_cached_hub_id_offline_switches_the_hub_off(offline_cache):
    _cache(offline_cache, "some-org/cached")
    cfg = load_config(None, ["model.path=some-org/cached"])
    assert cfg.model.path == "some-org/cached"  # the config keeps the hub id
    assert constants.HF_HUB_OFFLINE  # transformers reads the cache, never the network


def test_the_environment_variable_skips_the_probe(offline_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(preflight, "_hub_reachable", pytest.fail)  # not asked
    assert preflight.hub_cache_problem("some-org/absent") is not None


def test_a_cached_tiny_model_loads_by_hub_id_offline(offline_cache, tmp_path):
    from cairn.envs import make
    from cairn.policies import HFPolicy, build_policy, local_tokenizer, save_model_dir
    from cairn.policies.tiny import build_tiny_model, tiny_config

    env = make("sokoban", size=5, render="compact")
    tok = local_tokenizer(env, env.instruction, kind="chat")
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    folder = save_model_dir(HFPolicy(build_tiny_model(config, seed=0), tok), tmp_path / "m")
    _cache(offline_cache, "tiny-org/chat", folder)
    cfg = load_config(None, ["model.path=tiny-org/chat", "agent.prompt_style=chat"])
    start = time.perf_counter()
    policy = build_policy(cfg.model, env, env.instruction, seed=0)
    assert time.perf_counter() - start < 60  # from the cache, no network retries
    assert policy.tokenizer.pad_token_id == tok.pad_token_id
