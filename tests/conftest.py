"""Shared fixtures: a tiny policy on the compact sokoban, built in milliseconds."""

from __future__ import annotations

import pytest
import torch

from cairn.envs import make
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config

# pytest-xdist runs one worker per core: more torch threads than that oversubscribe them.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own CAIRN_CACHE (runs it trains record themselves in the trust
    store there, never in the user's home); the embedded model's tests point it back at
    their shared folder (tests/train/test_real_presets.py)."""
    monkeypatch.setenv("CAIRN_CACHE", str(tmp_path_factory.mktemp("cairn-cache")))


@pytest.fixture(scope="session")
def compact_env():
    return make("sokoban", render="compact", max_solution=5)


@pytest.fixture(params=["llama", "qwen2"])
def tiny_policy(request, compact_env) -> HFPolicy:
    torch.manual_seed(0)
    tok = local_tokenizer(compact_env, compact_env.instruction)
    config = tiny_config(len(tok), arch=request.param, pad_token_id=0, eos_token_id=2)
    return HFPolicy(build_tiny_model(config, seed=0), tok)


@pytest.fixture
def run_stopped():
    """``run_stopped(cfg, run_dir, k)``: train as if killed right after iteration k's checkpoint.

    The config is the uninterrupted run's, so anything that depends on the budget (the
    ``optim.lr_schedule``) is the same on resume; only the stop comes early.
    """
    from cairn.train.trainer import Trainer

    def run(cfg, run_dir, k: int) -> None:
        trainer = Trainer(cfg, run_dir)
        trainer._done = lambda: trainer.iteration >= k
        trainer.run()

    return run
