"""Untrained pass@k per TextWorld-Express game: where does the real model have a foothold?

``twx_smol`` trains SmolLM2-135M-Instruct on one TextWorld-Express game. This samples the
untrained model (fresh LoRA adapters) ``n`` times on each of ``tasks`` held-out games
(the preset's test split, ``eval.env_options``) of every game below, with the preset's
prompt (the admissible actions listed) and sampling, through
``pass_at_k_levels.measure``: pass@k, the share of mixed groups (what GRPO-style updates
learn from) and the seconds it took. The game with the best foothold at a useful
difficulty is the preset's.

    nice python benchmarks/real/twx_games.py --tasks 8 --n 4 --record
    python benchmarks/real/twx_games.py --games coin3 --set rollout.restrict_to_admissible=false

``--record`` writes section ``twx_smol`` of benchmarks/results/real/pass_at_k_levels.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pass_at_k_levels import HEADER, RECORD, levels, measure, table  # also puts src/ on the path

from _lib.records import write_section
from cairn.train.config import load_config

#: label -> (game, game_params, max_steps): the package's games at small sizes.
GAMES: dict[str, tuple[str, str, int]] = {
    "coin3": ("coin", "numLocations=3,includeDoors=0,numDistractorItems=0", 8),
    "coin5": ("coin", "numLocations=5,includeDoors=0,numDistractorItems=0", 12),
    "coin5doors": ("coin", "numLocations=5,includeDoors=1,numDistractorItems=0", 12),
    "simonsays": ("simonsays", "", 8),
    "sorting": ("sorting", "", 10),
    "arithmetic": ("arithmetic", "", 8),
    "mapreader": ("mapreader", "", 15),
    "peckingorder": ("peckingorder", "", 12),
    "twc": ("twc", "numLocations=1,numItemsToPutAway=2", 10),
}


def game_overrides(label: str) -> list[str]:
    """``--set`` items that make the preset play game ``label`` of ``GAMES``."""
    game, params, steps = GAMES[label]
    return [
        f"env.options.game={game}",
        f'env.options.game_params="{params}"',
        f"env.options.max_steps={steps}",
        f"rollout.max_turns={steps}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="twx_smol")
    parser.add_argument("--games", nargs="+", default=list(GAMES), choices=list(GAMES))
    parser.add_argument("--tasks", type=int, default=4, help="held-out games per game")
    parser.add_argument("--n", type=int, default=4, help="samples per game")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--record", action="store_true", help=f"write a section of {RECORD}")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for label in args.games:
        cfg = load_config(args.preset, [*game_overrides(label), *args.overrides])
        (row,) = measure(cfg, args.tasks, args.n, only=[len(levels(cfg)) - 1])  # held-out
        rows.append({**row, "level": f"{label}: {cfg.env.options['game']} "
                     f"{cfg.env.options['game_params'] or '(defaults)'}, "
                     f"{cfg.env.options['max_steps']} steps"})  # fmt: skip
    text = table(rows)
    print(text)
    if args.record:
        command = " ".join(argv if argv is not None else sys.argv[1:])
        body = f"`python benchmarks/real/twx_games.py {command}`\n\n{text}"
        write_section(RECORD, args.preset, "untrained pass@k per game", body, HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
