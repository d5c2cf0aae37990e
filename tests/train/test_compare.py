"""`cairn compare`: a folder holds one resolved config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from cairn._errors import ConfigError
from cairn.cli import main
from cairn.train.compare import compare
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics

TINY = [
    "train.iterations=1",
    "train.time_budget_s=null",
    "rollout.groups=2",
    "rollout.group_size=2",
    "optim.epochs=1",
    "eval.episodes=2",
    "eval.at_start=false",
    "train.threads=1",
]


def _variant(tmp_path: Path, lr: float) -> str:
    """The GiGPO preset with another lr, under the same name (as a sed on the file gives)."""
    data = load_config("sokoban_gigpo").model_dump()
    data["optim"]["lr"] = lr
    path = tmp_path / f"variant-{lr}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_two_configs_with_one_name_get_their_own_folders_and_rows(tmp_path):
    out = tmp_path / "cmp"
    summary = compare(["sokoban_gigpo", _variant(tmp_path, 0.01)], 1, out, TINY)
    assert list(summary["configs"]) == ["sokoban_gigpo", "sokoban_gigpo-2"]
    lrs = [
        yaml.safe_load((out / label / "seed0" / "config.yaml").read_text())["optim"]["lr"]
        for label in summary["configs"]
    ]
    assert lrs == [0.001, 0.01]
    assert "| sokoban_gigpo-2 |" in (out / "compare.md").read_text()


def test_results_are_reused_only_for_the_same_config(tmp_path):
    out = tmp_path / "cmp"
    compare(["sokoban_grpo"], 1, out, TINY)
    summary_file = out / "sokoban_grpo" / "seed0" / "summary.json"
    first = summary_file.read_bytes()
    compare(["sokoban_grpo"], 1, out, TINY)  # the same config: reused, not retrained
    assert summary_file.read_bytes() == first
    with pytest.raises(ConfigError, match=r"train\.iterations: 1 there, 2 now"):
        compare(["sokoban_grpo"], 1, out, [*TINY, "train.iterations=2"])
    assert summary_file.read_bytes() == first  # refused before touching anything


def test_a_seed_killed_before_its_first_checkpoint_restarts_clean(tmp_path):
    out = tmp_path / "cmp"
    compare(["sokoban_grpo"], 1, out, TINY)
    run = out / "sokoban_grpo" / "seed0"
    # as if killed after logging iterations but before any checkpoint or summary
    (run / "summary.json").unlink()
    for p in (run / "checkpoints").iterdir():
        p.unlink() if p.is_file() else shutil.rmtree(p)
    with (run / "metrics.jsonl").open("a") as f:
        for it in (2, 3):
            f.write(json.dumps({"iteration": it}) + "\n")
    compare(["sokoban_grpo"], 1, out, TINY)
    assert [r["iteration"] for r in read_metrics(run)] == [1]


def test_zero_seeds_is_refused(tmp_path, capsys):
    assert main(["compare", "sokoban_grpo", "--seeds", "0", "--out", str(tmp_path / "c")]) == 2
    assert "at least 1 seed" in capsys.readouterr().out
    assert not (tmp_path / "c").exists()


def test_final_success_interval_is_the_t_interval_over_seeds():
    """3 seeds: 4.303 standard errors, not the normal 1.96 (which made `cairn compare`'s
    "95% CI" an 80 % interval); one seed: none."""
    from cairn.train.compare import summarise

    def run(final: float) -> dict:
        evals = [{"episodes": 64, "eval/success": final}]
        return {"eval_success": final, "evals": evals, "target": 0.8, "train_seconds": 1.0}

    out = summarise({"a": [run(0.920), run(0.885), run(0.905)], "b": [run(0.5)]}, 0.8)
    a = out["configs"]["a"]
    assert a["final_success_mean"] == pytest.approx(0.90333, abs=1e-5)
    assert a["final_success_ci95"] == pytest.approx(4.303 * 0.017559 / 3**0.5, abs=1e-5)
    assert out["configs"]["b"]["final_success_ci95"] is None
