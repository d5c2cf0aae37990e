"""Limits of the run configuration, checked before any work: the counts that size memory
(episodes per round, groups, turns, new tokens, workers) and what may name a run folder.

``cairn.train.schema`` and ``cairn.train.rollout_sections`` bound their keys with these;
``Config.name`` is checked with ``run_name_problem``.
"""

from __future__ import annotations

__all__ = [
    "MAX_EPISODES",
    "MAX_GROUPS",
    "MAX_GROUP_SIZE",
    "MAX_NEW_TOKENS",
    "MAX_ROUNDS",
    "MAX_RUN_NAME",
    "MAX_TURNS",
    "MAX_WORKERS",
    "run_name_problem",
]

# -- limits, checked before any work ------------------------------------------------------------
# Counts that size memory. A round of B x G episodes is held whole (prompt and action ids,
# log-probs, text): about 200 KB per episode of 15 turns of 512-token prompts, so 65,536
# episodes take ~13 GB, what a 24 GB machine holds beside a model and its optimizer.
MAX_EPISODES = 65_536  # rollout.groups x rollout.group_size, eval.episodes, warmup.demos
MAX_GROUPS = 4096
MAX_GROUP_SIZE = 1024
MAX_ROUNDS = 16  # DAPO sampling rounds (each up to B x G more episodes)
MAX_TURNS = 10_000
MAX_NEW_TOKENS = 32_768
MAX_WORKERS = 1024
MAX_RUN_NAME = 128


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run folder under ``out_dir`` (None when it can): one folder
    name (no path separator, not '.' or '..', no '..'), printable (no newline or control
    character), no '[' or ']' (rich markup would print another name), at most 128 chars."""
    if not name or not name.strip():
        return "a run name must not be empty"
    if len(name) > MAX_RUN_NAME:
        return f"a run name has at most {MAX_RUN_NAME} characters, this one {len(name)}"
    if "/" in name or "\\" in name or ".." in name:
        return "a run name is one folder name: no '/' or '\\' and no '..'"
    if not name.isprintable():
        return "a run name must be printable (no newline, tab or control character)"
    if "[" in name or "]" in name:
        return "a run name must not hold '[' or ']' (console markup)"
    return None
