"""No model folder's own code ever runs: every transformers load passes
``trust_remote_code=False`` (``NO_REMOTE_CODE``), so transformers never asks on stdin
whether to run it, and a folder that needs code of its own (an ``auto_map`` in its
config.json or tokenizer_config.json, or a ``model_type`` transformers does not ship) is
refused in one line before anything is loaded (`check_no_remote_code`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn._files import UnsafeFile, read_text

__all__ = ["NO_REMOTE_CODE", "RemoteCodeRefused", "check_no_remote_code"]

#: The keyword every ``from_pretrained`` in cairn passes.
NO_REMOTE_CODE: dict[str, Any] = {"trust_remote_code": False}
_JSON_MAX = 16 << 20  # bytes of a config.json read at most


class RemoteCodeRefused(ValueError):
    """A model folder that needs its own Python code to load (never run by cairn)."""


def _mapping(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text(path, _JSON_MAX))
    except UnsafeFile:
        raise
    except (OSError, ValueError):  # missing; or broken, which transformers' loader reports
        return {}
    return data if isinstance(data, dict) else {}


def check_no_remote_code(folder: str | Path) -> None:
    """RemoteCodeRefused when the model folder ``folder`` needs code of its own to load:
    an ``auto_map`` (config.json, tokenizer_config.json) or an unknown ``model_type``. A
    folder without a config.json (a GGUF file's, an adapter's) passes."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    config = _mapping(folder / "config.json")
    for name in ("config.json", "tokenizer_config.json"):
        data = config if name == "config.json" else _mapping(folder / name)
        auto_map = data.get("auto_map")
        if auto_map:
            shown = auto_map if isinstance(auto_map, str) else next(iter(dict(auto_map).values()))
            raise RemoteCodeRefused(
                f"model folder {folder}: its {name} has an auto_map naming code of its own "
                f"({str(shown)[:80]!r}), which cairn never runs (trust_remote_code=False); use "
                "a model whose architecture transformers ships"
            )
    model_type = config.get("model_type")
    if isinstance(model_type, str) and not _known(model_type):
        raise RemoteCodeRefused(
            f"model folder {folder}: config.json model_type {model_type[:60]!r} is not one "
            "transformers ships, and cairn never runs a folder's own code to load it "
            "(trust_remote_code=False)"
        )


def _known(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING
