"""benchmarks/speed/threads.py: the table's arithmetic, and its dry mode end to end."""

from __future__ import annotations

import argparse

from benchload import load_bench


def _threads():
    return load_bench("speed/threads.py", "threads_bench")


def test_table_reports_medians_spreads_and_the_ratio_to_one_thread():
    rows = [
        {"threads": 1, "time/rollout": r, "time/update": 1.0, "time/iteration": r + 1.0}
        for r in (1.0, 3.0, 2.0)
    ] + [
        {"threads": 2, "time/rollout": r, "time/update": 2.0, "time/iteration": r + 2.0}
        for r in (4.0, 5.0, 4.0)
    ]
    args = argparse.Namespace(threads=[1, 2], iterations=6, repeats=3)
    text = _threads().table(rows, args, (0.5, 0.7))
    # 1 thread: rollout median 2 (1-3), iteration median 3; 2 threads: iteration 6 -> 2.00x.
    assert "| 1 | 2.00 (1.00-3.00) | 1.00 (1.00-1.00) | 3.00 (2.00-4.00) | 1.00x |" in text
    assert "| 2 | 4.00 (4.00-5.00) | 2.00 (2.00-2.00) | 6.00 (6.00-7.00) | 2.00x |" in text
    assert "load average 0.5 before and 0.7 after" in text


def test_dry_mode_times_both_arms_and_writes_nothing(tmp_path, capsys):
    assert _threads().main(["--dry", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert '"threads": 1' in out and '"threads": 2' in out and "| 2 |" in out
    assert not list(tmp_path.iterdir())
