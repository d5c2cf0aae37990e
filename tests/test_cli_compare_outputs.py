"""`cairn compare` and `cairn train` say when a plot was not written: compare lists only the
files it wrote, and both exit with status 1, the results intact (old code: exit 0 after
"plotting failed", compare listing a curves.png it never wrote)."""

from __future__ import annotations

import errno
import os

import cairn.report.plots as plots
import cairn.train.compare as compare_mod
from cairn.cli import main


def _canned(configs, seeds, out, overrides, target, jobs):
    res = {"target": 0.5, "evals": [{"episodes": 8, "eval/success": 0.5}],
           "eval_success": 0.5, "train_seconds": 1.0, "untrained_success": 0.0}  # fmt: skip
    summary = compare_mod.summarise({"a": [res]}, None)
    compare_mod.write_report(summary, out)
    return summary


def test_a_plot_that_was_not_written_is_said_and_exits_1(tmp_path, monkeypatch, capsys):
    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "curves.png"))

    monkeypatch.setattr(compare_mod, "compare", _canned)
    monkeypatch.setattr(plots, "plot_compare_dir", full)
    code = main(["compare", "sokoban_gigpo", "--seeds", "1", "--out", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 1
    assert "curves.png" not in out.split("results:")[1].splitlines()[0]
    assert "curves.png not written" in " ".join(out.split())


def test_a_complete_compare_lists_its_plot_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare_mod, "compare", _canned)
    code = main(["compare", "sokoban_gigpo", "--seeds", "1", "--out", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 0 and (tmp_path / "c" / "curves.png").is_file()
    assert "curves.png" in out.split("results:")[1].splitlines()[0]


def test_train_whose_plot_fails_says_so_in_one_line_and_exits_1(tmp_path, monkeypatch, capsys):
    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "curves.png")

    monkeypatch.setattr(plots, "plot_run", full)
    sets = ["train.iterations=1", "rollout.groups=2", "eval.episodes=2", "log.progress=false"]
    sets += ["eval.at_start=false", "train.time_budget_s=null", f"out_dir={tmp_path}"]
    code = main(["train", *[x for s in sets for x in ("--set", s)]])
    lines = capsys.readouterr().out.splitlines()
    (run,) = tmp_path.iterdir()
    assert code == 1 and (run / "summary.json").is_file()  # the run itself is complete
    assert [line for line in lines if "plotting failed" in line] == [lines[-1]]  # one line
    assert lines[-1] == (
        "plotting failed ([Errno 28] No space left on device: 'curves.png'): curves.png not "
        f"written; the run in {run} is complete (exit status 1)"
    )
