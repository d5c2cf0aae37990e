"""The format warm-up stage and the free-text preset end to end."""

from __future__ import annotations

import json

import pytest
import torch

from cairn._errors import ConfigError
from cairn.agent import PromptBuilder, parse_action
from cairn.envs import make
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import RolloutSettings, rollout, tasks_for_groups, turn_stats
from cairn.train.config import load_config
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer
from cairn.train.warmup import demonstrations, supervised_passes, supervised_warmup, think_text

DEMO = {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5}
SETTINGS = RolloutSettings(
    max_new_tokens=24, restrict_to_admissible=False, action_format="tagged", max_turns=8
)


@pytest.fixture
def chat_policy():
    env = make("sokoban", **DEMO)
    tok = local_tokenizer(env, env.instruction, kind="chat", vocab_size=384)
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(config, seed=0), tok)


def _prompt(policy) -> PromptBuilder:
    return PromptBuilder(history=2, chat_template=policy.tokenizer, style="chat")


def test_think_text_copies_the_offset_words():
    obs = "pu:wall pd:free r+2 c+1 tr+0 tc-1 bu:wall"
    assert think_text(obs) == "r+2 c+1 tr+0 tc-1" and think_text(obs, "none") == ""


def test_demonstrations_are_solver_plans_in_the_rollout_prompt_format(chat_policy):
    env = make("sokoban", **DEMO)
    episodes = demonstrations(env, [3, 4], chat_policy, _prompt(chat_policy), SETTINGS)
    assert all(e.success for e in episodes)
    for e in episodes:
        env.reset(seed=e.task)
        assert [s.action for s in e.steps] == env.solve()
        for s in e.steps:
            assert parse_action(s.completion, fmt="tagged") == s.action
            assert s.completion.startswith(f"<think>{think_text(s.observation)}</think>")
            assert s.action_ids[-1] == chat_policy.eos_id
        for prev, step in zip(e.steps, e.steps[1:3], strict=False):  # within history=2:
            head = prev.prompt_ids + prev.action_ids  # token-in/token-out prefixes
            assert step.prompt_ids[: len(head)] == head
    with pytest.raises(ValueError, match="needs an env with a solver"):
        demonstrations(make("frozenlake"), [0], chat_policy, _prompt(chat_policy), SETTINGS)


QA = {"kb_seed": 0, "kb_size": 12, "hops": [1, 2], "max_steps": 4}


@pytest.fixture
def word_policy():
    pytest.importorskip("bm25s", reason="search_qa needs the 'search' extra (bm25s)")
    env = make("search_qa", **QA)
    tok = local_tokenizer(env, env.instruction, kind="word")
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(config, seed=0), tok)


def test_line_format_demonstrations_are_the_bare_solver_actions(word_policy):
    """search_qa's plan through the word-level tokenizer: each completion is the action
    itself (a line, no tags the tokenizer cannot write), every id known, eos last."""
    env = make("search_qa", **QA)
    line = RolloutSettings(max_new_tokens=12, restrict_to_admissible=False, action_format="line")
    episodes = demonstrations(env, [0, 1, 2], word_policy, PromptBuilder(history=1), line, "none")
    assert all(e.success for e in episodes)
    unk = word_policy.tokenizer.unk_token_id
    for e in episodes:
        env.reset(seed=e.task)
        assert [s.completion for s in e.steps] == [s.action for s in e.steps] == env.solve()
        for s in e.steps:
            assert unk not in s.action_ids and s.action_ids[-1] == word_policy.eos_id
            assert parse_action(word_policy.decode(s.action_ids), fmt="line") == s.action


def test_demonstrations_the_tokenizer_cannot_write_fail_clearly(word_policy):
    env = make("search_qa", **QA)
    with pytest.raises(ValueError, match="tokenizer cannot write the demonstration"):
        demonstrations(env, [0], word_policy, PromptBuilder(history=1), SETTINGS, "none")


