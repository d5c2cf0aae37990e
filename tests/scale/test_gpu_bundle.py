"""The GPU check's carried folder: built offline into a tmp folder, under 64 MiB, able to
supply a missing package from its wheels, and its driver's dry run passing on CPU from
the folder's own copy of cairn."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks" / "scale"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu") / "bundle"
    assert _load("gpu_bundle").main([str(out), "--offline", "--no-smol"]) == 0
    return out


def test_the_folder_fits_and_holds_what_the_check_needs(bundle: Path):
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    assert 0 < manifest["total_bytes"] <= 64 * 2**20
    assert manifest["total_bytes"] == sum(manifest["files"].values())
    for path in ("src/cairn/__init__.py", "src/cairn/presets/sokoban_gigpo.yaml",
                 "benchmarks/scale/gpu_check.py", "benchmarks/scale/gpu_check.sh"):  # fmt: skip
        assert (bundle / path).is_file(), path
    assert not list(bundle.rglob("__pycache__"))
    wheels = {p.name.split("-")[0].lower() for p in (bundle / "wheels").glob("*.whl")}
    assert {"pydantic", "pydantic_core", "rich", "pygments", "sympy"} <= wheels
    with zipfile.ZipFile(next((bundle / "wheels").glob("rich-*.whl"))) as z:
        assert "rich/__init__.py" in z.namelist()


def test_over_the_limit_exits_1(tmp_path: Path):
    assert _load("gpu_bundle").main([str(tmp_path / "b"), "--offline", "--no-smol",
                                     "--limit-mib", "1"]) == 1  # fmt: skip


def test_a_missing_module_is_unpacked_from_its_wheel(bundle: Path, tmp_path: Path, monkeypatch):
    check = _load("gpu_check")
    # A module this Python lacks, provided by the rich wheel: unpacked into site.
    monkeypatch.setattr(check, "NEEDED", {"cairn_absent_module": "rich", "json": "nothing"})
    added = check.ensure_packages(bundle / "wheels", tmp_path / "site")
    assert [a.split("-")[0] for a in added] == ["rich"]
    assert (tmp_path / "site" / "rich" / "__init__.py").is_file()
    monkeypatch.setattr(check, "NEEDED", {"cairn_absent_module": "no_such_dist"})
    with pytest.raises(SystemExit, match="no wheel for it"):
        check.ensure_packages(bundle / "wheels", tmp_path / "site")


def test_the_check_dry_runs_on_cpu_from_the_folder(bundle: Path, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the folder's cairn
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(bundle / "benchmarks" / "scale" / "gpu_check.py"), "--dry-run",
         "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
        env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert [g["size"] for g in result["gen"]] == ["smollm2-135m", "qwen2.5-0.5b"]
    assert all(g["gen_tokens"] == 2 * 4 and g["gen_tokens_per_s"] > 0 for g in result["gen"])
    assert all(t["train_tokens_per_s"] > 0 for t in result["train"])
    assert 0 <= result["agree"]["logp_abs_diff_mean"] < 0.05  # bf16 rounding, not a bug
    assert result["sokoban"]["iterations"][0]["steps"] > 0
    if importlib.util.find_spec("vllm") is None:
        assert result["vllm"]["skipped"].startswith("vLLM is not importable")
    assert Path(result["cairn"]).is_relative_to(bundle / "src")  # the carried copy ran
    assert "| smollm2-135m |" in (tmp_path / "out" / "gpu_check.md").read_text()
