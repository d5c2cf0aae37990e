"""Multi-hop question answering over a synthetic corpus with a BM25 retriever (bm25s).

The env of the search-agent methods: ARPO (arXiv 2507.19849) branches after tool results,
IGPO (arXiv 2510.14967) rewards each turn by the gain in the policy's probability
of the ground-truth answer (so the answer is exposed as ``info["answer"]`` and
``env.answer``), and SSRL (arXiv 2508.10874, its "Sim2Real" evaluation) swaps self-generated
information for real retrieval at evaluation (``env.retrieve(query, k)``).

Every seed gives a knowledge base of made-up entities (names from syllables, so nothing
leaks from real-world knowledge) and a 1-3 hop question with its answer and gold search
chain; ``kb_seed`` fixes one knowledge base and lets the seed vary only the question.

Actions:
- ``search[query]``: the next observation lists the top-k documents, ``[1] ...`` per line
  (``no results`` when no document shares a word with the query; with ``fuzzy=True`` a
  query word no document holds counts as the closest one they hold); the episode goes on.
- ``answer[text]``: ends the episode; reward is exact match after SQuAD normalisation
  (lowercase, no punctuation or articles) or token F1 (``reward="f1"``); success is exact
  match in both modes.
Anything else is invalid and changes nothing: the observation is the last one again, led
with ``render="text"`` by a line that names the two actions (``INVALID_TEXT``; a model
shown only the question again tends to repeat what it wrote). Spaces around brackets are allowed
(``search [ Kalomi born ]``), so a word-level tokenizer over ``vocabulary()`` can write it.

For the ``tool_call`` format the two actions are tools (``tools``: ``search(query)`` and
``answer(answer)`` as JSON schemas); ``render="text"`` gives an instruction for language
models that names the actions in words (the answer format comes from
``cairn.agent.describe_format``) and shows the question as ``Question: ...``.

What a trainer reads beside the reward (``cairn.rollout.turn``):
- ``info["no_progress"]``: a wrong answer given before any search, or a search that shows
  no document the episode has not shown already (a repeated query, or no results). It
  earns no format bonus and costs ``agent.no_progress_penalty``: neither answering at once
  nor searching the same thing until the step limit is an optimum.
- ``info["task_blind"]`` (``rollout/task_blind``): the episode ended on a wrong answer
  given without any search, or equal to the answer of the example exchange it was shown.
- ``example_pool=True`` (text rendering): the made-up example episode that opens a
  language model's prompt (searches, their results, the answer) is taken per question
  from ``EXAMPLE_POOL`` and handed over in the reset info (``demonstration``). Its names
  use letters the knowledge base's syllables never do (x, y, w, j, c), so no example
  answer is a real answer; with one fixed example SmolLM2 learned to answer its "Torbel"
  at once, which is also a city of ``kb_seed=0``. ``example_choice``: ``"random"`` draws
  it from the reset seed; ``"nearest"`` takes the example whose question shares the most
  words with this one (Jaccard over word sets, ties drawn from the seed), as few-shot
  prompts pick their examples by similarity: a question about an employer is shown the
  search ``Wiblor works for``, a two-hop question a two-hop example. Trained on random
  examples, SmolLM2 searched ``employer of Kabelfen`` and read Kabelfen's birthplace (one
  document a search): 11 of a record's 29 held-out one-hop questions failed, 9 on queries
  without the relation's words; 3 with the nearest example (the same weights).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cairn.agent.instructions import tool_schema
from cairn.envs._common import (
    EpisodeClock,
    check_bool,
    check_choice,
    check_int,
    check_int_choices,
    fresh_seed,
)
from cairn.envs._kb import KnowledgeBase, Question, all_names, build_kb, make_question
from cairn.envs._kb import template_words as _template_words
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv

__all__ = ["SearchQA", "SearchQASnapshot", "f1_score", "normalize_answer"]

_ACTION = re.compile(r"^\s*(search|answer)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
INVALID_TEXT = "Not an action. The only actions: search with a query, answer with your answer."
_OBS_WORDS = ("no", "results", "correct", "wrong", "search", "answer", "[", "]")
_RENDERS = ("compact", "text")
#: example_pool: made-up episodes (question, then (action, result) turns) in the knowledge
#: base's own question wordings: every relation over one hop, every chain of two (those
#: whose entities differ).
#: Each searches before it answers, each search shows the one document it needs, and every
#: answer differs (a copied example answer is told apart from a real one).
EXAMPLE_POOL: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("what is the birthplace of Vexmo", (
        ("search[Vexmo born]", "[1] Vexmo was born in Droxil"),
        ("answer[Droxil]", ""))),
    ("what is the employer of Wiblor", (
        ("search[Wiblor works for]", "[1] Wiblor works for Zephrax"),
        ("answer[Zephrax]", ""))),
    ("who is the founder of Brixwel", (
        ("search[Brixwel founded by]", "[1] Brixwel was founded by Yawen"),
        ("answer[Yawen]", ""))),
    ("what is the headquarters of Cyrnex", (
        ("search[Cyrnex headquartered in]", "[1] Cyrnex is headquartered in Jolvic"),
        ("answer[Jolvic]", ""))),
    ("what is the country of Oxbury", (
        ("search[Oxbury city in]", "[1] Oxbury is a city in Plivia"),
        ("answer[Plivia]", ""))),
    ("what is the capital of Jorvex", (
        ("search[capital of Jorvex]", "[1] Skyvel is the capital of Jorvex"),
        ("answer[Skyvel]", ""))),
    ("who is the leader of Wyrland", (
        ("search[leader of Wyrland]", "[1] Joxby is the leader of Wyrland"),
        ("answer[Joxby]", ""))),
    ("what is the country of the birthplace of Wendrix", (
        ("search[Wendrix born]", "[1] Wendrix was born in Oxwell"),
        ("search[Oxwell city in]", "[1] Oxwell is a city in Yuvask"),
        ("answer[Yuvask]", ""))),
    ("who is the leader of the country of Vexhill", (
        ("search[Vexhill city in]", "[1] Vexhill is a city in Wyrmark"),
        ("search[leader of Wyrmark]", "[1] Cwenna is the leader of Wyrmark"),
        ("answer[Cwenna]", ""))),
    ("what is the headquarters of the employer of Jaxo", (
        ("search[Jaxo works for]", "[1] Jaxo works for Quyvix"),
        ("search[Quyvix headquartered in]", "[1] Quyvix is headquartered in Cyrmel"),
        ("answer[Cyrmel]", ""))),
    ("what is the birthplace of the founder of Wixol", (
        ("search[Wixol founded by]", "[1] Wixol was founded by Jemmy"),
        ("search[Jemmy born]", "[1] Jemmy was born in Yarrow"),
        ("answer[Yarrow]", ""))),
    ("who is the founder of the employer of Yelda", (
        ("search[Yelda works for]", "[1] Yelda works for Joxcorp"),
        ("search[Joxcorp founded by]", "[1] Joxcorp was founded by Wynn"),
        ("answer[Wynn]", ""))),
    ("what is the employer of the founder of Cyrbel", (
        ("search[Cyrbel founded by]", "[1] Cyrbel was founded by Jessa"),
        ("search[Jessa works for]", "[1] Jessa works for Vextra"),
        ("answer[Vextra]", ""))),
    ("what is the country of the headquarters of Wexlo", (
        ("search[Wexlo headquartered in]", "[1] Wexlo is headquartered in Jarby"),
        ("search[Jarby city in]", "[1] Jarby is a city in Cylvan"),
        ("answer[Cylvan]", ""))),
    ("what is the capital of the country of Yomber", (
        ("search[Yomber city in]", "[1] Yomber is a city in Xantia"),
        ("search[capital of Xantia]", "[1] Wexham is the capital of Xantia"),
        ("answer[Wexham]", ""))),
    ("what is the birthplace of the leader of Jorwick", (
        ("search[leader of Jorwick]", "[1] Yusra is the leader of Jorwick"),
        ("search[Yusra born]", "[1] Yusra was born in Cobwyn"),
        ("answer[Cobwyn]", ""))),
    ("what is the employer of the leader of Xembria", (
        ("search[leader of Xembria]", "[1] Jovan is the leader of Xembria"),
        ("search[Jovan works for]", "[1] Jovan works for Wyxell"),
        ("answer[Wyxell]", ""))),
)  # fmt: skip
_EXAMPLE_CHOICES = ("random", "nearest")
TOOLS = (
    tool_schema(
        "search", "query", "Search the documents; shows the best matching ones.",
        "a few words naming what to look up",
    ),
    tool_schema(
        "answer", "answer", "Give the final answer; this ends the episode.",
        "the answer, a name",
    ),
)  # fmt: skip


def _search_query(action: str) -> str | None:
    """The query of ``action`` when it is a search with one (what the env accepts as one)."""
    match = _ACTION.match(action)
    query = match.group(2).strip() if match and match.group(1).lower() == "search" else ""
    return query or None


def _words(text: str) -> frozenset[str]:
    """The lowercase word set of ``text`` (what ``example_choice="nearest"`` compares)."""
    return frozenset(re.findall(r"\w+", text.lower()))


_POOL_WORDS = tuple(_words(question) for question, _ in EXAMPLE_POOL)


def _nearest_examples(question: str) -> list[int]:
    """Indices of the ``EXAMPLE_POOL`` questions with the highest Jaccard similarity of
    their lowercase word sets to ``question``'s."""
    words = _words(question)
    scores = [len(words & other) / len(words | other) for other in _POOL_WORDS]
    best = max(scores)
    return [i for i, score in enumerate(scores) if score == best]


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def f1_score(prediction: str, truth: str) -> float:
    """Token-level F1 between normalised ``prediction`` and ``truth`` (SQuAD)."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class SearchQASnapshot:
    base: ReplaySnapshot
    kb_key: tuple[int, int]
    question: Question
    clock: tuple[int, bool, bool]
    obs: str
    info: dict[str, Any]


class SearchQA(TextEnv):
    """Answer a multi-hop question with ``search[query]`` and ``answer[text]`` tool calls.

    Options:
        kb_seed: fix the knowledge base (None: a new one per reset seed).
        kb_size: people in the knowledge base, 3..500 (companies, cities and countries
            scale with it, see ``cairn.envs._kb.build_kb``).
        hops: relations per question, 1-3, or a list to draw from per seed.
        top_k: documents per search, 1..20.
        reward: ``"em"`` (exact match, 0/1) or ``"f1"`` (token F1).
        max_steps: tool calls per episode before truncation.
        render: ``"compact"`` (tiny models) or ``"text"`` (language models; module
            docstring).
        example_pool: text rendering: the example episode taken per question from
            ``EXAMPLE_POOL`` (module docstring); default False: the fixed Kalomi example.
        example_choice: how ``example_pool`` picks: ``"random"`` (from the reset seed) or
            ``"nearest"`` (the example question closest in words to this one).
        fuzzy: a query word no document holds is read as the closest one they hold
            (``KnowledgeBase.spelled``), so a misspelt name still finds its documents:
            SmolLM2 wrote "Polbelon" for "Polbelron" and got no results.
    """

    example_action = "search[Kalomi born]"
    tools = TOOLS

    def __init__(
        self,
        kb_seed: int | None = None,
        kb_size: int = 12,
        hops: int | Sequence[int] = (1, 2, 3),
        top_k: int = 3,
        reward: str = "em",
        max_steps: int = 8,
        render: str = "compact",
        example_pool: bool = False,
        fuzzy: bool = False,
        example_choice: str = "random",
    ) -> None:
        super().__init__()
        self.example_pool = check_bool("example_pool", example_pool)
        self.example_choice = check_choice("example_choice", example_choice, _EXAMPLE_CHOICES)
        self.fuzzy = check_bool("fuzzy", fuzzy)
        self.kb_seed = None if kb_seed is None else check_int("kb_seed", kb_seed, 0)
        self.kb_size = check_int("kb_size", kb_size, 3, 500)
        self.hops = check_int_choices("hops", hops, (1, 2, 3))
        self.top_k = check_int("top_k", top_k, 1, 20)
        self.reward = check_choice("reward", reward, ("em", "f1"))
        self._clock = EpisodeClock("search_qa", max_steps)
        self.render = check_choice("render", render, _RENDERS)
        if self.render == "text":
            self.example_observation = "Question: where was Kalomi born ?"
        if self.render == "text" and self.example_pool:  # the instruction's example too:
            # SmolLM2 searched the example's "Kalomi" for the knowledge base's "Kalo"
            self.example_action = EXAMPLE_POOL[0][1][0][0]
        self._kb_key = (0, self.kb_size)
        self._kb: KnowledgeBase | None = None
        self._question: Question | None = None
        self._last: tuple[str, dict[str, Any]] = ("", {})

    # -- task ----------------------------------------------------------------------------------
    @property
    def question(self) -> str:
        return self._require_question().text

    @property
    def answer(self) -> str:
        """The ground-truth answer (for rewards that teacher-force it, e.g. IGPO)."""
        return self._require_question().answer

    @property
    def gold_queries(self) -> tuple[str, ...]:
        """One search per hop that retrieves the fact needed next."""
        return self._require_question().gold_queries

    def gold_actions(self) -> list[str]:
        """A successful episode: the gold searches, then the answer."""
        return [f"search[{q}]" for q in self.gold_queries] + [f"answer[{self.answer}]"]

    def demonstration(self) -> list[tuple[str, str]]:
        """The text rendering's made-up episode: one search, its results, the answer."""
        if self.render != "text":
            return []
        if self.example_pool:
            question, turns = EXAMPLE_POOL[self._example_index()]
            observations = [f"Question: {question} ?", *(result for _, result in turns[:-1])]
            return [(o, a) for o, (a, _) in zip(observations, turns, strict=True)]
        return [
            (self.example_observation, self.example_action),
            ("[1] Kalomi was born in Torbel\n[2] Torbel is a city in Venlu", "answer[Torbel]"),
        ]

    def _example_index(self) -> int:
        """The ``EXAMPLE_POOL`` entry of this question: drawn from the reset seed among all
        of them (``example_choice="random"``) or among the nearest (``"nearest"``)."""
        seed = 0 if self._seed is None else int(self._seed)
        candidates = list(range(len(EXAMPLE_POOL)))
        if self.example_choice == "nearest":
            candidates = _nearest_examples(self.question)
        return candidates[int(np.random.default_rng([seed, 0xE8]).integers(len(candidates)))]

    @property
    def example_answer(self) -> str:
        """The answer of the example exchange this episode's prompt shows."""
        if self.example_pool and self.render == "text":
            return EXAMPLE_POOL[self._example_index()][1][-1][0][len("answer[") : -1]
        return "Torbel"

    def gold_action(self) -> str | None:
        """The gold action of this turn: the next gold search by the number of turns taken,
        the answer from the last hop on (None once the episode is over)."""
        if self._question is None or self._clock.done:
            return None
        gold = self.gold_actions()
        return gold[min(self._clock.steps, len(gold) - 1)]

    def solve(self) -> list[str]:
        """The gold actions as a solver plan (the format warm-up's demonstrations), written
        with spaces around the brackets (``search [ Kalomi born ]``) so that every tokenizer,
        the word-level one over ``vocabulary()`` included, can write them."""
        return [f"search [ {q} ]" for q in self.gold_queries] + [f"answer [ {self.answer} ]"]

    def retrieve(self, query: str, k: int | None = None) -> list[str]:
        """The top-``k`` documents (default ``top_k``) of the current knowledge base."""
        if self._kb is None:
            raise RuntimeError("search_qa: call reset() before retrieve()")
        k = self.top_k if k is None else check_int("k", k, 1)
        return self._kb.retrieve(query, k, fuzzy=self.fuzzy)

    # -- episode -----------------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = fresh_seed()
        kb_seed = seed if self.kb_seed is None else self.kb_seed
        self._kb_key = (kb_seed, self.kb_size)
        self._kb = build_kb(*self._kb_key)
        rng = np.random.default_rng([seed, 1])
        hops = self.hops[int(rng.integers(len(self.hops)))]
        self._question = make_question(self._kb, hops, rng)
        self.instruction = self._instruction()
        self._clock.start()
        first = self.question if self.render == "compact" else f"Question: {self.question}"
        obs, info = self._record(first, valid=True, success=False)
        if self.example_pool and self.render == "text":
            info["demonstration"] = self.demonstration()
        return obs, info

    def _instruction(self) -> str:
        if self.render == "compact":
            return (
                "Answer the question by searching a collection of short documents. Write "
                f"search[query] to see the {self.top_k} best matching documents, or "
                "answer[text] to give your final answer, which ends the episode. "
                f"Question: {self.question}"
            )
        return (
            "Answer a question about made-up people, companies, cities and countries. Only "
            "the documents know the facts: search them with a few words, each search shows "
            f"the {self.top_k} best matching documents. A question may need several "
            "searches. When you know the answer, give it; that ends the episode. "
            f"Question: {self.question}"
        )

    def _step(self, action: str) -> StepResult:
        out_of_steps = self._clock.tick()
        match = _ACTION.match(action)
        text = match.group(2).strip() if match else ""
        if match is None or not text:
            self._clock.done = out_of_steps
            obs, info = self._record(self._last[0], valid=False, success=False)
            if self.render == "text":  # the state (and the anchor) stays the last one
                obs = f"{INVALID_TEXT}\n{obs}"
            return obs, 0.0, False, out_of_steps, info
        if match.group(1).lower() == "search":
            self._clock.done = out_of_steps
            docs = self.retrieve(text)
            shown = self._shown_documents()
            results = "\n".join(f"[{i}] {d}" for i, d in enumerate(docs, 1)) or "no results"
            obs, info = self._record(results, valid=True, success=False)
            info["no_progress"] = set(docs) <= shown
            return obs, 0.0, False, out_of_steps, info
        exact = normalize_answer(text) == normalize_answer(self.answer)
        reward = float(exact) if self.reward == "em" else f1_score(text, self.answer)
        self._clock.done = True
        obs, info = self._record("correct" if exact else "wrong", valid=True, success=exact)
        unsearched = all(_search_query(a) is None for a in self._actions)
        copied = normalize_answer(text) == normalize_answer(self.example_answer)
        info["no_progress"] = unsearched and not exact
        info["task_blind"] = not exact and (unsearched or copied)
        return obs, reward, True, False, info

    def _shown_documents(self) -> set[str]:
        """The documents this episode's earlier searches showed."""
        queries = [q for q in map(_search_query, self._actions) if q is not None]
        return {doc for query in queries for doc in self.retrieve(query)}

    # -- branching --------------------------------------------------------------------------------
    def snapshot(self) -> SearchQASnapshot:
        obs, info = self._last
        return SearchQASnapshot(
            super().snapshot(), self._kb_key, self._require_question(), self._clock.state(),
            obs, dict(info),
        )  # fmt: skip

    def restore(self, snap: object) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, SearchQASnapshot):
            raise TypeError(f"SearchQA cannot restore a {type(snap).__name__}")
        self._seed, self._actions = snap.base.seed, list(snap.base.actions)
        self._kb_key, self._kb = snap.kb_key, build_kb(*snap.kb_key)
        self._question = snap.question
        self._clock.set_state(snap.clock)
        self._last = (snap.obs, dict(snap.info))
        return snap.obs, dict(snap.info)

    # -- text ------------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        """Template words, result markers, tool words and every possible entity name.

        With ``kb_seed`` set only that knowledge base's names are listed (a few dozen);
        otherwise all names the generator can produce (about 4 000). Empty (open
        vocabulary) for the ``text`` rendering.
        """
        if self.render == "text":
            return []
        names = (
            all_names() if self.kb_seed is None else build_kb(self.kb_seed, self.kb_size).names()
        )
        words = _template_words() | set(_OBS_WORDS) | set(names)
        words.update(f"[{i}]" for i in range(1, self.top_k + 1))
        return sorted(words)

    def _require_question(self) -> Question:
        if self._question is None:
            raise RuntimeError("search_qa: call reset() first")
        return self._question

    def _record(self, obs: str, valid: bool, success: bool) -> tuple[str, dict[str, Any]]:
        question = self._require_question()
        info = {
            "anchor": obs,
            "valid": valid,
            "success": success,
            "admissible": None,
            "answer": question.answer,
            "question": question.text,
            "hops": len(question.relations),
            "steps": self._clock.steps,
            "task_blind": False,  # set by an answer that ignores the task (module docstring)
        }
        self._last = (obs, info)
        return obs, dict(info)
