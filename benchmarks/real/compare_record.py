"""A `cairn compare` of methods on a real model, written as a record with curves.

`cairn compare` trains each config on seeds 0..N-1 and writes ``compare.json`` (held-out
greedy success at the end with a 95 % Student-t interval over seeds). This reads that
folder and every seed's run directory and writes one record: the final held-out success
per arm with its interval, the per-seed difference between the arms (a seed fixes the
task stream and the adapters' initialisation, so the arms' seeds are paired) with its
interval, the table of ``real_models.py`` per arm (format errors, invalid actions,
task-blind share, policy entropy, speed) and a PNG of the curves against training minutes.

    nice cairn compare sokoban_smol benchmarks/real/sokoban_smol_grpo.yaml --seeds 3 \\
        --jobs 3 --set train.time_budget_s=1800 --set train.iterations=1000 \\
        --set eval.every=0 --out runs/cmp/sokoban
    python benchmarks/real/compare_record.py runs/cmp/sokoban \\
        --record benchmarks/results/real/sokoban_grpo_vs_gigpo.md \\
        --command "the cairn compare command" --commit 12870b0 --load "what else ran"

A hand-written reading between the ``<!-- reading -->`` markers is kept from the record
already there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from real_models import (  # noqa: E402
    kept_reading,
    per_seed,
    plot,
    shown,
    summarize_run,
    table,
    threads_of,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import mean_ci, write_record  # noqa: E402


def arm_results(folder: Path) -> dict[str, list[dict]]:
    """Per arm (its label in ``compare.json``), the ``real_models`` numbers of each seed."""
    summary = json.loads((folder / "compare.json").read_text())
    results: dict[str, list[dict]] = {}
    for label, arm in summary["configs"].items():
        runs = sorted((folder / label).glob("seed*"), key=lambda p: int(p.name[4:]))
        if len(runs) != arm["seeds"]:
            raise SystemExit(f"{folder / label}: {len(runs)} seed folders, compare.json has "
                             f"{arm['seeds']}")  # fmt: skip
        results[label] = [summarize_run(r, label, int(r.name[4:]), None, None) for r in runs]
    return results


def headline(results: dict[str, list[dict]]) -> str:
    """Final held-out success per arm (mean ± 95 % t-interval, per seed) and, for two arms,
    the paired per-seed difference."""
    lines = ["| arm | held-out success before | after, per seed | after, mean ± 95 % CI |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for label, rs in results.items():
        before = ", ".join(f"{r['success_before']:.3f}" for r in rs)
        after = [r["success_after"] for r in rs]
        lines.append(f"| {label} | {before} | {', '.join(f'{a:.3f}' for a in after)} | "
                     f"{mean_ci(after)} |")  # fmt: skip
    if len(results) == 2:
        (a, ra), (b, rb) = results.items()
        if [r["seed"] for r in ra] == [r["seed"] for r in rb]:
            pairs = zip(ra, rb, strict=True)
            diff = np.array([x["success_after"] - y["success_after"] for x, y in pairs])
            per = ", ".join(f"{d:+.3f}" for d in diff)
            lines.append("")
            lines.append(f"Paired difference {a} - {b}, seed by seed: {per}; mean ± 95 % CI "
                         f"{mean_ci(diff.tolist())}.")  # fmt: skip
    return "\n".join(lines)


def record(results: dict[str, list[dict]], args: argparse.Namespace, png: str) -> str:
    reading = kept_reading(args.record)
    flat = [r for rs in results.values() for r in rs]
    arms = " vs ".join(results)
    return f"""# {args.title or arms}

Commit: `{args.commit}` (the tree the runs started from)

Command: `{args.command}`, then `python benchmarks/real/compare_record.py {args.folder}
--record {shown(args.record)}` for this file. Greedy evaluation of the untrained
model first and of the trained one at the end, on the presets' held-out seeds; training
time per run is `train.time_budget_s`, evaluation excluded.
Machine: 2 CPU cores, torch CPU, {threads_of(flat)}; {args.load}.

{headline(results)}

Mean (min-max) over seeds, one row per arm:

{table(flat)}

![curves]({png})

### Per seed

{per_seed(flat)}

### Reading

<!-- reading -->
{reading}<!-- /reading -->
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path, help="a cairn compare output folder")
    p.add_argument("--record", type=Path, required=True, help="the record file to write")
    p.add_argument("--command", required=True, help="the cairn compare command, for the record")
    p.add_argument("--commit", required=True, help="the commit the runs started from")
    p.add_argument("--load", default="nothing else ran", help="what else ran, for the record")
    p.add_argument("--title", default="", help="the record's title")
    args = p.parse_args(argv)
    args.record = args.record.resolve()
    args.commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{args.commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # the full hash: the form a record's Commit line takes
    results = arm_results(args.folder)
    png = args.record.with_suffix(".png")
    write_record(args.record, record(results, args, png.name))
    plot([r for rs in results.values() for r in rs], args.folder, png, share_y=True)
    print(f"wrote {shown(args.record)} and {png.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
