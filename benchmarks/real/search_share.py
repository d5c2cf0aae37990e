"""Per iteration of a search_qa run: the share of the policy's own episodes that search
before they answer (their first action is ``search[...]``), beside the sampled success, on
all questions and by hops, and the mean actions an episode took.

Demonstrations (LUFFY's off-policy rows, ``source`` 1) are left out: they always search.
A question's hops are its relations, each phrased "the <relation> of" by the knowledge
base's templates (``cairn.envs._kb.RELATIONS``), so they are counted by its "of"s.

    python benchmarks/real/search_share.py runs/real/search_qa_smol-s0/<run>
    python benchmarks/real/search_share.py RUN --summary 3   # the first and last 3 iterations
    python benchmarks/real/search_share.py --held-out RUN/eval/<checkpoint>-64.episodes.jsonl.gz

``--held-out``: the greedy held-out episodes that ``cairn eval`` keeps beside its result,
a row per file.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

COLUMNS = ("episodes", "search first", "success", "1-hop success", "2-hop success", "actions")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def hops(question: str) -> int:
    """The relations of a search_qa question (module docstring)."""
    return max(1, question.split().count("of"))


def own_episodes(path: Path) -> list[dict]:
    """The policy's own episodes (with a step) of one gzip JSONL file of episode records."""
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r.get("source", 0) == 0 and r["steps"]]


def rows_of(run: Path) -> list[tuple[int, list[dict]]]:
    """(iteration, the policy's own episodes) per trajectory file of ``run``."""
    paths = sorted((run / "trajectories").glob("iter_*.jsonl.gz"))
    return [(int(path.name[5:11]), own_episodes(path)) for path in paths]


def stats(episodes: list[dict]) -> dict[str, float | None]:
    """The ``COLUMNS`` of ``episodes`` (None where no episode counts)."""
    first = [r["steps"][0]["action"].strip().lower().startswith("search") for r in episodes]
    by_hops = {h: [float(r["success"]) for r in episodes if hops(r["meta"]["question"]) == h]
               for h in (1, 2)}  # fmt: skip
    return {
        "episodes": float(len(episodes)),
        "search first": _mean([float(x) for x in first]),
        "success": _mean([float(r["success"]) for r in episodes]),
        "1-hop success": _mean(by_hops[1]),
        "2-hop success": _mean(by_hops[2]),
        "actions": _mean([float(len(r["steps"])) for r in episodes]),
    }


def _row(label: str, s: dict[str, float | None]) -> str:
    cells = [f"{int(v)}" if k == "episodes" and v is not None else
             "-" if v is None else f"{v:.2f}" for k, v in s.items()]  # fmt: skip
    return f"| {label} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path, nargs="?", help="a run directory (with trajectories/)")
    p.add_argument(
        "--summary",
        type=int,
        default=0,
        metavar="K",
        help="only the first and the last K iterations, pooled",
    )
    p.add_argument("--held-out", type=Path, nargs="+", default=[], metavar="FILE",
                   help="cairn eval's episodes files (eval/*.episodes.jsonl.gz)")  # fmt: skip
    args = p.parse_args(argv)
    if (args.run is None) == (not args.held_out):
        p.error("give a run directory or --held-out files, one of the two")
    print(f"| {'held-out' if args.held_out else 'iterations'} | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for path in args.held_out:
        print(_row(path.name, stats(own_episodes(path))))
    if args.held_out:
        return 0
    rows = rows_of(args.run)
    if not rows:
        p.error(f"{args.run}: no trajectories/iter_*.jsonl.gz (give a run directory)")
    if args.summary:
        k = args.summary
        for part in (rows[:k], rows[-k:]):
            label = f"{part[0][0]}-{part[-1][0]}"
            print(_row(label, stats([e for _, eps in part for e in eps])))
        return 0
    for it, episodes in rows:
        print(_row(str(it), stats(episodes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
