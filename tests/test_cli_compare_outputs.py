"""`cairn compare` says when a plot was not written: it lists only the files it wrote and
exits with status 1 (old code: exit 0 after "plotting failed", listing a curves.png it never
wrote)."""

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
