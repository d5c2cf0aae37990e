"""Synthetic knowledge bases for multi-hop search QA (private helper of ``search_qa``).

Entities get made-up names built from syllables, so a model cannot answer from real-world
knowledge; facts are functional typed relations (each subject has exactly one object), one
short document per fact, and questions compose 1-3 relations into one noun phrase
("what is the country of the birthplace of Kalomi ?") whose gold chain of searches
retrieves one fact per hop. All text comes from fixed templates, so the word set is closed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

import bm25s
import numpy as np

__all__ = [
    "RELATIONS",
    "KnowledgeBase",
    "Question",
    "all_names",
    "build_kb",
    "make_question",
    "template_words",
    "tokenize",
]

SYLLABLES: tuple[str, ...] = (
    "ka", "lo", "mi", "ven", "tor", "zu", "bel", "dra", "sa", "qui", "ron", "tha", "gar",
    "fen", "lu", "pol",
)  # fmt: skip
TYPES: tuple[str, ...] = ("person", "company", "city", "country")
#: The least difflib ratio at which a query word is read as a word of the documents
#: (``KnowledgeBase.spelled``): one letter off in a name of 5-9 letters passes, another
#: name of the knowledge base (a few shared syllables) mostly does not.
SPELLING_CUTOFF = 0.8


@dataclass(frozen=True)
class Relation:
    """A functional relation ``subject_type -> object_type`` and its fixed wordings."""

    subject_type: str
    object_type: str
    document: str  # fact sentence, {s} subject, {o} object
    phrase: str  # noun phrase denoting the object, {s} subject
    query: str  # the gold search for this hop, {s} subject


RELATIONS: dict[str, Relation] = {
    "born_in": Relation("person", "city", "{s} was born in {o}", "the birthplace of {s}",
                        "{s} born"),
    "works_for": Relation("person", "company", "{s} works for {o}", "the employer of {s}",
                          "{s} works for"),
    "founded_by": Relation("company", "person", "{s} was founded by {o}", "the founder of {s}",
                           "{s} founded by"),
    "headquartered_in": Relation("company", "city", "{s} is headquartered in {o}",
                                 "the headquarters of {s}", "{s} headquartered in"),
    "located_in": Relation("city", "country", "{s} is a city in {o}", "the country of {s}",
                           "{s} city in"),
    "capital": Relation("country", "city", "{o} is the capital of {s}", "the capital of {s}",
                        "capital of {s}"),
    "leader": Relation("country", "person", "{o} is the leader of {s}", "the leader of {s}",
                       "leader of {s}"),
}  # fmt: skip

_STOPWORDS = frozenset(
    ("a", "an", "the", "of", "in", "for", "by", "is", "was", "who", "what", "where", "which",
     "whom", "whose", "did", "does", "do", "and", "to", "at")
)  # fmt: skip
_QUESTION_START = {
    "person": "who is",
    "company": "what is",
    "city": "what is",
    "country": "what is",
}


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens without stopwords (the retriever's analyser)."""
    return [w for w in re.findall(r"\w+", text.lower()) if w not in _STOPWORDS]


def template_words() -> set[str]:
    """Every non-name word that documents and questions can contain."""
    words = {"?", *(w for start in _QUESTION_START.values() for w in start.split())}
    for rel in RELATIONS.values():
        for text in (rel.document, rel.phrase, rel.query):
            words.update(w for w in text.split() if w not in ("{s}", "{o}"))
    return words


def all_names() -> list[str]:
    """Every name the generator can produce (2 or 3 syllables, capitalised)."""
    two = [a + b for a in SYLLABLES for b in SYLLABLES]
    names = two + [ab + c for ab in two for c in SYLLABLES]
    reserved = template_words() | _STOPWORDS
    return [n.capitalize() for n in names if n not in reserved]


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    chain: tuple[str, ...]  # entities from the start to the answer, (hops + 1,)
    relations: tuple[str, ...]  # (hops,)
    gold_queries: tuple[str, ...]  # (hops,)


