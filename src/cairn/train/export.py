"""`cairn export RUN OUT [--merge]`: a run's trained policy as a Hugging Face folder.

The newest complete checkpoint of the run (``checkpoints/latest``, validated as ``cairn
eval`` and ``--resume`` validate it) is built into the run's policy exactly as ``cairn
eval`` builds it (``build_policy``: the run's config, seed and dtype), then written where
other tools read it:

- a run without LoRA (the tiny default, full fine-tunes): the whole model, ``config.json``,
  ``model.safetensors``, ``generation_config.json`` and the tokenizer files (with its chat
  template), which ``AutoModelForCausalLM.from_pretrained(OUT)`` loads, and so vLLM, TGI and
  llama.cpp's ``convert_hf_to_gguf.py``;
- a LoRA run: the PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``,
  tokenizer files). Its ``base_model_name_or_path`` names the base the run trained on
  (``model.path``: a hub id, or a local folder as an absolute path); the tiny default's base
  exists only inside the run (built from its seed), so it is written to ``OUT/base`` and named
  there. ``AutoModelForCausalLM.from_pretrained(OUT)`` (with peft installed) loads base and
  adapters, as does ``peft.PeftModel.from_pretrained(base, OUT)``;
- a LoRA run with ``merge``: the adapters folded into the base weights (W0 + alpha/r B A),
  written as a whole model like the first case: what an engine without LoRA support serves.

The run folder is only read. OUT is written beside itself under a temporary name and
renamed into place, so an interrupted export leaves no half-written OUT; an OUT that exists
and is not empty is refused unless ``force`` (then replaced). Each problem is one line
(``ExportError``, a ValueError).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from cairn.policies import HFPolicy
    from cairn.train.schema import Config

__all__ = ["ExportError", "Exported", "export_run"]

ADAPTER_CONFIG = "adapter_config.json"


class ExportError(ValueError):
    """A run that cannot be exported, or an OUT it may not write: one line naming why."""


@dataclass(frozen=True)
class Exported:
    """What ``export_run`` wrote: ``kind`` is ``model`` (whole weights), ``merged`` (LoRA
    folded in) or ``adapter`` (a PEFT adapter folder)."""

    out: Path
    kind: str
    checkpoint: str
    base: str | None  # the adapter's base_model_name_or_path (adapter exports only)


def export_run(run_dir: Path, out: Path, merge: bool = False, force: bool = False) -> Exported:
    """Write the newest checkpoint of ``run_dir`` to ``out`` as a Hugging Face folder
    (module docstring). Raises ExportError."""
    run_dir, out = Path(run_dir), Path(out)
    ckpt = _checkpoint(run_dir)
    lora = (ckpt / ADAPTER_CONFIG).is_file()
    if merge and not lora:
        raise ExportError(
            f"--merge: run {run_dir} has no LoRA adapters (model.lora is not set; its "
            "checkpoint holds the whole model): export it without --merge"
        )
    _check_out(out, run_dir, force)
    from cairn._errors import ConfigError
    from cairn.train.config import load_config

    try:  # the run checked its config when it started; export reads only its model keys,
        # so no env, plugin or registry is needed (the preflight is skipped)
        cfg = load_config(run_dir / "config.yaml", check=False)
    except ConfigError as err:
        raise ExportError(f"{run_dir}/config.yaml: {err}") from None
    policy = _policy(cfg, ckpt)
    tmp = out.with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        base = _write(policy, tmp, lora=lora, merge=merge, tiny=cfg.model.path is None, out=out)
        _replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kind = "adapter" if lora and not merge else ("merged" if merge else "model")
    return Exported(out=out, kind=kind, checkpoint=ckpt.name, base=base)


def _checkpoint(run_dir: Path) -> Path:
    """The newest complete checkpoint of ``run_dir`` (ExportError when there is none)."""
    if not run_dir.is_dir() or not (run_dir / "config.yaml").is_file():
        raise ExportError(f"{run_dir} is not a run folder (no config.yaml there)")
    from cairn.train.checkpoint.read import latest_checkpoint

    try:
        ckpt = latest_checkpoint(run_dir)
    except ValueError as err:  # CheckpointError: none of its checkpoints is complete
        raise ExportError(f"{run_dir}: {' '.join(str(err).split())}") from None
    if ckpt is None:
        raise ExportError(f"run {run_dir} has no checkpoint yet (nothing to export)")
    return ckpt.path


def _check_out(out: Path, run_dir: Path, force: bool) -> None:
    """Refuse an OUT that is a file, holds files (unless ``force``) or holds the run."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ExportError(f"OUT {out} exists and is not a folder")
    target, run = out.resolve(), run_dir.resolve()
    if target == run or target in run.parents:
        raise ExportError(f"OUT {out} holds the run {run_dir}: choose another folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"OUT {out} exists and is not empty (pass --force to replace it)")


def _policy(cfg: Config, ckpt: Path) -> HFPolicy:
    """The run's policy from ``ckpt``, built as ``cairn eval`` builds it. The env and the
    instruction only shape the tokenizer of a fresh tiny default; a checkpoint brings its
    own, so no env is built (none is read)."""
    from cairn.policies import build_policy

    try:
        return build_policy(cfg.model, None, "", cfg.seed, ckpt)  # type: ignore[arg-type]
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ExportError(f"cannot load checkpoint {ckpt}: {first}") from None


def _write(
    policy: HFPolicy, folder: Path, *, lora: bool, merge: bool, tiny: bool, out: Path
) -> str | None:
    """Fill ``folder``; returns the adapter's base name (adapter exports only)."""
    from cairn.policies.lora import plain_model

    model: Any = policy.model  # a peft model for a LoRA run
    tokenizer = policy.tokenizer
    if lora and not merge:
        model.save_pretrained(folder, safe_serialization=True)  # peft: the adapters only
        tokenizer.save_pretrained(folder)
        if tiny:  # the base exists only in the run: it travels with the adapters
            _save_model(plain_model(model, merge=False), tokenizer, folder / "base")
            base = str((out / "base").resolve())
        else:
            base = model.peft_config["default"].base_model_name_or_path
            base = str(Path(base).resolve()) if Path(base).is_dir() else base
        _set_base(folder / ADAPTER_CONFIG, base)
        return base
    _save_model(plain_model(model, merge=True) if lora else model, tokenizer, folder)
    return None


def _save_model(model: Any, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """A whole model folder: config, safetensors weights, generation config, tokenizer."""
    model.config.use_cache = True  # training may have switched the KV cache off
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if not (folder / "generation_config.json").is_file():
        from transformers import GenerationConfig

        GenerationConfig.from_model_config(model.config).save_pretrained(folder)


def _set_base(adapter_config: Path, base: str) -> None:
    data = json.loads(adapter_config.read_text())
    data["base_model_name_or_path"] = base
    adapter_config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _replace(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out`` (an empty or, with force, any existing folder is replaced)."""
    if out.is_dir():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
