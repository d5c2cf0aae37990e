"""Hostile input fails fast in one line, before any work, and leaves no run folder:
YAML aliases, sizes and counts past their limits, run names that are not one folder name,
verl-data's --out, a warm-up that cannot write tool calls, a closed stdout pipe."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.cli import main

TINY = ["train.iterations=1", "train.time_budget_s=null", "rollout.groups=1"]
TINY += ["rollout.group_size=2", "eval.episodes=1", "eval.at_start=false", "log.progress=false"]


def _sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


def _bomb(root: Path) -> str:
    """1 KB of YAML that expands to 9^8 (43 million) strings when aliases are followed."""
    lines = ['a0: &a0 ["xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx",'
             '"xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx"]']  # fmt: skip
    for i in range(1, 8):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("rollout: {stop: *a7}")
    path = root / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 1024
    return str(path)


def _big(root: Path) -> str:
    path = root / "big.yaml"
    path.write_text("agent:\n  instruction: '" + "x" * (2 << 20) + "'\n")  # 2 MiB
    return str(path)


def _run_folder(root: Path) -> str:
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text("name: run\n")
    return str(run)


CASES = {
    # argv -> what the one line must say
    "alias bomb file": (lambda r: ["train", _bomb(r)], "anchors and aliases"),
    "alias in --set": (lambda r: ["train", *_sets("rollout.stop=&a [1]")], "anchors and aliases"),
    "config file size": (lambda r: ["train", _big(r)], "at most 1048576"),
    "long --set string": (
        lambda r: ["train", *_sets("agent.instruction=" + "y" * 100_000)],
        "at most 65536",
    ),
    "deep nesting": (lambda r: ["train", *_sets("rollout.stop=" + "[" * 50 + "]" * 50)], "deeper"),
    "group_size": (lambda r: ["train", *_sets("rollout.group_size=100000000")], "1024"),
    "groups": (lambda r: ["train", *_sets("rollout.groups=100000000")], "4096"),
    "groups x group_size": (
        lambda r: ["train", *_sets("rollout.groups=4096", "rollout.group_size=1024")],
        "at most 65536",
    ),
    "eval episodes": (lambda r: ["train", *_sets("eval.episodes=1000000000")], "65536"),
    "cairn eval --episodes": (
        lambda r: ["eval", _run_folder(r), "--episodes", "1000000000"],
        "65536",
    ),
    "verl-data rows": (
        lambda r: [
            "verl-data",
            "sokoban",
            "--train",
            "100000000",
            "--val",
            "1",
            "--out",
            str(r / "d"),
        ],
        "at most 1000000 rows",
    ),
    "name ../../x": (lambda r: ["train", *_sets("name=../../x")], "one folder name"),
    "name absolute": (lambda r: ["train", *_sets(f"name={r}/abs")], "one folder name"),
    "name markup+newline": (
        lambda r: ["train", *_sets('name="a[red]b\\nc"')],
        "must be printable",
    ),
    "name markup": (lambda r: ["train", *_sets("name=a[bold]b")], "'[' or ']'"),
    "name empty": (lambda r: ["train", *_sets("name=''")], "must not be empty"),
    "verl-data --out a file": (
        lambda r: [
            "verl-data",
            "sokoban",
            "--train",
            "2",
            "--val",
            "1",
            "--out",
            str(_file(r)),
        ],
        "a file is there",
    ),
    "verl-data --out missing parent": (
        lambda r: [
            "verl-data",
            "sokoban",
            "--train",
            "2",
            "--val",
            "1",
            "--out",
            str(r / "no" / "such" / "d"),
        ],
        "does not exist",
    ),
    "tool_call with the word-level warm-up": (
        lambda r: [
            "train",
            *_sets(
                "warmup.enabled=true",
                "agent.action_format=tool_call",
                "rollout.restrict_to_admissible=false",
            ),
        ],
        "word-level tokenizer",
    ),
}


def _file(root: Path) -> Path:
    path = root / "taken"
    path.write_text("x")
    return path


@pytest.mark.parametrize("case", CASES)
def test_hostile_input_is_one_fast_line_and_leaves_nothing(case, tmp_path, capsys):
    make, needle = CASES[case]
    argv = make(tmp_path)
    out_dir = tmp_path / "runs"
    if argv[0] == "train":  # the tiny run's keys first, so that the case's own win
        at = 2 if len(argv) > 1 and not argv[1].startswith("--") else 1
        argv[at:at] = _sets(f"out_dir={out_dir}", *TINY)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    start = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    lines = [x for x in out.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), out
    assert needle in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert len(lines[0]) < 600  # the expanded or long input is never quoted whole
    assert seconds < 20  # before any work (the alias bomb took 40-87 s and 3.7 GB)
    assert not out_dir.exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
    assert not (tmp_path.parent / "x").exists()  # name=../../x wrote beside out_dir before


def test_the_limits_are_stated_in_config_keys(capsys):
    assert main(["config", "--keys"]) == 0
    keys = {line.split(" = ")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "at most 4096" in keys["rollout.groups"]
    assert "at most 1024" in keys["rollout.group_size"]
    assert "at most 65536" in keys["eval.episodes"]
    assert "at most 65536" in keys["warmup.demos"]
    assert "no '/'" in keys["name"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("sokoban_gigpo", True),
        ("run-1.v2", True),
        ("a b", True),  # a space is a legal folder name
        ("..", False),
        ("a/b", False),
        ("a\\b", False),
        ("x..y", False),
        ("a\tb", False),
        ("a\x1bb", False),
        ("[x]", False),
        ("n" * 129, False),
    ],
)
def test_run_names(name, ok):
    from cairn.train.limits import run_name_problem

    assert (run_name_problem(name) is None) is ok


def test_a_closed_stdout_pipe_ends_quietly(monkeypatch):
    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["config", "--keys"]) == 0  # the old code raised BrokenPipeError


def test_config_keys_into_a_closed_pipe_prints_no_traceback():
    """``| true`` exits before reading: every write meets a closed pipe (``| head`` does
    the same once it has its lines, when the output outgrows the pipe's buffer)."""
    code = "import sys; from cairn.cli import main; sys.exit(main(['config', '--keys']))"
    done = subprocess.run(
        f"{sys.executable} -c \"{code}\" | true; {sys.executable} -c \"{code}\" | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.startswith("name = ")
    assert done.stderr == ""  # the old code: a BrokenPipeError traceback
