"""Reading a run for a report is bounded: an over-long trajectory line is skipped and counted
without being held whole, and a dump that links out of the run is not read."""

from __future__ import annotations

import gzip
import json
import tracemalloc

from cairn.report import rundata
from cairn.report.rundata import Sampling, load_run, read_dump


def _dump(folder, iteration: int, long_chars: int) -> None:
    """Four episode records of two groups, with one line of ``long_chars`` characters
    (a group id and then a huge string) in the middle."""
    lines = [json.dumps({"id": i, "group": i // 2, "steps": []}) for i in range(4)]
    lines.insert(2, '{"group": 0, "text": "' + "a" * long_chars + '"}')
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"iter_{iteration:06d}.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1))


def test_an_over_long_trajectory_line_is_skipped_without_being_read_whole(tmp_path, monkeypatch):
    # The cap is 16 Mi characters; 64 Ki here keeps the test small. Old code read the
    # 8 MB line whole (cairn inspect held a 1.5 GB line in memory) and counted nothing.
    monkeypatch.setattr(rundata, "MAX_LINE_CHARS", 64 * 1024, raising=False)
    _dump(tmp_path / "trajectories", 1, 8 * 2**20)
    tracemalloc.start()
    try:
        dump = read_dump(tmp_path / "trajectories" / "iter_000001.jsonl.gz", 1, Sampling())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dump.skipped == 1 and dump.n_episodes == 4
    assert [[r["id"] for r in recs] for _, recs in dump.groups] == [[0, 1], [2, 3]]
    assert peak < 4 * 2**20  # a few pieces of 64 Ki characters, never the 8 MB line


def test_lines_at_the_cap_are_still_read(tmp_path, monkeypatch):
    monkeypatch.setattr(rundata, "MAX_LINE_CHARS", 200, raising=False)
    _dump(tmp_path / "trajectories", 1, 150)  # the long line: 172 characters with "\n"
    dump = read_dump(tmp_path / "trajectories" / "iter_000001.jsonl.gz", 1, Sampling())
    assert dump.skipped == 0 and dump.n_episodes == 5


def test_a_dump_linking_out_of_the_run_is_not_read(tmp_path):
    run, other = tmp_path / "run", tmp_path / "other"
    _dump(run / "trajectories", 1, 10)
    _dump(other / "trajectories", 7, 10)
    (run / "trajectories" / "iter_000002.jsonl.gz").symlink_to(
        other / "trajectories" / "iter_000007.jsonl.gz"
    )
    data = load_run(run)
    # Old code followed the link and showed the other run's file as iteration 2.
    assert [d.iteration for d in data.dumps] == [1] and data.skipped == 1
