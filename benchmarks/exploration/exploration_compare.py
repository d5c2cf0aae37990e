"""Exploration claims (EMPO2 memory, LUFFY cold start, LADDER curriculum), each a
`cairn compare` over variants of a preset.

    python benchmarks/exploration/exploration_compare.py cold_start [--seeds 3] [--jobs 2] [--out D]
    python benchmarks/exploration/exploration_compare.py memory     [--seeds 3] [--jobs 2] [--out D]
    python benchmarks/exploration/exploration_compare.py ladder     [--seeds 3] [--jobs 2] [--out D]
    python benchmarks/exploration/exploration_compare.py memory --variants empo2_no_offpolicy ...

Every run is one section of ``benchmarks/results/exploration/exploration_compare.md``,
labelled ``<claim>[_<variants>][_<tag>]``: ``--variants`` runs a subset and ``--tag`` marks
another budget, so a partial run never overwrites the full table of its claim (other
sections are kept).

A variant is a preset plus ``--set``-style overrides; the resolved configs are written to
``OUT/configs/`` and trained on seeds 0..N-1 with ``cairn.train.compare`` (runs resume
where they stopped). The table (per-seed final greedy success on held-out seeds, the last
iteration's rollout success, episodes, seconds) goes to that section with the command that
produced it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from cairn.report.plots import plot_compare_dir
from cairn.train.compare import compare, write_config
from cairn.train.runlog import read_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_section

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "exploration" / "exploration_compare.md"
HEADER = (
    "# Exploration claims: EMPO2 memory, LUFFY cold start, LADDER curriculum\n\n"
    "Written by `python benchmarks/exploration/exploration_compare.py CLAIM [--variants ...] "
    "[--tag TAG]`: each\nrun is one section below, labelled `CLAIM[_VARIANTS][_TAG]` "
    "(re-running a label rewrites its\nsection and keeps the others).\n"
)

# claim -> (preset, shared overrides, {variant: overrides}, what the claim is)
CLAIMS: dict[str, tuple[str, list[str], dict[str, list[str]], str]] = {
    "cold_start": (
        "configs/sokoban_luffy.yaml",
        [],
        {
            "grpo": ["exploration.demos.enabled=false", "rollout.group_size=8"],
            "grpo_luffy": [],
        },
        "On a harder sokoban (7x7, 1 box, optimal solutions of 8-14 moves; a random policy "
        "solves 0.1 %), GRPO from a random tiny model stays at 0 success while GRPO + LUFFY "
        "(7 on-policy + 1 solver demonstration per group) becomes clearly positive on "
        "held-out seeds within the same episode budget.",
    ),
    "memory": (
        "configs/frozenlake_empo2.yaml",
        [],
        {
            "grpo": ["exploration.memory.enabled=false", "rewards=[]"],
            "empo2": [],
            "empo2_no_offpolicy": ["exploration.memory.probs={on_policy: 0.75, tips: 0.25}"],
            "empo2_no_tips_mode": ["exploration.memory.probs={on_policy: 0.75, off_policy: 0.25}"],
        },
        "On FrozenLake 8x8 (reward only at the goal), GRPO + EMPO2 (memory modes + novelty "
        "reward) against GRPO with the same episodes, and each mode's ablation.",
    ),
    "ladder": (
        "configs/integration_ladder.yaml",
        [],
        {
            "originals": ["exploration.variants.enabled=false"],
            "ladder": [],
        },
        "On integrals above the model's level, curriculum training on LADDER variants "
        "against training on the originals alone (greedy success on held-out originals).",
    ),
}


def _variant_config(preset: str, overrides: list[str], name: str, out: Path) -> Path:
    return write_config(
        ROOT / preset, [*overrides, f"name={name}"], out / "configs" / f"{name}.yaml"
    )


def _last_rollout(run_dir: Path) -> float | None:
    rows = read_metrics(run_dir)
    return rows[-1].get("rollout/success") if rows else None


def _table(summary: dict, out: Path) -> list[str]:
    lines = [
        "| variant | eval success per seed | mean ± sd | last rollout success per seed "
        "| episodes | train s |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in summary["configs"].items():
        finals = np.array(c["final_success"], dtype=float)
        roll = [_last_rollout(out / name / f"seed{s}") for s in range(c["seeds"])]
        eps = sorted({int(curve[-1][0]) for curve in c["curves"] if curve})
        sd = finals.std(ddof=1) if len(finals) > 1 else 0.0
        lines.append(
            f"| {name} | {', '.join(f'{x:.3f}' for x in finals)} | {finals.mean():.3f} ± "
            f"{sd:.3f} | {', '.join('-' if r is None else f'{r:.3f}' for r in roll)} | "
            f"{'/'.join(map(str, eps))} | {', '.join(f'{t:.0f}' for t in c['train_seconds'])} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("claim", choices=sorted(CLAIMS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--variants", nargs="+", default=None, help="run only these variants")
    p.add_argument("--tag", default="", help="suffix of the section label (another budget, say)")
    args = p.parse_args(argv)
    preset, shared, variants, claim = CLAIMS[args.claim]
    record = args.claim
    if args.variants:
        unknown = sorted(set(args.variants) - set(variants))
        if unknown:
            p.error(f"unknown variants {unknown} for {args.claim}; known: {sorted(variants)}")
        variants = {n: o for n, o in variants.items() if n in args.variants}
        record += "_" + "_".join(variants)
    if args.tag:
        record += f"_{args.tag}"
    out = Path(args.out or f"runs/exploration-{args.claim}")
    configs = [
        str(_variant_config(preset, [*shared, *o, *args.overrides], name, out))
        for name, o in variants.items()
    ]
    start = time.time()
    summary = compare(configs, args.seeds, out, jobs=args.jobs)
    wall = time.time() - start
    plot_compare_dir(summary, out)  # as `cairn compare` does: per-run and overall curves
    command = " ".join(["python benchmarks/exploration/exploration_compare.py", *sys.argv[1:]])
    text = [
        claim,
        "",
        f"Command: `{command}` (preset `{preset}`; wall {wall / 60:.1f} min on the shared "
        "2-core CPU machine, runs in parallel with one torch thread each).",
        "",
        "Variants (overrides of the preset):",
        "",
        *[
            f"- `{n}`: {' '.join(f'`{x}`' for x in o) or '(the preset)'}"
            for n, o in variants.items()
        ],
        "",
        *_table(summary, out),
        "",
        "Eval success: greedy episodes on held-out seeds after the last iteration (no tips, "
        "no demonstrations). Rollout success: sampled on-policy episodes of the last "
        "iteration (demonstrations excluded; memory-guided ones included).",
    ]
    write_section(RECORD, record, f"Exploration benchmark: {args.claim}", "\n".join(text), HEADER)
    (out / "summary_exploration.json").write_text(json.dumps(summary, indent=2, default=str))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
