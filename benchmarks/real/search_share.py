"""Per iteration of a search_qa run: the share of the policy's own episodes that search
before they answer (their first action is ``search[...]``), beside the sampled success.

Demonstrations (LUFFY's off-policy rows, ``source`` 1) are left out: they always search.

    python benchmarks/real/search_share.py runs/real/search_qa_smol-s0/<run>
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def shares(run: Path) -> list[tuple[int, int, float, float]]:
    """(iteration, episodes, search-first share, success) per trajectory file of ``run``."""
    out = []
    for path in sorted((run / "trajectories").glob("iter_*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            rows = [json.loads(line) for line in f]
        own = [r for r in rows if r.get("source", 0) == 0 and r["steps"]]
        first = [r["steps"][0]["action"].strip().lower().startswith("search") for r in own]
        success = [bool(r["success"]) for r in own]
        n = max(len(own), 1)
        out.append((int(path.name[5:11]), len(own), sum(first) / n, sum(success) / n))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path, help="a run directory (with trajectories/)")
    args = p.parse_args(argv)
    print("| iteration | own episodes | search first | sampled success |")
    print("|---:|---:|---:|---:|")
    for it, n, share, success in shares(args.run):
        print(f"| {it} | {n} | {share:.2f} | {success:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
