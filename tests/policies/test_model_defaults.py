"""A model config object that lacks a key gets the schema's default for it.

``build_policy`` and its helpers read some ``model.*`` keys with ``getattr(cfg, key,
fallback)`` (duck-typed config objects pass through them). policies sit below train in
the layers (tests/test_layers.py), so they cannot import ``ModelConfig`` to read its
defaults; these tests hold each fallback to the schema's default instead.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

import cairn.policies as policies_mod
import cairn.policies.options as options_mod
from cairn.policies import autocast_on
from cairn.train.rollout_sections import ModelConfig

POLICIES = Path(policies_mod.__file__).parent


def fallbacks(root: Path = POLICIES) -> list[tuple[str, str, object]]:
    """(file, key, fallback) of every ``getattr(cfg, "key", <constant>)`` under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "cfg"
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[2], ast.Constant)
            ):
                found.append((path.name, node.args[1].value, node.args[2].value))
    return found


def test_every_fallback_of_a_model_key_is_the_schema_default():
    found = fallbacks()
    assert "autocast" in {key for _, key, _ in found}  # the walk sees build_policy's reads
    fields = ModelConfig.model_fields
    wrong = [
        (where, key, fallback, fields[key].default)
        for where, key, fallback in found
        if key in fields and fallback != fields[key].default
    ]
    assert wrong == []


def test_the_check_reports_a_fallback_that_differs(tmp_path):
    (tmp_path / "m.py").write_text('def f(cfg):\n    return getattr(cfg, "autocast", "off")\n')
    assert fallbacks(tmp_path) == [("m.py", "autocast", "off")]


@pytest.mark.parametrize("bf16_cpu", [True, False])
@pytest.mark.parametrize("path", [None, "."])
def test_a_config_without_autocast_decides_as_the_schema_default(monkeypatch, bf16_cpu, path):
    """A pretrained model on a bf16 CPU runs under autocast whether the config says ``auto``
    or says nothing; the tiny default and a CPU without bfloat16 stay float32 either way."""
    monkeypatch.setattr(options_mod, "cpu_has_bf16", lambda: bf16_cpu)
    schema = ModelConfig.model_construct(**{**ModelConfig().model_dump(), "path": path})
    bare = SimpleNamespace(path=path, dtype="float32", device="cpu")
    assert schema.autocast == "auto"
    assert autocast_on(bare) is autocast_on(schema) is (bf16_cpu and path is not None)
