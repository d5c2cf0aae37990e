"""The registries of the exploration methods' parts, by the name a config gives them: tip
writers and embedders (EMPO2 memory), demonstration sources (LUFFY), variant generators
(LADDER).

They live apart from the parts (``tips``, ``embed``, ``demos``, ``variants``) so that the
config checks a name without importing them (``variants`` imports sympy); each part's module
re-exports its registry. Register your own with e.g.
``WRITERS.register("mine", "my_package.tips:MyWriter")``; ``exploration.memory.writer: mine``
then passes the config check.
"""

from __future__ import annotations

from cairn._registry import ImportRegistry

__all__ = ["EMBEDDERS", "GENERATORS", "SOURCES", "WRITERS"]

WRITERS = ImportRegistry(
    "tip writer",
    {
        "template": "cairn.exploration.tips:TemplateTipWriter",
        "policy": "cairn.exploration.tips:PolicyTipWriter",
    },
)

EMBEDDERS = ImportRegistry(
    "embedder",
    {
        "auto": "cairn.exploration.embed:auto_embedder",
        "minilm": "cairn.exploration.embed:MiniLMEmbedder",
        "tfidf": "cairn.exploration.embed:TfidfEmbedder",
    },
)

SOURCES = ImportRegistry(
    "demo source",
    {
        "solver": "cairn.exploration.demos:SolverDemos",
        "jsonl": "cairn.exploration.demos:JsonlDemos",
    },
)

GENERATORS = ImportRegistry(
    "variant generator",
    {
        "symbolic": "cairn.exploration.variants:SymbolicVariants",
        "llm": "cairn.exploration.variants:LLMVariants",
    },
)
