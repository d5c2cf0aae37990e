"""Every file read from a run folder is bounded in total and a regular file of the run: a
gzip bomb stops at a byte budget, a FIFO is refused at once (never waited on), a config.yaml
linking out of the run is not read, each ending in one line."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from cairn._files import UnsafeFile, read_text
from cairn.data import rundir
from cairn.report import rundata
from cairn.report.rundata import Sampling, load_run


def _run_folder(path: Path) -> Path:
    (path / "trajectories").mkdir(parents=True)
    (path / "config.yaml").write_text("seed: 0\n")
    (path / "metrics.jsonl").write_text(json.dumps({"iteration": 1}) + "\n")
    return path


def _bomb(path: Path, lines: int, line_mib: int) -> None:
    """``lines`` episode records of ``line_mib`` MiB each (distinct groups), gzip-streamed."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    pad = "a" * (line_mib * 2**20)
    with path.open("wb") as f:
        for i in range(lines):
            line = '{"group": ' + str(i) + ', "text": "' + pad + '"}\n'
            f.write(comp.compress(line.encode()))
        f.write(comp.flush())


def _with_timeout(fn, seconds: float = 10.0):
    """``fn()`` in a thread; fails (instead of hanging the suite) if it blocks."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed back to the test
            box["error"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_gzip_bomb_is_read_within_a_byte_budget(tmp_path, monkeypatch):
    # Old code kept every line of a dump: 1,535 lines of 4 MiB reached 4.6 GB. Budgets
    # shrunk here so the test runs in a second: 40 lines of 1 MiB, 8 MiB kept at most.
    monkeypatch.setattr(rundata, "MAX_KEPT_BYTES", 8 * 2**20)
    run = _run_folder(tmp_path / "run")
    _bomb(run / "trajectories" / "iter_000001.jsonl.gz", 40, 1)
    data = load_run(run, Sampling(groups=40, episodes=1))
    kept = sum(len(r["text"]) for d in data.dumps for _, recs in d.groups for r in recs)
    assert kept <= 8 * 2**20 and data.dumps[0].n_episodes == 40
    assert data.skipped >= 32  # the lines past the budget, counted


def test_reading_a_dump_stops_at_the_decompressed_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(rundata, "MAX_DUMP_CHARS", 3 * 2**20)
    run = _run_folder(tmp_path / "run")
    _bomb(run / "trajectories" / "iter_000001.jsonl.gz", 10, 1)
    dump = load_run(run).dumps[0]
    assert dump.n_episodes <= 3 and dump.skipped >= 1


@pytest.mark.slow
def test_inspect_on_a_gzip_bomb_stays_under_a_gigabyte(tmp_path):
    run = _run_folder(tmp_path / "run")
    _bomb(run / "trajectories" / "iter_000002.jsonl.gz", 600, 4)  # 2.4 GB decompressed
    code = (
        "import resource, sys; from cairn.cli import main; rc = main(sys.argv[1:]); "
        "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "inspect", str(run), "--out", str(tmp_path / "r.html")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    peak_kb = int(out.stdout.split("peak")[-1])
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert peak_kb < 2**20  # under 1 GB


@pytest.mark.parametrize("name", ["config.yaml", "metrics.jsonl", "summary.json"])
def test_a_fifo_in_a_run_folder_is_refused_at_once(tmp_path, name):
    run = _run_folder(tmp_path / "run")
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    with pytest.raises(UnsafeFile, match="a FIFO, not a regular file"):
        _with_timeout(lambda: load_run(run))  # old code blocked forever in open()


def test_a_fifo_metrics_file_never_hangs_a_resume_read(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    with pytest.raises(UnsafeFile, match="FIFO"):
        _with_timeout(lambda: rundir.keep_metrics(run, 1))


def test_a_config_linking_out_of_the_run_is_not_read(tmp_path):
    run = _run_folder(tmp_path / "run")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(secret)
    with pytest.raises(UnsafeFile, match="symbolic link leading out of"):
        load_run(run)  # old code put the file's first line into the report


def test_a_link_inside_the_run_is_read(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "saved.yaml").write_text("seed: 3\n")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(run / "saved.yaml")
    assert rundir.read_config(run) == {"seed": 3}


def test_devices_and_oversized_files_are_refused(tmp_path):
    with pytest.raises(UnsafeFile, match="character device"):
        read_text("/dev/zero", 10)
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnsafeFile, match="more than 100 bytes"):
        read_text(big, 100)


@pytest.mark.parametrize("name", ["metrics.jsonl"])
def test_cli_inspect_on_a_fifo_ends_in_one_line(tmp_path, name):
    run = _run_folder(tmp_path / "run")
    (run / name).unlink()
    os.mkfifo(run / name)
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "inspect", str(run)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "FIFO, not a regular file" in out.stdout and len(out.stdout.strip().splitlines()) == 1


def test_a_gz_dump_that_is_a_fifo_is_skipped(tmp_path):
    run = _run_folder(tmp_path / "run")
    os.mkfifo(run / "trajectories" / "iter_000001.jsonl.gz")
    plain = run / "trajectories" / "iter_000002.jsonl.gz"
    plain.write_bytes(gzip.compress(b'{"group": 0}\n'))
    data = _with_timeout(lambda: load_run(run))
    assert [d.iteration for d in data.dumps] == [2]


@pytest.mark.parametrize("name", ["metrics.jsonl"])
def test_cli_resume_with_a_fifo_in_the_run_ends_in_one_line(tmp_path, name):
    run = _run_folder(tmp_path / "run")
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "train", "--resume", str(run)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr  # old code: blocked forever
    assert "FIFO, not a regular file" in out.stdout and len(out.stdout.strip().splitlines()) == 1


def test_cli_eval_of_a_run_whose_config_links_out_is_refused(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    (tmp_path / "elsewhere.yaml").write_text("seed: 0\n")
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "eval", str(run)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "symbolic link leading out of" in out.stdout
