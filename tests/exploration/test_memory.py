"""EMPO2's memory: the SQLite store, ranking, retrieval, tips in prompts, the three modes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode, Step
from cairn.data.tokens import TokenBatch
from cairn.exploration.embed import TfidfEmbedder, make_embedder
from cairn.exploration.memory import (
    MemoryStore,
    Tip,
    TipMemory,
    TipPromptBuilder,
    apply_mode,
    check_mode_probs,
    draw_mode,
    partition_key,
    rank_tips,
)
from cairn.exploration.tips import TemplateTipWriter


def _store(tmp_path, capacity=1000) -> MemoryStore:
    return MemoryStore(tmp_path / "m.sqlite", capacity)


# -- the store ---------------------------------------------------------------------------------
def test_dedup_keeps_one_row_with_the_higher_score(tmp_path):
    s = _store(tmp_path)
    s.add("p", [Tip("ctx", "go left", 0.2), Tip("ctx", "go left", 0.9), Tip("ctx", "go up", 0.1)])
    s.add("p", [Tip("ctx", "go left", 0.5)])
    rows = s.rows("p")
    # 'go left' once, first inserted (id 1), score max(0.2, 0.9, 0.5) = 0.9
    assert [(r[0], r[2], r[3]) for r in rows] == [(1, "go left", 0.9), (3, "go up", 0.1)]


def test_capacity_evicts_the_oldest_first_per_partition(tmp_path):
    s = _store(tmp_path, capacity=3)
    for i in range(5):
        s.add("a", [Tip(f"c{i}", f"t{i}", float(i))])
    s.add("b", [Tip("c", "only", 0.0)])
    # 5 tips into room for 3: t0, t1 (oldest) are gone; partition b is untouched
    assert [r[2] for r in s.rows("a")] == ["t2", "t3", "t4"]
    assert s.count("b") == 1 and s.count() == 4


def test_store_reopens_with_every_committed_tip(tmp_path):
    s = _store(tmp_path)
    s.add("p", [Tip("c", "kept", 1.0)])
    s.close()
    again = _store(tmp_path)
    assert [r[2] for r in again.rows("p")] == ["kept"]


def test_tips_survive_a_kill_without_close(tmp_path):
    """Each add is one committed transaction: SIGKILL right after it loses nothing."""
    code = (
        "import os, signal, sys\n"
        "from cairn.exploration.memory import MemoryStore, Tip\n"
        "s = MemoryStore(sys.argv[1])\n"
        "for i in range(3):\n"
        "    s.add('p', [Tip('c', f'tip {i}', i)])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.sqlite")])
    assert done.returncode == -9
    assert [r[2] for r in _store(tmp_path).rows("p")] == ["tip 0", "tip 1", "tip 2"]


def test_bad_store_arguments(tmp_path):
    with pytest.raises(ValueError, match="capacity"):
        MemoryStore(tmp_path / "x.sqlite", capacity=0)
    with pytest.raises(ValueError, match="threshold"):
        TipMemory(_store(tmp_path), TfidfEmbedder(), threshold=1.5)
    with pytest.raises(ValueError, match="top_k"):
        TipMemory(_store(tmp_path), TfidfEmbedder(), top_k=0)
    with pytest.raises(ValueError, match="unknown embedder"):
        make_embedder("bert")


# -- ranking -----------------------------------------------------------------------------------
def test_rank_tips_worked_example():
    rows = [(1, "c", "a", 0.5), (2, "c", "b", 0.9), (3, "c", "c", 0.9), (4, "c", "d", 2.0)]
    sims = np.array([0.8, 0.6, 0.7, 0.5])
    # d is not above the threshold 0.5 (strictly); b and c tie on score 0.9 -> c is more
    # similar (0.7 > 0.6); a has the lowest score
    assert rank_tips(rows, sims, 0.5, 10) == ["c", "b", "a"]
    assert rank_tips(rows, sims, 0.5, 2) == ["c", "b"]
    assert rank_tips(rows, sims, 0.9, 10) == []


def _rank_loop(rows, sims, threshold, top_k):
    keep = [(r, s) for r, s in zip(rows, sims, strict=True) if s > threshold]
    keep.sort(key=lambda rs: (-rs[0][3], -rs[1], -rs[0][0]))
    return [r[2] for r, _ in keep[:top_k]]


@pytest.mark.parametrize("seed", range(5))
def test_rank_tips_matches_a_plain_loop_and_ignores_row_order(seed):
    rng = np.random.default_rng(seed)
    n = 40
    rows = [(i, "c", f"t{i}", float(rng.integers(0, 4))) for i in range(n)]
    sims = rng.choice([0.2, 0.55, 0.7, 0.9], size=n)
    want = _rank_loop(rows, sims, 0.5, 10)
    assert rank_tips(rows, sims, 0.5, 10) == want
    perm = rng.permutation(n)
    assert rank_tips([rows[i] for i in perm], sims[perm], 0.5, 10) == want


# -- retrieval and prompts ------------------------------------------------------------------------
def test_retrieval_by_similar_context_then_score(tmp_path):
    mem = TipMemory(_store(tmp_path), TfidfEmbedder(), threshold=0.5, top_k=2)
    mem.add(
        "task",
        [
            Tip("pos 0 0 left wall", "act: right", 0.0),
            Tip("pos 0 0 left wall", "act: down", 1.0),
            Tip("box far away north", "act: up", 5.0),
        ],
    )
    # the query shares the first context exactly (cosine 1); the third context shares no
    # word (cosine 0) despite its higher score
    assert mem.retrieve("task", "pos 0 0 left wall") == ["act: down", "act: right"]
    assert mem.retrieve("other task", "pos 0 0 left wall") == []  # another partition
    mem.add("task", [Tip("pos 0 0 left wall", "act: left", 3.0)])  # the cache refreshes
    assert mem.retrieve("task", "pos 0 0 left wall")[0] == "act: left"


def test_tip_prompt_builder_inserts_a_block_and_records_the_plain_prompt(tmp_path):
    mem = TipMemory(_store(tmp_path), TfidfEmbedder(), top_k=3)
    mem.add("push", [Tip("o1", "act: left", 1.0)])
    builder = TipPromptBuilder(PromptBuilder(history=1), mem)
    text = builder.build("push", [("o0", "up")], "o1")
    assert text == "push\n<tip> act: left </tip>\nobs: o0 act: up\nobs: o1 act:"
    assert builder.shown[text] == ("push\nobs: o0 act: up\nobs: o1 act:", ("act: left",))
    assert builder.build("push", [], "nothing like it") == "push\nobs: nothing like it act:"
    assert builder.history == 1  # other attributes come from the base builder


def _episode(prompts: list[list[int]]) -> Episode:
    steps = [
        Step(t=t, observation="o", anchor="o", action="a", completion="a", reward=0.0,
             prompt_ids=p, action_ids=[7], logprobs=[-1.0])
        for t, p in enumerate(prompts)
    ]  # fmt: skip
    return Episode(id=0, group=0, task=0, steps=steps)


def _encode(text: str) -> list[int]:
    return [len(w) for w in text.split()]


@pytest.mark.parametrize("mode", ["on_policy", "tips", "off_policy"])
def test_apply_mode_marks_episodes_and_strips_tips_off_policy(mode):
    shown = {"tipped prompt here": ("plain one", ("t1",))}
    e = _episode([_encode("tipped prompt here"), _encode("untouched")])
    n = apply_mode([e], mode, shown, _encode)
    if mode == "on_policy":
        assert (n, e.source, e.meta) == (0, 0, {})
        return
    assert n == 1 and e.source == 2 and e.meta == {"memory_mode": mode, "tips": ["t1"]}
    want = _encode("plain one") if mode == "off_policy" else None
    assert e.steps[0].train_prompt_ids == want and e.steps[1].train_prompt_ids is None
    tokens = TokenBatch.from_episodes([e], np.zeros(2))
    if mode == "off_policy":  # the loss scores the plain prompt and flags the turn
        assert tokens.prompt_ids[0] == want and tokens.flags["tips_stripped"].tolist() == [1, 0]
    else:
        assert "tips_stripped" not in tokens.flags


def test_mode_probabilities_are_checked_and_drawn():
    assert check_mode_probs({"on_policy": 0.5, "tips": 0.5}) == {
        "on_policy": 0.5,
        "tips": 0.5,
        "off_policy": 0.0,
    }
    with pytest.raises(ValueError, match="sum to 1"):
        check_mode_probs({"on_policy": 0.5})
    with pytest.raises(ValueError, match="unknown memory mode"):
        check_mode_probs({"replay": 1.0})
    probs = check_mode_probs({"on_policy": 0.75, "tips": 0.08, "off_policy": 0.17})
    rng = np.random.default_rng(0)
    draws = [draw_mode(rng, probs) for _ in range(4000)]
    freq = {m: draws.count(m) / len(draws) for m in probs}
    assert all(abs(freq[m] - probs[m]) < 0.03 for m in probs), freq
    with pytest.raises(ValueError, match="unknown memory mode"):
        apply_mode([], "sometimes", {}, _encode)


def test_template_writer_worked_example():
    e = _episode([[1], [2], [3]])
    for s, (o, a) in zip(e.steps, [("s0", "up"), ("s1", "left"), ("s2", "down")], strict=True):
        s.observation, s.action, s.reward = o, a, 0.5
    tips = TemplateTipWriter("act: {actions} obs: {last}", horizon=2).write([e], ["task"])[0]
    # one tip per state: the next two actions from it, the last state, score = return 1.5
    assert [(t.context, t.text, t.score) for t in tips] == [
        ("s0", "act: up left obs: s2", 1.5),
        ("s1", "act: left down obs: s2", 1.5),
        ("s2", "act: down obs: s2", 1.5),
    ]
    with pytest.raises(ValueError, match="invalid"):
        TemplateTipWriter("{nope}")
    with pytest.raises(ValueError, match="horizon"):
        TemplateTipWriter(horizon=0)


def test_partitions_are_per_instruction(tmp_path):
    assert partition_key("a") != partition_key("b") and len(partition_key("a")) == 16
    s = _store(tmp_path)
    mem = TipMemory(s, TfidfEmbedder())
    mem.add("task a", [Tip("x", "y", 0.0)])
    db = sqlite3.connect(s.path)
    assert db.execute("SELECT partition FROM tips").fetchall() == [(partition_key("task a"),)]


def test_tips_reach_chat_prompts_and_off_policy_strips_them(tmp_path):
    """Chat prompts (token-in/token-out) show the tips too, and the off-policy mode trains
    on the same chat prompt without them; before, the chat path skipped the tips."""
    from cairn.agent import Turn, fit_prompt
    from cairn.envs import make
    from cairn.policies import local_tokenizer

    env = make("frozenlake")
    tok = local_tokenizer(env, env.instruction, kind="chat", vocab_size=300)
    encode = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    base = PromptBuilder(history=2, chat_template=tok, style="chat")
    mem = TipMemory(_store(tmp_path), TfidfEmbedder(), top_k=3)
    mem.add("push", [Tip("o1", "act: left", 1.0)])
    builder = TipPromptBuilder(base, mem)
    past = [Turn("o0", "up", [*encode("up"), tok.eos_token_id])]
    ids = fit_prompt(builder, encode, tok.eos_token_id, "push", past, "o1").ids
    plain = fit_prompt(base, encode, tok.eos_token_id, "push", past, "o1").ids
    assert tok.decode(ids).replace("\n<tip> act: left </tip>", "") == tok.decode(plain)
    assert builder.shown_ids == {tuple(ids): (plain, ("act: left",))} and builder.shown == {}
    e = _episode([ids, plain])
    assert apply_mode([e], "off_policy", builder.shown, encode, builder.shown_ids) == 1
    assert e.steps[0].train_prompt_ids == plain and e.steps[1].train_prompt_ids is None
    assert e.meta["tips"] == ["act: left"]
