"""cairn: reinforcement learning for multi-turn LLM agents.

Exploration (EMPO2, LUFFY, TreePO, LADDER, SGE, SSRL) and credit assignment (GiGPO, ELPO,
ProxMO, Step-GRPO, ARPO, VinePPO, IGPO) in one library, with the baselines they are
measured against.

    import cairn
    result = cairn.train("countdown_gigpo", overrides=["train.iterations=2"])
    print(result.run_dir, result.summary["eval_success"])

(``cairn.train.api``: configs as a Config, a dict, a path or a preset; callbacks.)
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``cairn.train`` (the package, callable: ``cairn.train(config)``) on first use, so
    that ``import cairn`` stays free of pydantic and torch."""
    if name == "train":
        import importlib

        return importlib.import_module("cairn.train")
    raise AttributeError(f"module 'cairn' has no attribute {name!r}")
