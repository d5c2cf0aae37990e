"""Installed like a library: the wheel alone, used from a folder outside the repository.

The wheel is built from a copy of the sources (the repository gets no build/ or egg-info)
and installed into a fresh virtual environment that reuses this interpreter's installed
dependencies through a plain path line (the editable install's own .pth is not executed,
so the repository's src/ never lands on sys.path). An audit hook in the new environment
fails any open or listing of a path inside the repository (this interpreter's venv
excepted, where the dependencies live), so a preset, asset or template read from the
source tree instead of the package breaks the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GUARD = """
import os, sys
_REPO = os.environ["CAIRN_GUARD_REPO"]
_ALLOW = os.environ["CAIRN_GUARD_ALLOW"]

def _inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return (p == _REPO or p.startswith(_REPO + os.sep)) and not p.startswith(_ALLOW + os.sep)

def _hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(
        args[0], (str, bytes, os.PathLike)
    ) and _inside(args[0]):
        raise RuntimeError(f"reached into the repository: {event} {args[0]}")

sys.addaudithook(_hook)
"""


DOCS_PROBE = """
from importlib.resources import files
import cairn
docs = files("cairn") / "docs"
assert "cairn" in (docs / "architecture.md").read_text()
assert callable(cairn.train)
for p in [*docs.iterdir(), *(docs / "algorithms").iterdir()]:
    if p.name.endswith(".md"):
        print(p.name if p.parent.name == "docs" else "algorithms/" + p.name)
"""


def _copy_sources(dst: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dst / name)
    shutil.copytree(REPO / "src", dst / "src", ignore=skip)


def _new_venv(root: Path, wheel: Path) -> Path:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    deps = sysconfig.get_paths()["purelib"]  # a plain path line: its .pth files do not run
    (site / "zz_project_deps.pth").write_text(f"{deps}\nimport _cairn_repo_guard\n")
    (site / "_cairn_repo_guard.py").write_text(GUARD)
    return venv


def test_wheel_works_outside_the_repository(tmp_path):
    src = tmp_path / "src-copy"
    src.mkdir()
    _copy_sources(src)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(src)], check=True)
    (wheel,) = (tmp_path / "dist").glob("cairn_rl-*.whl")
    venv = _new_venv(tmp_path, wheel)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"CAIRN_GUARD_REPO": str(REPO), "CAIRN_GUARD_ALLOW": os.path.realpath(sys.prefix)}

    def cairn(*args: str) -> str:
        done = subprocess.run(
            [str(venv / "bin" / "cairn"), *args], cwd=work, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done.stdout

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import cairn; print(cairn.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(venv), where
    probe = f"open({str(REPO / 'pyproject.toml')!r})"  # the guard is live
    stray = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert stray.returncode != 0 and "reached into the repository" in stray.stderr
    # The docs (architecture, scale, one page per algorithm) ship in the package.
    docs = subprocess.run(
        [str(venv / "bin" / "python"), "-c", DOCS_PROBE],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert docs.returncode == 0, docs.stderr[-2000:]
    pages = docs.stdout.split()
    assert {"architecture.md", "scale.md", "algorithms/gigpo.md"} <= set(pages), pages
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert cairn("--version").strip() == f"cairn {version}"
    assert "sokoban_grpo" in cairn("presets")
    tiny = ["train.iterations=1", "train.time_budget_s=null", "rollout.groups=2"]
    tiny += ["rollout.group_size=2", "eval.episodes=2", "eval.at_start=false"]
    tiny += ["log.progress=false"]
    cairn("train", "sokoban_grpo", *(x for s in tiny for x in ("--set", s)))
    (run,) = (work / "runs").iterdir()
    assert run.name.startswith("sokoban_grpo-")
    assert "name: sokoban_grpo" in (run / "config.yaml").read_text()
    cairn("inspect", str(run))
    assert (run / "report.html").stat().st_size > 0
