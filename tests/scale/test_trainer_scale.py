"""The trainer on the scale-out paths: env workers give the run the in-process path gives;
LoRA with a KL penalty trains adapters only, checkpoints adapters and resumes exactly."""

from __future__ import annotations

import pytest
import torch

from cairn.train.checkpoint.read import latest_checkpoint
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer

pytest.importorskip("peft")

SMALL = [
    "rollout.groups=2",
    "rollout.group_size=3",
    "rollout.max_turns=5",
    "optim.minibatch_size=16",
    "optim.epochs=1",
    "eval.episodes=4",
    "eval.every=2",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
]


def _cfg(tmp_path, *extra):
    return load_config(None, [*SMALL, f"out_dir={tmp_path}", *extra])


def _strip(row):
    return {k: v for k, v in row.items() if not k.startswith(("time/", "eval/"))}


def test_env_workers_give_the_in_process_run(tmp_path):
    Trainer(_cfg(tmp_path, "train.iterations=2"), tmp_path / "local").run()
    cfg = _cfg(tmp_path, "train.iterations=2", "rollout.workers=2",
               "rollout.worker_backend=process")  # fmt: skip
    Trainer(cfg, tmp_path / "workers").run()
    a, b = read_metrics(tmp_path / "local"), read_metrics(tmp_path / "workers")
    assert [_strip(r) for r in a] == [_strip(r) for r in b]


LORA = ["model.lora={r: 4, alpha: 8}", "loss.kl_coef=0.05"]


def test_lora_with_kl_trains_adapters_and_checkpoints_only_them(tmp_path):
    trainer = Trainer(_cfg(tmp_path, "train.iterations=1", "eval.at_start=false", *LORA),
                      tmp_path / "run")  # fmt: skip
    base = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    trainer.run()
    after = dict(trainer.policy.model.named_parameters())
    moved = {n for n in base if not torch.equal(base[n], after[n].detach())}
    assert moved and all("lora_" in n for n in moved)
    ckpt = latest_checkpoint(tmp_path / "run").path
    assert (ckpt / "adapter_config.json").exists()  # adapters only, not the base weights
    assert not (ckpt / "model.safetensors").exists()
    assert read_metrics(tmp_path / "run")[-1]["actor/kl"] > 0  # adapters-off reference


@pytest.mark.slow  # three short runs: ~20 s
def test_lora_resume_repeats_an_uninterrupted_run(tmp_path, run_stopped):
    cfg = _cfg(tmp_path, "train.iterations=2", *LORA)
    Trainer(cfg, tmp_path / "full").run()
    run_stopped(cfg, tmp_path / "part", 1)
    Trainer(cfg, tmp_path / "part", resume=True).run()
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [_strip(r) for r in a] == [_strip(r) for r in b]
