"""Fixtures of the exploration tests: one tiny llama policy on the compact sokoban."""

from __future__ import annotations

import pytest
import torch

from cairn.envs import make
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config


@pytest.fixture(scope="module")
def sokoban():
    return make("sokoban", render="compact", max_solution=5)


@pytest.fixture(scope="module")
def policy(sokoban) -> HFPolicy:
    torch.manual_seed(0)
    tok = local_tokenizer(sokoban, sokoban.instruction)
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(config, seed=0), tok)
