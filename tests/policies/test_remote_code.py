"""No model folder's own code runs: every transformers load passes trust_remote_code=False
(no prompt on stdin), and a folder that needs code of its own is refused in one line."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.policies.remote import RemoteCodeRefused, check_no_remote_code

SRC = Path(__file__).resolve().parents[2] / "src" / "cairn"
TINY = [
    "train.iterations=1", "train.time_budget_s=null", "rollout.groups=2", "eval.episodes=2",
    "eval.every=0", "train.threads=1", "log.progress=false",
]  # fmt: skip


def _evil_folder(folder: Path, marker: Path, config: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evilmodel'\n"
    )
    return folder


AUTO_MAP = {
    "model_type": "evilmodel",
    "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"},
}


def test_a_typed_y_on_stdin_runs_no_code_from_a_model_folder(tmp_path):
    marker = tmp_path / "MARKER"
    folder = _evil_folder(tmp_path / "model", marker, AUTO_MAP)
    sets = [x for kv in [*TINY, f"out_dir={tmp_path / 'runs'}"] for x in ("--set", kv)]
    out = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "train", *sets, "--set", f"model.path={folder}"],
        input="y\ny\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # Old code: transformers asked "Do you wish to run the custom code? [y/N]" and ran it.
    assert not marker.exists()
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "auto_map" in out.stdout and "trust_remote_code=False" in out.stdout
    assert len(out.stdout.strip().splitlines()) == 1 and "[y/N]" not in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"config.json": {"model_type": "llama", "auto_map": {"AutoModel": "x.Y"}}}, "auto_map"),
        ({"config.json": {"model_type": "evilmodel"}}, "model_type 'evilmodel'"),
        (
            {"config.json": {"model_type": "llama"},
             "tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["t.Tok", None]}}},
            "tokenizer_config.json has an auto_map",
        ),
    ],
)  # fmt: skip
def test_folders_needing_their_own_code_are_refused(tmp_path, files, match):
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    with pytest.raises(RemoteCodeRefused, match=match):
        check_no_remote_code(tmp_path)


def test_an_ordinary_folder_passes(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    check_no_remote_code(tmp_path)  # raises nothing
    check_no_remote_code(tmp_path / "absent")  # a hub name or a GGUF folder: not checked here


def _loads(tree: ast.AST) -> list[ast.Call]:
    """Calls of ``X.from_pretrained`` where X is a transformers Auto class (or the GGUF
    loader's), and ``LLM(...)`` (vLLM)."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else ""
            if node.func.attr == "from_pretrained" and name.startswith("Auto"):
                calls.append(node)
    return calls


def test_every_transformers_load_passes_trust_remote_code_false():
    found = 0
    for path in SRC.rglob("*.py"):
        for call in _loads(ast.parse(path.read_text())):
            found += 1
            words = {k.arg: k.value for k in call.keywords}
            spread = [k.value for k in call.keywords if k.arg is None]
            ok = (
                isinstance(words.get("trust_remote_code"), ast.Constant)
                and words["trust_remote_code"].value is False
            ) or any(
                isinstance(v, ast.Name) and v.id in ("NO_REMOTE_CODE", "no_code") for v in spread
            )
            assert ok, (
                f"{path.relative_to(SRC)}:{call.lineno} loads without trust_remote_code=False"
            )
    assert found >= 6  # policies (4), the GGUF converter (2), the critic (1)
