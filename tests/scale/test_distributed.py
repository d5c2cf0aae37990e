"""Data parallel: two gloo ranks on CPU make the same loss and the same update as one process
on the union of their data; the rank-scaling arithmetic; single-rank no-ops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cairn.train.distributed import Dist, agg_count

HERE = Path(__file__).parent


@pytest.mark.slow  # two torchrun ranks start torch + transformers: ~40 s on 2 shared cores
def test_two_gloo_ranks_equal_one_process(tmp_path):
    import ddp_job

    alone = ddp_job.run(tmp_path / "alone")
    out = tmp_path / "ddp.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(HERE / "ddp_job.py"), str(out), str(tmp_path / "ddp")]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = torch.load(out, weights_only=False)
    assert ddp["world"] == 2 and alone["world"] == 1
    assert ddp["tokens"] != alone["tokens"] / 2  # unequal shares: the scaling matters
    for key in ("actor/loss", "actor/grad_norm"):  # the norm of the averaged gradient
        assert ddp["metrics"][key] == pytest.approx(alone["metrics"][key], rel=1e-5), key
    for name, g in alone["grads"].items():  # the gradient step: averaged = union's
        torch.testing.assert_close(ddp["grads"][name], g, atol=1e-7, rtol=1e-4)
    # Adam's first step is lr * g / (|g| + eps), about lr * sign(g): where g is ~0, rounding
    # in the summation order can flip it, so weights are compared where |g| > 1e-6.
    for name, w in alone["weights"].items():
        sure = alone["grads"][name].abs() > 1e-6
        torch.testing.assert_close(ddp["weights"][name][sure], w[sure], atol=1e-6, rtol=0)


def test_agg_count_worked_example():
    # rows: 3 tokens, 1 token, none -> token-mean counts 4 tokens, seq-mean modes 2 rows.
    mask = torch.tensor([[1, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=torch.bool)
    assert agg_count(mask, "token-mean") == 4
    assert agg_count(mask, "seq-mean-token-mean") == 2
    with pytest.raises(ValueError, match="unknown aggregation"):
        agg_count(mask, "sum")


def test_single_rank_is_a_no_op(tiny_policy):
    d = Dist()
    assert not d.enabled and d.is_main
    assert d.shard([1, 2, 3]) == [1, 2, 3] and d.broadcast_object("x") == "x"
    assert d.loss_scale(torch.ones(2, 2, dtype=torch.bool), "token-mean") == 1.0
    metrics = {"a": 1.5, "n": 3}
    assert d.mean_metrics(metrics) == metrics and d.max_int(4) == 4 and d.sum(2.0) == 2.0
    d.sync_grads(tiny_policy.model)  # nothing to average
    assert Dist(rank=1, world=3).shard(list(range(7))) == [1, 4]


def test_from_env_without_torchrun_is_one_rank(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert Dist.from_env() == Dist()
