"""benchmarks/real/search_share.py: the search-first share and success by hops of a run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from benchload import load_bench


def _bench():
    return load_bench("real/search_share.py", "search_share_bench")


def _episode(question: str, actions: list[str], success: bool, source: int = 0) -> dict:
    steps = [{"action": a} for a in actions]
    return {"source": source, "success": success, "meta": {"question": question}, "steps": steps}


def _write(run: Path, it: int, episodes: list[dict]) -> None:
    (run / "trajectories").mkdir(parents=True, exist_ok=True)
    with gzip.open(run / "trajectories" / f"iter_{it:06d}.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(e) + "\n" for e in episodes)


def test_worked_run(tmp_path, capsys):
    bench = _bench()
    one, two = "who is the founder of Drabon ?", "what is the country of the birthplace of Kalo ?"
    _write(tmp_path, 1, [
        _episode(one, ["answer[Kalo]"], False),
        _episode(one, ["search[Drabon founded by]", "answer[Mifen]"], True),
        _episode(two, ["search[Kalo born]", "answer[Thalu]"], False),
        _episode(two, ["search [ x ]", "search[y]", "answer[z]"], True, source=1),  # a demo
    ])  # fmt: skip
    _write(tmp_path, 2, [_episode(two, ["search[Kalo born]", "search[b]", "answer[c]"], True)])
    assert bench.hops(one) == 1 and bench.hops(two) == 2
    (it1, own1), (it2, own2) = bench.rows_of(tmp_path)
    assert (it1, len(own1), it2, len(own2)) == (1, 3, 2, 1)
    s = bench.stats(own1)
    assert s["search first"] == pytest.approx(2 / 3) and s["success"] == pytest.approx(1 / 3)
    assert (s["1-hop success"], s["2-hop success"]) == (0.5, 0.0)
    assert s["actions"] == pytest.approx(5 / 3)
    assert bench.stats(own2)["1-hop success"] is None  # no one-hop question: no number
    assert bench.main([str(tmp_path), "--summary", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| 1-1 | 3 | 0.67 | 0.33 | 0.50 | 0.00 | 1.67 |"
    assert lines[3] == "| 2-2 | 1 | 1.00 | 1.00 | - | 1.00 | 3.00 |"


def test_a_folder_without_trajectories_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _bench().main([str(tmp_path)])
    assert "no trajectories" in capsys.readouterr().err


def test_held_out_files_of_cairn_eval(tmp_path, capsys):
    """``--held-out``: a row per episodes file that ``cairn eval`` keeps beside its result."""
    bench = _bench()
    one, two = "who is the founder of Drabon ?", "what is the country of the birthplace of Kalo ?"
    path = tmp_path / "iter_000088-64.episodes.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(e) + "\n" for e in [
            _episode(one, ["search[Drabon founded by]", "answer[Mifen]"], True),
            _episode(one, ["answer[Kalo]"], False),
            _episode(two, ["search[Kalo born]", "search[Thalu city in]", "answer[Ronqui]"], True),
            _episode(two, ["search[Kalo born]", "answer[Thalu]"], False),
        ])  # fmt: skip
    assert bench.main(["--held-out", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| held-out | episodes |")
    assert lines[2] == f"| {path.name} | 4 | 0.75 | 0.50 | 0.50 | 0.50 | 2.00 |"
    for argv in ([], [str(tmp_path), "--held-out", str(path)]):  # neither, or both
        with pytest.raises(SystemExit):
            bench.main(argv)
        assert "one of the two" in capsys.readouterr().err
