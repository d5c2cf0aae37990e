"""same_metrics.py (beside this file): two runs compared with their timings left out."""

from __future__ import annotations

import json
from pathlib import Path

import same_metrics


def _run(folder: Path, rows: list[dict], summary: dict) -> Path:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


ROW = {"iteration": 1, "adv/mean": 0.25, "time/rollout": 1.5, "rollout/tokens_per_s": 900}
SUMMARY = {"run_dir": "runs/a", "eval_success": 0.5, "wall_seconds": 10.0,
           "evals": [{"iteration": 0, "train_seconds": 0.0, "eval/success": 0.1}]}  # fmt: skip


def test_runs_that_differ_only_in_timings_and_folder_are_identical(tmp_path, capsys):
    a = _run(tmp_path / "a", [ROW], SUMMARY)
    slower = {**ROW, "time/rollout": 3.0, "rollout/tokens_per_s": 450}
    evals = [{**SUMMARY["evals"][0], "train_seconds": 2.0}]  # nested timing: left out too
    b = _run(tmp_path / "b", [slower], {**SUMMARY, "run_dir": "runs/b", "wall_seconds": 20.0,
                                         "evals": evals})  # fmt: skip
    assert same_metrics.main([str(a), str(b)]) == 0
    # row keys: iteration, adv/mean; summary keys: eval_success, evals
    assert "compared 1 rows x 2 keys, summary 2 keys" in capsys.readouterr().out


def test_a_changed_number_a_missing_key_and_a_missing_row_are_reported(tmp_path, capsys):
    a = _run(tmp_path / "a", [ROW, {**ROW, "iteration": 2}], SUMMARY)
    changed = {k: v for k, v in ROW.items() if k != "iteration"} | {"adv/mean": 0.5}
    b = _run(tmp_path / "b", [changed], {**SUMMARY, "eval_success": 0.75})
    diffs, _ = same_metrics.differences(a, b)
    assert diffs == [
        "rows: 2 vs 1",
        "row 1 adv/mean: 0.25 vs 0.5",
        "row 1 iteration: 1 vs <missing>",
        "summary eval_success: 0.5 vs 0.75",
    ]
    assert same_metrics.main([str(a), str(b)]) == 1
    assert "row 1 adv/mean: 0.25 vs 0.5" in capsys.readouterr().out
