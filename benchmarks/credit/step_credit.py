"""Step- and turn-level credit against GRPO, each where its mechanism has something to act on.

Studies (``--study``; each is one section of benchmarks/results/credit/step_credit.md):

- ``rooms_4_8`` (default): GRPO vs GiGPO vs ProxMO on longer sokoban rooms, below.
- ``countdown_step_grpo``: Step-GRPO (outcome + 0.1 x StepRAR, the share of the reference
  solution's intermediate equations found in the answer) vs outcome-only GRPO, countdown.
- ``countdown_warmup``: the same two arms, both after the same format warm-up.
- ``search_qa_igpo``: IGPO (information-gain turn rewards) vs GRPO vs GiGPO on multi-hop
  search QA, where the outcome is sparse and each search can raise p(gold answer).


GiGPO's step term needs states that repeat inside a group; on the demo rooms (1-5 moves)
episodes are short and it did not speed learning (credit/sample_efficiency.md). Here the
rooms need 4-8 moves within 20 steps, so a random policy wanders and revisits states, and
a tiny model still learns from the few sampled successes (a uniform random policy solves
about 5 % of them). Each arm is its sokoban preset with the room overrides below, the same
episode budget, learning-rate decay and evaluation; GiGPO's episode term is set explicitly
(``episode_norm: mean_std``, the paper's eq. 3, as GRPO's ``norm: mean_std``) so the arms
differ only in the step term.

    python benchmarks/credit/step_credit.py                 # 3 seeds x 3 arms, 2 runs at a time
    python benchmarks/credit/step_credit.py --study countdown_step_grpo --set train.threads=1
    python benchmarks/credit/step_credit.py --study countdown_warmup --set train.threads=1
    python benchmarks/credit/step_credit.py --study search_qa_igpo --set train.threads=1
    python benchmarks/credit/step_credit.py --quick         # 1 seed, 2 iterations, not recorded
    python benchmarks/credit/step_credit.py --study search_qa_igpo --episodes 10240 \
        --label search_qa_igpo_10k                   # another budget, its own section

Records, as section ``--study`` of benchmarks/results/credit/step_credit.md: episodes to
the target greedy success per seed, final and mean-over-run greedy success (mean with a
95 % t-interval over seeds), and how often step groups formed: the fraction of step rows
whose anchor state occurs at least twice in its group (rows in non-singleton step groups),
measured on the groups the trainer dumps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from cairn.report.plots import plot_compare_dir
from cairn.train.compare import compare, write_config
from cairn.train.runlog import read_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import mean_ci, write_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "credit"
RECORD = RESULTS / "step_credit.md"
HEADER = (
    "# Step- and turn-level credit against GRPO\n\n"
    "Written by `python benchmarks/credit/step_credit.py --study STUDY` (one section per study).\n"
)


@dataclass(frozen=True)
class Study:
    title: str
    shared: list[str]  # overrides of every arm
    arms: dict[str, tuple[str, list[str]]]  # arm -> (preset, its own overrides)
    episodes: int  # default budget per run
    note: str  # how the evaluation is done, for the record
    warm_start: bool = False  # arms start from a warm-up: also measure against its eval
    info_gain: bool = False  # record IGPO's turn-reward signal (the info_gain column)


ROOMS = [
    "env.options.min_solution=4",
    "env.options.max_solution=8",
    "env.options.max_steps=20",
]
SHARED = [
    *ROOMS,
    "optim.lr_schedule=linear",
    "optim.lr_final=0.1",
    "eval.every=4",
    "eval.episodes=100",
    "eval.target=0.15",
    "log.trajectories_every=2",
    "train.time_budget_s=null",
]
SOKOBAN_ARMS = {  # arm -> (preset, overrides)
    "grpo": ("sokoban_grpo.yaml", ["advantage.options.norm=mean_std"]),
    "gigpo": (
        "sokoban_gigpo.yaml",
        [
            "advantage.options.episode_norm=mean_std",
            "advantage.options.norm=mean",
            "advantage.options.gamma=0.95",
            "advantage.options.step_weight=1.0",
        ],
    ),
    "proxmo": ("sokoban_proxmo.yaml", []),
}
TEXT_SHARED = ["eval.every=4", "eval.target=0.2", "train.time_budget_s=null"]
#: a format warm-up before RL (cairn.train.warmup): a random tiny model writes no parsable
#: expression, so neither outcome nor step reward has anything to act on without it
COUNTDOWN_WARMUP = [
    "warmup.enabled=true",
    "warmup.demos=1024",
    "warmup.epochs=16",
    "warmup.minibatch_size=64",
]
QA_SHARED = [  # search_qa: the preset's 16 questions x 8 an iteration
    "eval.every=5",
    "eval.episodes=100",
    "eval.target=0.3",
    "log.trajectories_every=2",
    "train.iterations=1000",
]
STUDIES = {
    "rooms_4_8": Study(
        "6x6, 1 box, 4-8 moves, 20 steps",
        SHARED,
        SOKOBAN_ARMS,
        4096,
        "Greedy success on 100 held-out rooms every 4 iterations of 256 episodes (32 rooms x 8).",
    ),
    "countdown_step_grpo": Study(
        "countdown (3-4 numbers): Step-GRPO vs outcome-only GRPO",
        [*TEXT_SHARED, "eval.episodes=100"],
        {
            "grpo": ("countdown_step_grpo.yaml", ["rewards=[]"]),
            "step_grpo": ("countdown_step_grpo.yaml", []),
        },
        8192,
        "Greedy success (exact target) on 100 held-out instances every 4 iterations of 128 "
        "episodes (16 instances x 8); StepRAR is a training reward only.",
    ),
    "countdown_warmup": Study(
        "countdown (3-4 numbers) after a format warm-up: Step-GRPO vs outcome-only GRPO",
        [*TEXT_SHARED, "eval.episodes=100", *COUNTDOWN_WARMUP],
        {
            "grpo": ("countdown_step_grpo.yaml", ["rewards=[]"]),
            "step_grpo": ("countdown_step_grpo.yaml", []),
        },
        8192,
        "Both arms start from the same supervised warm-up (`warmup:`, seed 0: 1,024 solver "
        "answers, 16 epochs) that teaches the expression format, not the arithmetic. Greedy "
        "success (exact target) on 100 held-out instances every 4 iterations of 128 episodes "
        "(16 instances x 8); StepRAR is a training reward only.",
    ),
    "search_qa_igpo": Study(
        "multi-hop search QA: IGPO vs GRPO vs GiGPO",
        [*QA_SHARED],
        {  # one preset: the same env, model and warm-up; only the credit differs
            "grpo": (
                "search_qa_igpo.yaml",
                ["advantage.name=grpo", "advantage.options={norm: mean_std}", "rewards=[]"],
            ),
            "gigpo": (
                "search_qa_igpo.yaml",
                [
                    "advantage.name=gigpo",
                    "advantage.options={gamma: 0.95, norm: mean, episode_norm: mean_std}",
                    "rewards=[]",
                ],
            ),
            "igpo": ("search_qa_igpo.yaml", []),
        },
        5120,
        "Greedy exact match on 100 held-out questions (1-2 hops, one knowledge base) after "
        "the shared format warm-up (at 0 episodes) and every 5 iterations of 128 episodes "
        "(16 questions x 8).",
        warm_start=True,
        info_gain=True,
    ),
}


def arm_config(study: Study, arm: str, extra: list[str], out: Path) -> Path:
    preset, own = study.arms[arm]
    overrides = [*study.shared, *own, *extra, f"name=step_{arm}"]
    return write_config(ROOT / "configs" / preset, overrides, out / "configs" / f"{arm}.yaml")


def grouped_fraction(run_dir: Path) -> tuple[float, int]:
    """Fraction of dumped step rows in non-singleton step groups, and the rows counted."""
    grouped = total = 0
    for dump in sorted((run_dir / "trajectories").glob("iter_*.jsonl.gz")):
        with gzip.open(dump, "rt") as f:
            episodes = [json.loads(line) for line in f]
        counts = Counter((e["group"], s["anchor"]) for e in episodes for s in e["steps"])
        grouped += sum(c for c in counts.values() if c > 1)
        total += sum(counts.values())
    return (grouped / total if total else math.nan), total


def shaped_fraction(run_dir: Path) -> float:
    """Fraction of dumped step rows with a positive shaped reward (e.g. StepRAR's)."""
    rows = hits = 0
    for dump in sorted((run_dir / "trajectories").glob("iter_*.jsonl.gz")):
        with gzip.open(dump, "rt") as f:
            for line in f:
                for s in json.loads(line)["steps"]:
                    rows += 1
                    hits += any(v > 0 for v in s.get("shaped", {}).values())
    return hits / rows if rows else math.nan


def info_gain_signal(run_dir: Path) -> tuple[float, float]:
    """IGPO's turn rewards in the dumped episodes: mean |info_gain| over the turns that get
    one (all but each episode's last) and the fraction of those with |info_gain| > 0.01;
    (nan, nan) where no step has the column (the arms without the reward)."""
    gains = []
    for dump in sorted((run_dir / "trajectories").glob("iter_*.jsonl.gz")):
        with gzip.open(dump, "rt") as f:
            for line in f:
                steps = json.loads(line)["steps"]
                gains += [abs(s["info_gain"]) for s in steps[:-1] if "info_gain" in s]
    if not gains:
        return math.nan, math.nan
    return float(np.mean(gains)), float(np.mean(np.array(gains) > 0.01))


def arm_rows(study: Study, summary: dict, out: Path, seeds: int) -> list[str]:
    lines = [
        f"| arm | episodes to {summary['target']} (per seed) | reached | final (per seed) "
        "| final mean ± 95% CI | mean over evaluations ± 95% CI | sampled success, last 3 "
        "iterations ± 95% CI | rows in step groups | rows with a shaped reward > 0 "
        "| train s per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in study.arms:
        c = summary["configs"][f"step_{arm}"]
        runs = [out / f"step_{arm}" / f"seed{s}" for s in range(seeds)]
        area = [np.mean([e["eval/success"] for e in _summary(r)["evals"]]) for r in runs]
        frac = [grouped_fraction(r)[0] for r in runs]
        late = [np.mean([m["rollout/success"] for m in read_metrics(r)[-3:]]) for r in runs]
        secs = np.mean([_summary(r)["train_seconds"] for r in runs])
        shaped = [shaped_fraction(r) for r in runs]
        to = ", ".join("-" if e is None else str(e) for e in c["episodes_to_target"])
        fin = ", ".join(f"{x:.3f}" for x in c["final_success"])
        lines.append(
            f"| {arm} | {to} | {c['reached']} | {fin} | {mean_ci(c['final_success'])} | "
            f"{mean_ci(area)} | {mean_ci(late)} | {mean_ci(frac)} | "
            f"{mean_ci(shaped)} | {secs:.0f} |"
        )
    return lines


def warm_rows(study: Study, out: Path, seeds: int, lift: float = 0.1) -> list[str]:
    """Against each seed's own start (the shared warm-up, eval at 0 episodes): the gain of
    the final eval over it and the episodes until an eval is ``lift`` above it; with
    ``study.info_gain``, IGPO's turn-reward signal (``info_gain_signal``)."""
    gain_head = " mean abs(info gain), non-final turns | share > 0.01 |" if study.info_gain else ""
    lines = [
        f"| arm | after warm-up (per seed) | final (per seed) | final − warm-up ± 95% CI "
        f"| episodes to warm-up + {lift} (per seed) | reached |" + gain_head,
        "|---|---|---|---|---|---|" + ("---|---|" if study.info_gain else ""),
    ]
    for arm in study.arms:
        runs = [out / f"step_{arm}" / f"seed{s}" for s in range(seeds)]
        evals = [_summary(r)["evals"] for r in runs]
        start = [ev[0]["eval/success"] for ev in evals]
        final = [ev[-1]["eval/success"] for ev in evals]
        to = [
            next((e["episodes"] for e in ev[1:] if e["eval/success"] >= s0 + lift - 1e-9), None)
            for ev, s0 in zip(evals, start, strict=True)
        ]
        reached = sum(t is not None for t in to)
        lines.append(
            f"| {arm} | {_join(start)} | {_join(final)} | "
            f"{mean_ci([f - s0 for f, s0 in zip(final, start, strict=True)])} | "
            f"{', '.join('-' if t is None else str(t) for t in to)} | {reached}/{seeds} |"
            + (_gain_cells(runs) if study.info_gain else "")
        )
    return lines


def _join(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def _gain_cells(runs: list[Path]) -> str:
    sizes, shares = zip(*(info_gain_signal(r) for r in runs), strict=True)
    if all(math.isnan(x) for x in sizes):
        return " - | - |"
    return f" {mean_ci(list(sizes))} | {mean_ci(list(shares))} |"


def _arm_line(arm: str, preset: str, own: list[str]) -> str:
    return f"- `{arm}`: preset `configs/{preset}` {' '.join(f'`{o}`' for o in own)}"


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each")
    p.add_argument("--study", default="rooms_4_8", choices=list(STUDIES))
    p.add_argument("--episodes", type=int, default=None, help="budget per run (study default)")
    p.add_argument("--quick", action="store_true", help="1 seed, not recorded")
    p.add_argument("--label", default=None, help="section of the record (default: --study)")
    p.add_argument("--out", default=None, help="runs/step_credit[_STUDY]")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    study, label = STUDIES[args.study], args.label or args.study
    episodes = args.episodes or (512 if args.quick else study.episodes)
    seeds = 1 if args.quick else args.seeds
    default_out = "runs/step_credit" + ("" if args.study == "rooms_4_8" else f"_{args.study}")
    out = Path(args.out or default_out)
    extra = [f"train.max_episodes={episodes}", *args.overrides]
    configs = [str(arm_config(study, arm, extra, out)) for arm in study.arms]
    start = time.time()
    summary = compare(configs, seeds, out, jobs=args.jobs)
    plot_compare_dir(summary, out)  # curves.png, as `cairn compare` draws them
    walls = [
        _summary(out / f"step_{a}" / f"seed{k}")["wall_seconds"]
        for a in study.arms
        for k in range(seeds)
    ]
    wall = max(time.time() - start, sum(walls) / args.jobs)
    table = arm_rows(study, summary, out, seeds)
    if study.warm_start:
        table += ["", *warm_rows(study, out, seeds)]
    print("\n".join(table))
    if args.quick:
        return 0
    shutil.copy(out / "curves.png", RESULTS / f"step_credit_{label}.png")
    command = " ".join(["python benchmarks/credit/step_credit.py", *sys.argv[1:]])
    body = [
        f"Recorded {date.today()} by `nice -n 19 {command}` (seeds 0..{seeds - 1} per arm, "
        f"{episodes} episodes each, {args.jobs} runs at a time with one torch thread; wall "
        f"{wall / 60:.1f} min on the shared 2-core machine, runs reused from an earlier "
        "invocation included).",
        "",
        f"Shared overrides: {' '.join(f'`{o}`' for o in [*study.shared, *extra])}.",
        "",
        *[_arm_line(a, preset, own) for a, (preset, own) in study.arms.items()],
        "",
        *table,
        "",
        study.note
        + " Rows in step groups: share of the dumped step rows (4 groups every 2 iterations) "
        "whose anchor state occurs more than once in its group, so GiGPO's A_S is not 0 there.",
        "",
        f"![curves](step_credit_{label}.png)",
    ]
    write_section(RECORD, label, study.title, "\n".join(body), HEADER)
    print(f"wrote section {label} of {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
