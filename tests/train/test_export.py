"""`cairn export RUN OUT [--merge]`: what it writes loads with transformers (and peft) and
gives the run's policy's logits; the run is only read; every refusal is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cairn.cli import main
from cairn.policies import build_policy
from cairn.train.checkpoint.read import latest_checkpoint
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

pytest.importorskip("peft")

TINY = [
    "rollout.groups=2",
    "rollout.group_size=4",
    "optim.epochs=1",
    "eval.episodes=2",
    "eval.every=0",
    "eval.at_start=false",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "train.iterations=1",
]
LORA = "model.lora={r: 4, alpha: 8}"
# float32 on CPU: the same weights through the same kernels agree to rounding (~3e-7 seen)
TOL = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One-iteration runs: the tiny default (whole weights), the tiny default with LoRA,
    and LoRA on a local model folder (``model.path``: the first run, exported)."""
    root = tmp_path_factory.mktemp("export")
    Trainer(load_config(None, TINY), root / "full").run()
    Trainer(load_config(None, [*TINY, LORA]), root / "lora").run()
    assert main(["export", str(root / "full"), str(root / "base_folder")]) == 0
    path = f"model.path={root / 'base_folder'}"
    Trainer(load_config(None, [*TINY, path, LORA]), root / "path_lora").run()
    return {"full": root / "full", "lora": root / "lora", "path_lora": root / "path_lora"}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _ids(vocab: int) -> torch.Tensor:
    return (torch.arange(3, 43) * 7 % vocab).unsqueeze(0)  # (1, 40) ids of the vocabulary


@torch.no_grad()
def _run_logits(run: Path) -> torch.Tensor:
    """The run's policy's logits, the policy built as ``cairn eval`` builds it."""
    cfg = load_config(run / "config.yaml")
    model = build_policy(cfg.model, None, "", cfg.seed, latest_checkpoint(run).path).model.eval()
    return model(input_ids=_ids(model.config.vocab_size)).logits


@torch.no_grad()
def _logits(model) -> torch.Tensor:
    return model.eval()(input_ids=_ids(model.config.vocab_size)).logits


def _export(*args: str | Path) -> int:
    return main(["export", *map(str, args)])


def test_a_full_model_run_exports_a_folder_transformers_loads(runs, tmp_path):
    before = _files(runs["full"])
    out = tmp_path / "out"
    assert _export(runs["full"], out) == 0
    assert _files(runs["full"]) == before  # the run is only read
    names = set(_files(out))
    assert {"config.json", "model.safetensors", "generation_config.json"} <= names
    assert "tokenizer.json" in names and not any(n.endswith((".bin", ".pt")) for n in names)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert (_logits(model) - _run_logits(runs["full"])).abs().max() < TOL
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.pad_token_id is not None and len(tokenizer) == model.config.vocab_size


@pytest.mark.parametrize("run", ["lora", "path_lora"])
def test_a_lora_run_exports_its_adapter_with_a_loadable_base(runs, run, tmp_path):
    out = tmp_path / "adapter"
    assert _export(runs[run], out) == 0
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(_files(out))
    assert "model.safetensors" not in _files(out)  # the adapters only (the base: below)
    expected = _run_logits(runs[run])
    # transformers' own loader: it reads adapter_config.json, loads the base it names,
    # then the adapters (peft installed)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert (_logits(model) - expected).abs().max() < TOL
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    # the tiny default's base travels in OUT/base; a model.path base is named where it is
    assert Path(base) == (
        out / "base" if run == "lora" else runs["path_lora"].parent / "base_folder"
    )
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    assert (_logits(plain) - expected).abs().max() > 1e-3  # the adapters change the logits


@pytest.mark.parametrize("run", ["lora", "path_lora"])
def test_merge_folds_the_adapters_into_a_plain_model(runs, run, tmp_path):
    out = tmp_path / "merged"
    assert _export(runs[run], out, "--merge") == 0
    names = set(_files(out))
    assert "adapter_config.json" not in names and "model.safetensors" in names
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert not hasattr(model, "peft_config")
    assert not any("lora_" in name for name, _ in model.named_parameters())
    assert (_logits(model) - _run_logits(runs[run])).abs().max() < TOL


def _refused(capsys, *args: str | Path) -> str:
    assert _export(*args) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("error:") and "\n" not in out and "Traceback" not in out
    return out


def test_refusals_are_one_line_and_write_nothing(runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert "not a run folder" in _refused(capsys, tmp_path, out)
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "empty_run" / "config.yaml").write_text("seed: 0\n")
    assert "has no checkpoint" in _refused(capsys, tmp_path / "empty_run", out)
    assert "no LoRA adapters" in _refused(capsys, runs["full"], out, "--merge")
    assert "holds the run" in _refused(capsys, runs["full"], runs["full"].parent)
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "not empty (pass --force" in _refused(capsys, runs["full"], out)
    assert _files(out) == {"keep.txt": b"mine"}
    assert _export(runs["full"], out, "--force") == 0
    assert "keep.txt" not in _files(out) and "model.safetensors" in _files(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_an_empty_out_folder_is_used(runs, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert _export(runs["full"], out) == 0
    assert "model.safetensors" in _files(out)
