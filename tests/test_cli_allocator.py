"""The cairn command's allocator (cairn.cli.allocator): which environment re-executes a model
command on mimalloc, that the new process runs on it and hands its children the old
LD_PRELOAD, and that a bad CAIRN_ALLOCATOR is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.cli import allocator, main

LIB = Path("/opt/lib/libmimalloc.so.3")
HAS_MIMALLOC = allocator.mimalloc_library() is not None


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(allocator, "mimalloc_library", lambda: LIB)
    return LIB


def test_env_preloads_the_library_with_its_options(library: Path) -> None:
    env = allocator.allocator_env({"PATH": "/bin"})
    assert env is not None
    assert env["LD_PRELOAD"] == str(library)
    assert env["MIMALLOC_ALLOW_THP"] == "0" and env["MIMALLOC_PURGE_DELAY"] == "-1"
    assert env["_CAIRN_PRIOR_LD_PRELOAD"] == ""  # nothing was preloaded before
    assert env["PATH"] == "/bin"


def test_env_keeps_the_users_preload_and_options(library: Path) -> None:
    env = allocator.allocator_env({"LD_PRELOAD": "/x/libfoo.so", "MIMALLOC_ALLOW_THP": "1"})
    assert env is not None
    assert env["LD_PRELOAD"] == f"{library}:/x/libfoo.so"
    assert env["MIMALLOC_ALLOW_THP"] == "1"  # the user's choice stands
    assert env["_CAIRN_PRIOR_LD_PRELOAD"] == "/x/libfoo.so"


@pytest.mark.parametrize(
    "environ",
    [
        {"CAIRN_ALLOCATOR": "system"},
        {"LD_PRELOAD": "/usr/lib/libmimalloc.so.2"},  # the user preloads one already
        {"_CAIRN_PRIOR_LD_PRELOAD": ""},  # the re-executed process itself
    ],
)
def test_env_changes_nothing(library: Path, environ: dict[str, str]) -> None:
    assert allocator.allocator_env(environ) is None


def test_env_without_the_library_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "mimalloc_library", lambda: None)
    assert allocator.allocator_env({}) is None


def test_a_bad_choice_is_named(library: Path) -> None:
    with pytest.raises(
        ValueError, match=r"CAIRN_ALLOCATOR must be one of mimalloc, system; got 'jemalloc'"
    ):
        allocator.allocator_env({"CAIRN_ALLOCATOR": "jemalloc"})


def test_main_says_a_bad_choice_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAIRN_ALLOCATOR", "jemalloc")
    monkeypatch.setattr(sys, "argv", ["cairn", "train", "sokoban_grpo"])
    assert main() == 2
    out = capsys.readouterr()
    said = out.out + out.err
    assert "CAIRN_ALLOCATOR must be one of mimalloc, system; got 'jemalloc'" in said
    assert "Traceback" not in said


@pytest.mark.parametrize(("prior", "after"), [("", None), ("/x/libfoo.so", "/x/libfoo.so")])
def test_settle_restores_the_prior_preload(
    monkeypatch: pytest.MonkeyPatch, prior: str, after: str | None
) -> None:
    monkeypatch.setenv("LD_PRELOAD", f"{LIB}:{prior}" if prior else str(LIB))
    monkeypatch.setenv("_CAIRN_PRIOR_LD_PRELOAD", prior)
    allocator.settle()
    assert os.environ.get("LD_PRELOAD") == after
    assert "_CAIRN_PRIOR_LD_PRELOAD" not in os.environ


def test_settle_outside_a_reexecuted_process_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/x/libfoo.so")
    monkeypatch.delenv("_CAIRN_PRIOR_LD_PRELOAD", raising=False)
    allocator.settle()
    assert os.environ["LD_PRELOAD"] == "/x/libfoo.so"


PROBE = (
    "import os, sys; from cairn.cli import allocator; "
    "allocator.reexec(['-c', sys.argv[1]]); "
    "print(allocator.current(), 'not re-executed')"
)
CHILD = (
    "import os; from cairn.cli import allocator; before = allocator.current(); allocator.settle(); "
    "print(before, repr(os.environ.get('LD_PRELOAD')))"
)


def _probe(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CAIRN_ALLOCATOR")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, CHILD], capture_output=True, text=True, timeout=60,
        env={**environ, **env}, check=True,
    )  # fmt: skip
    return out.stdout.strip()


@pytest.mark.skipif(not HAS_MIMALLOC, reason="cmeel-mimalloc is not installed (Linux x86-64)")
def test_reexec_runs_the_process_on_mimalloc_and_settles() -> None:
    assert _probe() == "mimalloc None"  # re-executed on mimalloc; children preload nothing
    assert _probe(LD_PRELOAD="") == "mimalloc None"


def test_reexec_with_system_stays_on_glibc() -> None:
    assert _probe(CAIRN_ALLOCATOR="system") == "system not re-executed"
