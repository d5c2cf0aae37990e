"""The report's sampling rule and the defensive reading of a run directory."""

from __future__ import annotations

import gzip
import json
import random
from fractions import Fraction

import pytest

from cairn.report.payload import CURVE_POINTS, curves
from cairn.report.rundata import Sampling, evenly_spaced, load_run, read_dump, trajectory_files
from cairn.report.synthetic import write_synthetic_run


def test_evenly_spaced_worked_examples():
    # (n-1)/(k-1) = 9/3 = 3: positions 0, 3, 6, 9 exactly.
    assert evenly_spaced(10, 4) == [0, 3, 6, 9]
    # 9/2 = 4.5: floor(4.5 + 0.5) = 5 (ties go up, not to even).
    assert evenly_spaced(10, 3) == [0, 5, 9]
    # 29/3 = 9.67: 0, floor(10.17) = 10, floor(19.83) = 19, 29.
    assert evenly_spaced(30, 4) == [0, 10, 19, 29]
    assert evenly_spaced(5, 5) == evenly_spaced(5, 9) == [0, 1, 2, 3, 4]
    assert evenly_spaced(5, 1) == [4]  # one iteration: the last (most trained)
    assert evenly_spaced(0, 3) == []


def test_evenly_spaced_matches_exact_arithmetic_on_random_sizes():
    rng = random.Random(0)
    for _ in range(500):
        n, k = rng.randint(1, 3000), rng.randint(2, 60)
        got = evenly_spaced(n, k)
        if k >= n:
            assert got == list(range(n))
            continue
        # Plain loop with exact fractions: floor(i*(n-1)/(k-1) + 1/2).
        want = [int(Fraction(i * (n - 1), k - 1) + Fraction(1, 2)) for i in range(k)]
        assert got == want
        assert got[0] == 0 and got[-1] == n - 1 and len(set(got)) == k


@pytest.mark.parametrize(("n", "k"), [(-1, 3), (4, 0)])
def test_evenly_spaced_rejects_bad_sizes(n, k):
    with pytest.raises(ValueError, match="n >= 0 and k >= 1"):
        evenly_spaced(n, k)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "3"])
def test_sampling_rejects_non_positive_integers(bad):
    with pytest.raises(ValueError, match=r"Sampling\.groups must be an integer >= 1"):
        Sampling(groups=bad)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic_run(
        tmp_path_factory.mktemp("syn") / "run",
        iterations=30,
        groups=6,
        group_size=3,
        dumped_groups=6,
    )


def test_load_run_samples_iterations_groups_and_episodes(synthetic):
    data = load_run(synthetic, Sampling(iterations=4, groups=3, episodes=2))
    assert data.dumped == list(range(1, 31))
    # Positions [0, 10, 19, 29] of iterations 1..30 (worked example above).
    assert [d.iteration for d in data.dumps] == [1, 11, 20, 30]
    for d in data.dumps:
        assert d.n_groups == 6 and d.n_episodes == 18
        ids = [g for g, _ in d.groups]
        first = (d.iteration - 1) * 6  # the generator numbers groups per iteration
        # 6 groups, 3 kept: positions floor(0.5), floor(3.0), floor(5.5) = 0, 3, 5.
        assert ids == [first, first + 3, first + 5]
        assert all(len(recs) == 2 for _, recs in d.groups)
    assert len(data.metrics) == 30 and data.evals[-1]["iteration"] == 30


def test_dump_reading_survives_truncation_and_bad_lines(tmp_path):
    folder = tmp_path / "trajectories"
    folder.mkdir()
    lines = [json.dumps({"id": i, "group": i // 2, "steps": []}) for i in range(6)]
    lines.insert(3, "{not json")
    raw = gzip.compress(("\n".join(lines) + "\n").encode())
    (folder / "iter_000001.jsonl.gz").write_bytes(raw)
    (folder / "iter_000002.jsonl.gz").write_bytes(raw[: len(raw) - 12])  # killed mid-write
    (folder / "iter_000003.tmp").write_bytes(b"partial")  # ignored: not a dump name
    assert [it for it, _ in trajectory_files(tmp_path)] == [1, 2]
    full = read_dump(folder / "iter_000001.jsonl.gz", 1, Sampling())
    assert full.n_episodes == 6 and full.n_groups == 3 and full.skipped == 1
    assert [[r["id"] for r in recs] for _, recs in full.groups] == [[0, 1], [2, 3], [4, 5]]
    cut = read_dump(folder / "iter_000002.jsonl.gz", 2, Sampling())
    assert cut.skipped >= 1 and cut.n_episodes <= 6


def test_not_a_run_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a cairn run directory"):
        load_run(tmp_path)
    with pytest.raises(ValueError, match="is not a directory"):
        load_run(tmp_path / "missing")


def test_curves_keep_at_most_the_cap_with_first_and_last():
    rows = [{"iteration": i, "episodes": 8 * i, "rollout/success": i / 5000} for i in range(5000)]
    c = curves(rows, [])
    (series,) = c["panels"][0]["series"]
    assert len(series["x"]) == CURVE_POINTS
    assert series["x"][0] == 0 and series["x"][-1] == 8 * 4999
    assert "2000 of 5000" in c["note"]


def test_a_half_written_metrics_line_is_skipped_with_a_warning(tmp_path):
    """A run killed inside the metrics append: the report and the plots still build."""
    from cairn.report.html import build_report
    from cairn.report.plots import plot_run

    run = write_synthetic_run(
        tmp_path / "run", iterations=3, groups=2, group_size=2, dumped_groups=2
    )
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 4, "rollout/succ')
    with pytest.warns(UserWarning, match=r"metrics.jsonl'?: 1 unreadable line"):
        data = load_run(run, Sampling())
    assert [m["iteration"] for m in data.metrics] == [1, 2, 3] and data.skipped == 1
    with pytest.warns(UserWarning, match="unreadable"):
        assert build_report(run).exists()
    assert plot_run(run).stat().st_size > 0
