"""The typed views over third-party model objects that keep mypy clean over all of
src/cairn: saving through ``save_pretrained``, the peft surface (``as_adapted``), and the
mypy configuration itself (no module of cairn exempted)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch

from cairn.policies.lora import as_adapted, has_adapters
from cairn.policies.modelio import save_pretrained
from cairn.policies.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]


class _Saving(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def save_pretrained(self, folder: Any, **kwargs: Any) -> None:
        self.calls.append((folder, kwargs))


class _Adapted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.peft_config = {"default": object()}

    def disable_adapter(self) -> None: ...


def test_save_pretrained_calls_the_models_own_method(tmp_path: Path) -> None:
    model = _Saving()
    save_pretrained(model, tmp_path, safe_serialization=True)
    assert model.calls == [(tmp_path, {"safe_serialization": True})]


def test_save_pretrained_of_a_plain_module_names_its_type(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^Linear has no save_pretrained"):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path)


def test_as_adapted_is_the_model_itself_when_it_has_adapters() -> None:
    model = _Adapted()
    assert has_adapters(model)
    assert as_adapted(model) is model


def test_as_adapted_of_a_model_without_adapters_names_its_type() -> None:
    with pytest.raises(ValueError, match=r"^Linear has no adapters$"):
        as_adapted(torch.nn.Linear(2, 2))


def test_tiny_config_attn_implementation_none_lets_transformers_pick() -> None:
    assert tiny_config(100)._attn_implementation == "eager"
    assert tiny_config(100, attn_implementation=None)._attn_implementation != "eager"


def test_mypy_exempts_no_module_of_cairn() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["src/cairn"]
    for override in mypy.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        cairn = [m for m in modules if m == "cairn" or m.startswith("cairn.")]
        assert not cairn, f"mypy override exempts cairn modules: {cairn}"
        assert not override.get("ignore_errors"), f"mypy ignores errors in {modules}"
