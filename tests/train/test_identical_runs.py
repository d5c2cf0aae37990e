"""Two identical runs write identical checkpoints (every random stream is seeded from the
run's seed, torch's global generator included), and a resume puts back what was saved."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_run import TINY_RUN

from cairn.train.checkpoint.read import Checkpoint
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

TINY = [*TINY_RUN, "train.iterations=2"]
TENSORS = ("state.safetensors", "model.safetensors")  # state.json holds the wall times


def _checkpoint(run: Path, iteration: int) -> Path:
    return run / "checkpoints" / f"iter_{iteration:06d}"


def test_two_identical_runs_write_byte_identical_checkpoints(tmp_path):
    cfg = load_config(None, TINY)
    for name in ("a", "b"):
        torch.rand(7)  # the process's own draws before a run change nothing in it
        Trainer(cfg, tmp_path / name).run()
    for iteration in (1, 2):
        for file in TENSORS:
            a = (_checkpoint(tmp_path / "a", iteration) / file).read_bytes()
            assert a == (_checkpoint(tmp_path / "b", iteration) / file).read_bytes(), file
    saved = Checkpoint(_checkpoint(tmp_path / "a", 2)).load_state()["torch_rng"]
    torch.rand(7)
    resumed = Trainer(cfg, tmp_path / "a", resume=True)
    try:  # built from the checkpoint: torch's generator is where the run saved it
        assert torch.equal(torch.get_rng_state(), saved)
    finally:
        resumed.close()
