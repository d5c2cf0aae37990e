"""A checkpoint's weights, and a LoRA checkpoint's base, come from local safetensors only:
never the network (``cairn eval`` makes no request), never a pickle."""

from __future__ import annotations

import copy
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cairn.envs import make
from cairn.policies import build_policy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.train.config import load_config

peft = pytest.importorskip("peft")

LORA = "model.lora={r: 4, alpha: 8}"


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """(env, tokenizer, base model, folder of a LoRA checkpoint of that base)."""
    from cairn.policies.lora import LoraSpec, apply_lora
    from cairn.train.checkpoint.state import TrainState
    from cairn.train.checkpoint.write import write_checkpoint

    env = make("sokoban", render="compact", max_solution=5)
    tok = local_tokenizer(env, env.instruction)
    base = build_tiny_model(tiny_config(len(tok), pad_token_id=0, eos_token_id=2), seed=0)
    adapted = apply_lora(copy.deepcopy(base), LoraSpec(r=4, alpha=8))
    run = tmp_path_factory.mktemp("lora") / "run"
    loop = TrainState(np.random.default_rng(0), np.random.default_rng(1), torch.Generator())
    loop.iteration = 1
    ckpt = write_checkpoint(run, 1, adapted, tok, loop.state_dict(wall_seconds=0.0), keep=1)
    assert (ckpt / "adapter_config.json").exists()
    return env, tok, base, ckpt


def _base_folder(tmp_path: Path, base, tok, safetensors: bool) -> Path:
    folder = tmp_path / ("base_st" if safetensors else "base_bin")
    base.save_pretrained(folder)
    tok.save_pretrained(folder)
    if not safetensors:  # the weights as a pickle, as older transformers wrote them
        torch.save(base.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    return folder


@pytest.fixture
def no_network(monkeypatch):
    """Every DNS lookup or connection is recorded and fails."""
    tried: list[str] = []

    def refuse(*args, **kwargs):
        tried.append(str(args[:2]))
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return tried


def test_a_safetensors_base_loads_the_lora_checkpoint(tmp_path, parts, no_network):
    env, tok, base, ckpt = parts
    folder = _base_folder(tmp_path, base, tok, safetensors=True)
    cfg = load_config(None, [f"model.path={folder}", LORA]).model
    policy = build_policy(cfg, env, env.instruction, 0, ckpt)
    assert hasattr(policy.model, "peft_config") and not no_network


def test_a_pickle_base_is_refused_in_one_line(tmp_path, parts):
    env, tok, base, ckpt = parts
    folder = _base_folder(tmp_path, base, tok, safetensors=False)
    assert (folder / "pytorch_model.bin").exists() and not (folder / "model.safetensors").exists()
    cfg = load_config(None, [f"model.path={folder}", LORA]).model
    # Old code torch.load-ed pytorch_model.bin (only torch's loader stood in the way).
    with pytest.raises(ValueError, match=r"cannot load the base model .* local safetensors") as e:
        build_policy(cfg, env, env.instruction, 0, ckpt)
    assert "\n" not in str(e.value)


def test_a_hub_name_base_is_never_downloaded(parts, no_network):
    env, _, _, ckpt = parts
    cfg = load_config(None, ["model.path=cairn-tests/no-such-model", LORA], check=False).model
    # Old code asked the hub for it (DNS lookups, then a traceback without network).
    with pytest.raises(ValueError, match="never downloaded nor unpickled"):
        build_policy(cfg, env, env.instruction, 0, ckpt)
    assert no_network == []


def test_cairn_eval_of_a_lora_run_with_a_hub_base_makes_no_request(
    tmp_path, parts, no_network, capsys, monkeypatch
):
    import shutil

    from cairn.cli import main

    _, _, _, ckpt = parts
    run = tmp_path / "run"
    shutil.copytree(ckpt.parent.parent, run)
    config = load_config(
        None, ["model.path=cairn-tests/no-such-model", LORA, "eval.episodes=2"], check=False
    )
    (run / "config.yaml").write_text(yaml.safe_dump(config.model_dump()))
    # offline as the user says it (HF_HUB_OFFLINE): the preflight makes no reachability probe
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["eval", str(run)]) != 0
    out = capsys.readouterr().out
    # the preflight answers first now: the hub id is not cached and the hub is off (before
    # it, the loader refused the hub base: "never downloaded nor unpickled")
    assert "not in the local Hugging Face cache" in out and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1
    assert no_network == []
