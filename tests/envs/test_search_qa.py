"""SearchQA env: synthetic KBs, BM25 retrieval, gold search chains, rewards, snapshots."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

pytest.importorskip("bm25s", reason="search_qa needs the 'search' extra (bm25s)")

from cairn.envs import make
from cairn.envs._kb import RELATIONS, all_names, build_kb, template_words, tokenize
from cairn.envs.base import TextEnv
from cairn.envs.search_qa import INVALID_TEXT, f1_score, normalize_answer


def test_worked_examples_of_answer_scoring():
    assert normalize_answer("  The Kalomi!! ") == "kalomi"  # case, article, punctuation
    assert normalize_answer("an  Ven-tor") == "ventor"
    # prediction "kalomi veltor" vs truth "kalomi": precision 1/2, recall 1, F1 = 2/3
    assert f1_score("Kalomi Veltor", "Kalomi") == pytest.approx(2 / 3)
    assert f1_score("the Kalomi", "kalomi") == 1.0 and f1_score("Veltor", "Kalomi") == 0.0


def test_answer_scoring_is_invariant_to_case_punctuation_and_articles():
    for variant in ("kalomi", "KALOMI", "the Kalomi.", " Kalomi ", "a kalomi!"):
        assert normalize_answer(variant) == "kalomi" and f1_score(variant, "Kalomi") == 1.0


@pytest.mark.parametrize("seed", range(150))
def test_gold_searches_then_answer_succeed(seed):
    env = make("search_qa")
    obs, info = env.reset(seed=seed)
    assert obs == env.question == info["question"] and info["answer"] == env.answer
    assert len(env.gold_queries) == info["hops"] in (1, 2, 3)
    chain = env._question.chain
    for hop, query in enumerate(env.gold_queries):
        obs, reward, term, trunc, info = env.step(f"search[{query}]")
        assert (reward, term, trunc, info["valid"]) == (0.0, False, False, True)
        # the top document of each gold search names the next entity of the chain
        assert chain[hop + 1] in obs.split("\n")[0].split()
    obs, reward, term, trunc, info = env.step(f"answer[{env.answer}]")
    assert (obs, reward, term, trunc, info["success"]) == ("correct", 1.0, True, False, True)


@pytest.mark.parametrize("kb_seed", [None, 0])
def test_solve_is_the_gold_chain_in_words_a_word_tokenizer_can_write(kb_seed):
    """The warm-up's solver: gold searches then the answer, brackets spaced so each one is a
    word of ``vocabulary()``; replaying it succeeds."""
    env = make("search_qa", kb_seed=kb_seed, hops=[1, 2, 3])
    vocab = set(env.vocabulary())
    for seed in range(30):
        env.reset(seed=seed)
        plan = env.solve()
        assert plan == [f"search [ {q} ]" for q in env.gold_queries] + [f"answer [ {env.answer} ]"]
        assert {w for a in plan for w in a.split()} <= vocab
        results = [env.step(a) for a in plan]
        assert all(r[4]["valid"] for r in results) and results[-1][4]["success"]


def test_worked_question_and_documents():
    env = make("search_qa", kb_seed=3, hops=2)
    env.reset(seed=0)
    q = env._question
    first, second = (RELATIONS[r] for r in q.relations)
    # the question nests the relation phrases around the start entity
    inner = first.phrase.format(s=q.chain[0])
    assert env.question.endswith(second.phrase.format(s=inner) + " ?")
    kb = build_kb(3, 12)
    assert first.document.format(s=q.chain[0], o=q.chain[1]) in kb.documents
    assert second.document.format(s=q.chain[1], o=q.chain[2]) in kb.documents
    assert len(kb.documents) == len(kb.facts) == 12 * 2 + 4 * 2 + 6 + 3 * 2  # one per fact


def test_kb_is_consistent_and_names_unique():
    for seed in range(10):
        kb = build_kb(seed, 20)
        names = kb.names()
        assert len(names) == len(set(names))
        reserved = template_words()
        assert not {n.lower() for n in names} & reserved
        for country in kb.entities["country"]:  # a capital lies in its own country
            assert kb.facts[(kb.facts[(country, "capital")], "located_in")] == country


def _bm25_plain(docs: list[list[str]], query: list[str], k1=1.5, b=0.75) -> np.ndarray:
    """Lucene BM25 written as plain loops (the variant bm25s uses by default)."""
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    scores = []
    for doc in docs:
        score = 0.0
        for term in set(query):
            df = sum(term in d for d in docs)
            if df:
                tf = doc.count(term)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avg))
        scores.append(score)
    return np.array(scores)


def test_bm25_scores_match_a_plain_loop_and_ranking_follows_them():
    kb = build_kb(5, 12)
    docs = [tokenize(d) for d in kb.documents]
    rng = random.Random(0)
    for _ in range(20):
        query = list({*rng.sample(sorted({w for d in docs for w in d}), 3)})
        fast = np.asarray(kb._bm25.get_scores(query))
        np.testing.assert_allclose(fast, _bm25_plain(docs, query), rtol=1e-5)
        expected = [kb.documents[i] for i in np.argsort(-fast, kind="stable")[:3] if fast[i] > 0]
        assert kb.retrieve(" ".join(query), 3) == expected


def test_retrieve_and_no_results():
    env = make("search_qa", kb_seed=1, top_k=2)
    env.reset(seed=0)
    name = env._question.chain[0]
    docs = env.retrieve(f"{name} {name}", k=5)
    assert 1 <= len(docs) <= 5 and all(name in d.split() for d in docs)
    assert len(env.retrieve("born")) == 2  # default k is top_k
    assert env.retrieve("zzzz qqqq") == [] and env.retrieve("the of") == []  # stopwords only
    obs, _, _, _, info = env.step("search[zzzz]")
    assert obs == "no results" and info["valid"] and info["anchor"] == "no results"
    with pytest.raises(ValueError, match="k"):
        env.retrieve("x", k=0)


@pytest.mark.parametrize(
    "bad", ["search[]", "search[   ]", "lookup[Kalo]", "answer", "", "search Kalo", "answer()"]
)
def test_invalid_actions_change_nothing(bad):
    env = make("search_qa", kb_seed=2)
    obs0, info0 = env.reset(seed=4)
    obs, reward, term, trunc, info = env.step(bad)
    assert info["valid"] is False and reward == 0.0 and not term and not trunc
    assert obs == obs0 and info["anchor"] == info0["anchor"]
    for action in env.gold_actions():
        obs, reward, *_ = env.step(action)
    assert reward == 1.0


def test_text_rendering_says_why_an_action_was_invalid():
    env = make("search_qa", kb_seed=2, render="text")
    obs0, info0 = env.reset(seed=4)
    for _ in range(2):  # the line is said once, not stacked on repeats
        obs, reward, term, _, info = env.step("capital[Torbel]")
        assert obs == f"{INVALID_TEXT}\n{obs0}" and obs0.startswith("Question: ")
        assert reward == 0.0 and not term
        assert not info["valid"] and info["anchor"] == info0["anchor"] == obs0
    obs, *_ = env.step(env.gold_actions()[0])
    assert obs.startswith("[1] ")


def test_spaced_tool_syntax_and_case_are_accepted():
    env = make("search_qa", kb_seed=2, hops=1)
    env.reset(seed=1)
    spaced = env.step(f"Search [ {env.gold_queries[0]} ]")[0]
    env.reset(seed=1)
    assert spaced == env.step(f"search[{env.gold_queries[0]}]")[0]


def test_f1_reward_and_wrong_answers():
    env = make("search_qa", kb_seed=0, reward="f1")
    env.reset(seed=0)
    obs, reward, term, _, info = env.step(f"answer[{env.answer} Zzz]")
    # one extra token: precision 1/2, recall 1 -> F1 2/3, but not an exact match
    assert reward == pytest.approx(2 / 3) and term and not info["success"] and obs == "wrong"
    env = make("search_qa", kb_seed=0)
    env.reset(seed=0)
    assert env.step(f"answer[{env.answer} Zzz]")[1] == 0.0


def test_truncation_without_answer():
    env = make("search_qa", max_steps=2)
    env.reset(seed=0)
    assert env.step("search[a]")[2:4] == (False, False)
    _, reward, term, trunc, info = env.step("search[b]")
    assert (reward, term, trunc, info["success"]) == (0.0, False, True, False)
    with pytest.raises(RuntimeError, match="ended"):
        env.step("answer[x]")


def test_determinism_and_kb_seed():
    a, b = make("search_qa"), make("search_qa")
    for seed in range(5):
        assert a.reset(seed=seed) == b.reset(seed=seed) and a.gold_actions() == b.gold_actions()
    fixed = make("search_qa", kb_seed=9)
    kbs, questions = set(), set()
    for seed in range(10):
        fixed.reset(seed=seed)
        kbs.add(tuple(fixed._kb.documents))
        questions.add(fixed.question)
    assert len(kbs) == 1 and len(questions) > 5  # one corpus, many questions
    free = make("search_qa")
    corpora = set()
    for seed in range(4):
        free.reset(seed=seed)
        corpora.add(tuple(free._kb.documents))
    assert len(corpora) == 4  # without kb_seed every seed has its own corpus


def test_snapshot_and_replay_fallback_restore_identical_futures():
    env = make("search_qa", max_steps=6)
    env.reset(seed=21)
    env.step(f"search[{env.gold_queries[0]}]")
    env.step("bad")
    cheap, replay = env.snapshot(), TextEnv.snapshot(env)
    future = ["search[capital]", *env.gold_actions()[1:]]
    reference = [env.step(a) for a in future]
    assert reference[-1][4]["success"]
    for snap in (cheap, replay):
        env.restore(snap)
        assert [env.step(a) for a in future] == reference
    other = make("search_qa", max_steps=6)
    other.reset(seed=3)  # another KB and question: restore must bring back both
    other.restore(cheap)
    assert other.answer == env.answer and [other.step(a) for a in future] == reference


@pytest.mark.parametrize("kb_seed", [None, 4])
def test_observation_and_gold_action_words_are_in_vocabulary(kb_seed):
    env = make("search_qa", kb_seed=kb_seed, top_k=4)
    vocab = set(env.vocabulary())
    assert {"search", "answer", "[", "]", "[1]", "[4]"} <= vocab
    rng = random.Random(0)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        words = set(obs.split())
        for query in [*env.gold_queries, rng.choice(sorted(vocab))]:
            words |= set(env.step(f"search [ {query} ]")[0].split()) | set(query.split())
        words |= set(env.step(f"answer [ {env.answer} ]")[0].split())
        assert words <= vocab, words - vocab
    if kb_seed is not None:
        assert len(vocab) < len(make("search_qa").vocabulary())
    assert len(all_names()) > 4000


@pytest.mark.parametrize(
    "options",
    [
        {"kb_seed": -1},
        {"kb_size": 2},
        {"hops": 4},
        {"hops": []},
        {"top_k": 0},
        {"reward": "bleu"},
        {"max_steps": 0},
        {"example_choice": "best"},
        {"bogus": 1},
    ],
)
def test_bad_options_raise_value_error(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        make("search_qa", **options)


def test_calls_before_reset_fail_clearly():
    env = make("search_qa")
    for call in (lambda: env.answer, lambda: env.retrieve("x"), lambda: env.step("search[x]")):
        with pytest.raises(RuntimeError, match="reset"):
            call()


def test_unseeded_reset_records_its_seed_so_replay_is_exact():
    env = make("search_qa")
    _, info = env.reset()  # seed=None: the env draws a seed and keeps it for replay
    after = env.step(f"search[{env.gold_queries[0]}]")[0]
    snap = TextEnv.snapshot(env)
    assert isinstance(snap.seed, int)
    assert env.restore(snap)[0] == after and env.answer == info["answer"]


# -- prompts for language models -------------------------------------------------------------
QA = {"kb_seed": 0, "kb_size": 12, "hops": [1, 2], "max_steps": 4}  # the presets' options


def test_text_render_names_the_actions_in_words_and_shows_the_question():
    env = make("search_qa", render="text", **QA)
    obs, _ = env.reset(seed=3)
    assert obs == "Question: who is the founder of the employer of Kabelfen ?"
    assert env.instruction.endswith("Question: who is the founder of the employer of Kabelfen ?")
    assert "search[" not in env.instruction  # the format sentence comes from describe_format
    assert env.vocabulary() == []  # open text: a subword tokenizer
    # later observations are the same as in the compact rendering
    compact = make("search_qa", **QA)
    compact.reset(seed=3)
    search = "search[Kabelfen works for]"
    assert env.step(search)[0] == compact.step(search)[0]


def _shape(text: str) -> str:
    """``text`` with every capitalised word (a name) as ``N``."""
    return re.sub(r"\b[A-Z]\w*", "N", text)


def test_nearest_example_has_the_questions_wording_and_its_gold_searches():
    """``example_choice="nearest"``: every question of one and two hops is shown the example
    of its own relations (the pool holds every chain), searching in the gold queries' words;
    "random" shows other chains too."""
    from cairn.envs.search_qa import EXAMPLE_POOL

    env = make("search_qa", render="text", example_pool=True, example_choice="nearest", **QA)
    drawn = make("search_qa", render="text", example_pool=True, **QA)
    shapes, same_as_random = set(), 0
    for seed in range(300):
        env.reset(seed=seed)
        (first, _), *_ = demo = env.demonstration()
        assert first == f"Question: {EXAMPLE_POOL[env._example_index()][0]} ?"
        assert _shape(first) == _shape(f"Question: {env.question}")
        gold_searches = [a for a in env.gold_actions() if a.startswith("search[")]
        assert [_shape(a) for _, a in demo[:-1]] == [_shape(a) for a in gold_searches]
        assert demo[-1][1] == f"answer[{env.example_answer}]"
        shapes.add(_shape(env.question))
        drawn.reset(seed=seed)
        same_as_random += drawn.demonstration() == demo
    assert len(shapes) == len(EXAMPLE_POOL) == 17  # 7 relations + the 10 chains of two
    assert same_as_random < 60


def test_gold_action_follows_the_gold_chain_turn_by_turn():
    env = make("search_qa", **QA)
    env.reset(seed=3)  # founder of the employer of Kabelfen: 2 hops
    seen = []
    while (gold := env.gold_action()) is not None:
        seen.append(gold)
        *_, info = env.step(gold)
    assert seen == ["search[Kabelfen works for]", "search[Karon founded by]", "answer[Kaka]"]
    assert info["success"]
    env.reset(seed=3)
    env.step("search[nothing useful]")  # a wasted turn: the next gold is the second hop's
    assert env.gold_action() == "search[Karon founded by]"


def test_tools_are_search_and_answer_schemas_matching_the_env_actions():
    from cairn.agent import format_completion, parse_action

    env = make("search_qa", **QA)
    names = [t["function"]["name"] for t in env.tools]
    args = [list(t["function"]["parameters"]["properties"]) for t in env.tools]
    assert names == ["search", "answer"] and args == [["query"], ["answer"]]
    env.reset(seed=3)
    for action in env.gold_actions():  # every gold action round-trips through a tool call
        call = format_completion(action, fmt="tool_call")
        assert env.step(parse_action(call, fmt="tool_call"))[4]["valid"]


def test_fuzzy_search_reads_a_misspelt_name_as_the_closest_word_of_the_documents():
    # kb_seed 0 holds Polbelron and Thafensa; "polbelon" is one letter off, "vexmo" no name
    from cairn.envs._kb import build_kb

    kb = build_kb(0, 12)
    assert kb.spelled("polbelon") == "polbelron" and kb.spelled("tafensa") == "thafensa"
    assert kb.spelled("born") == "born" and kb.spelled("vexmo") is None
    exact = make("search_qa", kb_seed=0, kb_size=12, top_k=3)
    fuzzy = make("search_qa", kb_seed=0, kb_size=12, top_k=3, fuzzy=True)
    for env in (exact, fuzzy):
        env.reset(seed=0)
    assert exact.retrieve("Polbelon founded by") == exact.retrieve("founded by")  # name lost
    assert fuzzy.retrieve("Polbelon founded by") == exact.retrieve("Polbelron founded by")
    assert fuzzy.retrieve("Vexmo") == [] == exact.retrieve("Vexmo")
    with pytest.raises(ValueError, match="fuzzy"):
        make("search_qa", fuzzy="yes")


def test_a_search_that_shows_nothing_new_is_no_progress():
    env = make("search_qa", kb_seed=0, top_k=1)
    env.reset(seed=3)
    query = env.gold_queries[0]
    first = env.step(f"search[{query}]")
    assert not first[4]["no_progress"]  # a document not shown before
    again = env.step(f"search [ {query.upper()} ]")  # the same query, spelt otherwise
    assert again[0] == first[0] and again[4]["no_progress"]
    assert env.step("search[zzzz]")[4]["no_progress"]  # no results: nothing new either
    # the state is the actions taken: a restored episode judges the next search alike
    env.restore(env.snapshot())
    assert env.step(f"search[{query}]")[4]["no_progress"]
    other = make("search_qa", kb_seed=0, top_k=1)
    other.reset(seed=3)
    other.step("search[zzzz]")  # nothing shown before: the gold search is progress
    assert not other.step(f"search[{query}]")[4]["no_progress"]