def test_warmup_teaches_the_format(chat_policy):
    """A random model writes no parsable action; after a short warm-up most are."""
    env = make("sokoban", **DEMO)
    prompt = _prompt(chat_policy)

    def format_errors() -> float:
        tasks = tasks_for_groups(range(10**9, 10**9 + 16), 1)
        envs = [make("sokoban", **DEMO) for _ in tasks]
        greedy = RolloutSettings(**{**SETTINGS.__dict__, "greedy": True, "max_turns": 3})
        episodes = rollout(chat_policy, envs, tasks, prompt, greedy)
        return turn_stats(episodes, "r")["r/format_error_rate"]

    assert format_errors() > 0.9
    demos = demonstrations(env, range(64), chat_policy, prompt, SETTINGS)
    steps = [s for e in demos for s in e.steps]
    torch.manual_seed(0)
    stats = supervised_warmup(
        chat_policy, steps, epochs=6, lr=3e-3, minibatch_size=32, time_budget_s=None, seed=0
    )
    assert (
        stats["warmup/epochs"] == 6 and stats["warmup/loss_last"] < stats["warmup/loss_first"] / 3
    )
    assert format_errors() < 0.2


# -- the supervised loop on (prompt ids, completion ids) pairs -------------------------------
def _examples(policy) -> list[tuple[list[int], list[int]]]:
    """Two prompts, each with a fixed two-token answer: learnable in a few steps."""
    up, left = policy.encode("up"), policy.encode("left")
    return [(policy.encode("room one"), up), (policy.encode("room two"), left)] * 4


def _passes(policy, examples, epochs: int, batch: int, lr: float, seed: int) -> list[float]:
    return supervised_passes(
        policy, examples, epochs=epochs, lr=lr, minibatch_size=batch, time_budget_s=None,
        seed=seed,
    ).epoch_losses  # fmt: skip


def test_supervised_passes_lower_the_answer_nll_through_the_optimizer(tiny_policy) -> None:
    data = _examples(tiny_policy)
    before = [p.detach().clone() for p in tiny_policy.model.parameters()]
    losses = _passes(tiny_policy, data, epochs=6, batch=4, lr=1e-2, seed=0)
    assert len(losses) == 6
    assert losses[-1] < 0.5 * losses[0]  # a 2-token answer per prompt is memorised quickly
    changed = [
        not torch.equal(a, p) for a, p in zip(before, tiny_policy.model.parameters(), strict=True)
    ]
    assert any(changed)


def test_supervised_passes_are_reproducible_from_their_seed(tiny_policy) -> None:
    state = {k: v.clone() for k, v in tiny_policy.model.state_dict().items()}
    first = _passes(tiny_policy, _examples(tiny_policy), epochs=2, batch=3, lr=1e-3, seed=7)
    tiny_policy.model.load_state_dict(state)
    second = _passes(tiny_policy, _examples(tiny_policy), epochs=2, batch=3, lr=1e-3, seed=7)
    assert first == pytest.approx(second, rel=1e-6)


def test_supervised_passes_refuse_empty_data_and_empty_answers(tiny_policy) -> None:
    with pytest.raises(ValueError, match="at least one"):
        _passes(tiny_policy, [], epochs=1, batch=2, lr=1e-3, seed=0)
    with pytest.raises(ValueError, match="empty answer"):
        _passes(tiny_policy, [([1, 2], [])], epochs=1, batch=2, lr=1e-3, seed=0)


def test_chat_style_needs_a_chat_template():
    with pytest.raises(ConfigError, match=r"needs model\.tokenizer .chat."):
        load_config(None, ["agent.prompt_style=chat"])


def test_sokoban_text_preset_runs_warmup_then_rl(tmp_path):
    cfg = load_config("configs/sokoban_text.yaml", [
        "warmup.demos=8", "warmup.epochs=1", "rollout.groups=2", "rollout.group_size=2",
        "rollout.max_turns=3", "eval.episodes=4", "train.iterations=1",
        "train.time_budget_s=null", "log.progress=false", f"out_dir={tmp_path}",
    ])  # fmt: skip
    summary = Trainer(cfg, tmp_path / "run").run()
    assert summary["warmup"]["warmup/steps"] > 8 and summary["warmup"]["warmup/updates"] >= 1
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["warmup"] == summary["warmup"]
    (row,) = read_metrics(tmp_path / "run")
    for key in ("format_errors", "truncated_actions", "context_truncated", "completion_tokens"):
        assert f"rollout/{key}" in row and f"eval/{key}" in row
    more = cfg.model_copy(update={"train": cfg.train.model_copy(update={"iterations": 2})})
    resumed = Trainer(more, tmp_path / "run", resume=True).run()  # no second warm-up,
    assert resumed["warmup"] == summary["warmup"]  # and its stats are kept