class KnowledgeBase:
    """Entities, facts, one document per fact and a BM25 index over the documents."""

    def __init__(self, entities: dict[str, list[str]], facts: dict[tuple[str, str], str]):
        self.entities = entities
        self.facts = facts  # (subject, relation) -> object
        self.documents: list[str] = [
            RELATIONS[rel].document.format(s=subj, o=obj) for (subj, rel), obj in facts.items()
        ]
        self.type_of = {name: t for t, names in entities.items() for name in names}
        corpus = [tokenize(d) for d in self.documents]
        self.words = sorted({w for doc in corpus for w in doc})  # the index's vocabulary
        self._bm25 = bm25s.BM25()
        self._bm25.index(corpus, show_progress=False)

    def retrieve(self, query: str, k: int, fuzzy: bool = False) -> list[str]:
        """The top-``k`` documents for ``query`` by BM25 score; zero-score documents dropped.

        ``fuzzy``: a query word the documents lack is read as the closest word they hold
        (``spelled``), as a search engine corrects a misspelt name."""
        tokens = tokenize(query)
        if fuzzy:
            tokens = [w for w in map(self.spelled, tokens) if w is not None]
        if not tokens:
            return []
        scores = np.asarray(self._bm25.get_scores(tokens))  # (D,)
        top = np.argsort(-scores, kind="stable")[:k]  # ties keep document order
        return [self.documents[i] for i in top if scores[i] > 0]

    def spelled(self, word: str) -> str | None:
        """``word`` if the documents hold it, else their closest word by difflib's ratio
        (at least ``SPELLING_CUTOFF``: ``polbelon`` is ``polbelron``), else None."""
        if word in self.words:
            return word
        close = difflib.get_close_matches(word, self.words, n=1, cutoff=SPELLING_CUTOFF)
        return close[0] if close else None

    def names(self) -> list[str]:
        return [n for names in self.entities.values() for n in names]


def _draw_names(rng: np.random.Generator, count: int) -> list[str]:
    reserved = template_words() | _STOPWORDS
    names: list[str] = []
    while len(names) < count:
        parts = rng.choice(len(SYLLABLES), size=int(rng.integers(2, 4)))
        name = "".join(SYLLABLES[i] for i in parts)
        if name not in reserved and name.capitalize() not in names:
            names.append(name.capitalize())
    return names


@lru_cache(maxsize=16)
def build_kb(seed: int, size: int) -> KnowledgeBase:
    """The knowledge base of ``seed`` with ``size`` people (cached; treat as read-only).

    Counts: ``size`` people, ``max(2, size // 3)`` companies, ``max(3, size // 2)`` cities,
    ``max(2, size // 4)`` countries; every country has at least one city and its capital
    is one of its cities.
    """
    rng = np.random.default_rng([seed, 0])
    counts = {"person": size, "company": max(2, size // 3), "city": max(3, size // 2)}
    counts["country"] = max(2, size // 4)
    names = _draw_names(rng, sum(counts.values()))
    entities, start = {}, 0
    for t in TYPES:
        entities[t] = names[start : start + counts[t]]
        start += counts[t]
    return KnowledgeBase(entities, _draw_facts(rng, entities))


def _draw_facts(
    rng: np.random.Generator, entities: dict[str, list[str]]
) -> dict[tuple[str, str], str]:
    def pick(entity_type: str) -> str:
        return entities[entity_type][int(rng.integers(len(entities[entity_type])))]

    facts: dict[tuple[str, str], str] = {}
    countries = entities["country"]
    for i, city in enumerate(entities["city"]):  # the first cities cover every country
        facts[(city, "located_in")] = countries[i] if i < len(countries) else pick("country")
    for country in countries:
        own = [c for c in entities["city"] if facts[(c, "located_in")] == country]
        facts[(country, "capital")] = own[int(rng.integers(len(own)))]
        facts[(country, "leader")] = pick("person")
    for person in entities["person"]:
        facts[(person, "born_in")] = pick("city")
        facts[(person, "works_for")] = pick("company")
    for company in entities["company"]:
        facts[(company, "founded_by")] = pick("person")
        facts[(company, "headquartered_in")] = pick("city")
    return facts


def make_question(kb: KnowledgeBase, hops: int, rng: np.random.Generator) -> Question:
    """A ``hops``-relation question whose chain visits no entity twice."""
    names = kb.names()
    for _ in range(1000):
        chain = [names[int(rng.integers(len(names)))]]
        relations: list[str] = []
        for _ in range(hops):
            options = [
                r for r, rel in RELATIONS.items() if rel.subject_type == kb.type_of[chain[-1]]
            ]
            relations.append(options[int(rng.integers(len(options)))])
            chain.append(kb.facts[(chain[-1], relations[-1])])
        if len(set(chain)) == len(chain):
            return _phrase(kb, chain, relations)
    raise ValueError(f"no {hops}-hop question without repeated entities in this knowledge base")


def _phrase(kb: KnowledgeBase, chain: list[str], relations: list[str]) -> Question:
    phrase = chain[0]
    for rel in relations:
        phrase = RELATIONS[rel].phrase.format(s=phrase)
    start = _QUESTION_START[kb.type_of[chain[-1]]]
    queries = tuple(RELATIONS[r].query.format(s=s) for r, s in zip(relations, chain, strict=False))
    return Question(f"{start} {phrase} ?", chain[-1], tuple(chain), tuple(relations), queries)
