"""A diverging run ends in one line naming the learning rate, with no traceback and its last
checkpoint intact (old code: a torch traceback "probability tensor contains inf/nan")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cairn.train.checkpoint.read import latest_checkpoint
from cairn.train.config import load_config
from cairn.train.divergence import DivergenceWatch, TrainingDiverged
from cairn.train.trainer import Trainer

TINY = [
    "train.iterations=2", "train.time_budget_s=null", "rollout.groups=2", "eval.episodes=2",
    "eval.every=0", "eval.at_start=false", "train.threads=1", "log.progress=false",
    "checkpoint.every=1",
]  # fmt: skip


def test_a_non_finite_loss_in_two_iterations_in_a_row_ends_the_run():
    watch = DivergenceWatch()
    skipped = {"actor/skipped_updates": 4.0}
    watch.after_update(skipped, 1, 0.1)
    watch.after_update({"actor/skipped_updates": 1.0, "actor/loss": 0.3}, 2, 0.1)  # one took
    watch.after_update(skipped, 3, 0.1)
    with pytest.raises(
        TrainingDiverged, match=r"iteration 4: .* 2 iterations in a row.*optim\.lr=0\.1"
    ):
        watch.after_update(skipped, 4, 0.1)


def test_sampling_from_non_finite_probabilities_is_named():
    err = RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    with pytest.raises(TrainingDiverged, match="sampling met non-finite probabilities"):
        DivergenceWatch.sampling(err, 2, 1e30)
    DivergenceWatch.sampling(RuntimeError("another error"), 2, 1e30)  # not ours: returns


def test_a_diverging_resume_keeps_the_last_checkpoint_usable(tmp_path):
    run = tmp_path / "run"
    Trainer(load_config(None, [*TINY, "train.iterations=1", f"out_dir={tmp_path}"]), run).run()
    good = latest_checkpoint(run).path
    before = (good / "model.safetensors").read_bytes()
    cfg = load_config(None, [*TINY, "optim.lr=1e30", "optim.max_grad_norm=1e30"])
    with pytest.raises(TrainingDiverged, match=r"optim\.lr=1e\+30"):
        Trainer(cfg, run, resume=True).run()
    assert latest_checkpoint(run).path == good  # the damaged weights were not checkpointed
    assert (good / "model.safetensors").read_bytes() == before
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["iteration"] == 1  # the good iteration's row is kept


def test_cli_divergence_is_one_line(tmp_path):
    sets = [*TINY, f"out_dir={tmp_path}", "optim.lr=1e30", "optim.max_grad_norm=1e30"]
    sets = [*sets, "checkpoint.every=5"]  # no check before the next sampling: it meets the nan
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "train", *[x for s in sets for x in ("--set", s)]],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    error = [line for line in out.stdout.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "diverged" in error[0] and "optim.lr=1e+30" in error[0]
