"""The embedded real model before and after RL on the three real-model presets.

For each preset and seed: ``cairn train PRESET`` with ``seed``, a training-time budget
(``train.time_budget_s``, evaluation excluded) and greedy evaluation at the start (the
untrained model) and the end only, in its own process so its peak RSS is its own. Read back
from the run folder:

- held-out greedy success and format-error rate before and after (``eval/*`` at iteration 0
  and at the last iteration; held-out seeds are ``eval.seed_offset + i``; countdown's
  generator draws no instance whose target is the sum or the product of all its numbers);
- the sampled (at the preset's temperature) format-error rate and success of the first and
  last training iterations, and over the first and last three (per step: weighted by the
  iterations' steps; one iteration of 16 episodes is a noisy estimate); likewise the rate
  of invalid actions, format errors included (a well-formed call of a tool the env lacks
  parses, so it is no format error, but it is an invalid action);
- tokens generated per second of rollout (steps x mean completion tokens / ``time/rollout``)
  and tokens through the model per second of update (``update/forward_tokens`` /
  ``time/update``), medians over iterations;
- peak RSS of the process.

    nice python benchmarks/real/real_models.py --budget 600 --jobs 2
    nice python benchmarks/real/real_models.py --presets sokoban_smol --set model.dtype=bfloat16 \
        --out runs/real_bf16 --record benchmarks/results/real/sokoban_smol_bf16.md
    python benchmarks/real/real_models.py --report-only   # the record from the runs on disk

Runs go to ``runs/real/<preset>-s<seed>``; the record to
``benchmarks/results/real/real_models.md`` (a hand-written reading is kept from the file
already there, between the ``<!-- reading -->`` markers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from cairn.cli.allocator import allocator_env  # noqa: E402
from cairn.data import rundir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record  # noqa: E402

PRESETS = ("countdown_smol", "sokoban_smol", "search_qa_smol")
RECORD = ROOT / "benchmarks" / "results" / "real" / "real_models.md"
TITLE = "The embedded real model (SmolLM2-135M-Instruct, LoRA) before and after RL"
READING = re.compile(r"<!-- reading -->\n(.*?)<!-- /reading -->", re.DOTALL)
# A run starts on the allocator the `cairn` command would run it on (cairn.cli.allocator:
# mimalloc preloaded where available), hands its children the environment they would get
# from the command, and says both in its stdout.txt.
_RUN = (
    "import resource, sys; from cairn.cli import allocator, main; allocator.settle(); "
    "print('ALLOCATOR', allocator.current(), flush=True); rc = main(sys.argv[1:]); "
    "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True); "
    "sys.exit(rc)"
)


def run_one(preset: str, seed: int, budget: float, out: Path, extra: list[str]) -> dict:
    """Train ``preset`` with ``seed`` for ``budget`` seconds into ``out`` (``extra``:
    further ``KEY=VALUE`` overrides); its result."""
    folder = out / f"{preset}-s{seed}"
    if (folder / "result.json").is_file():
        return json.loads((folder / "result.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    sets = {
        "seed": seed, "train.time_budget_s": budget, "train.iterations": 1000,
        "eval.every": 0, "eval.at_start": "true", "out_dir": folder, "log.progress": "false",
        "checkpoint.every": 1000,
    }  # fmt: skip
    cmd = [sys.executable, "-c", _RUN, "train", preset]
    cmd += [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    cmd += [x for kv in extra for x in ("--set", kv)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env = allocator_env(env) or env
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (folder / "stdout.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{preset} seed {seed} failed:\n{proc.stderr[-2000:]}")
    peak = int(re.search(r"PEAK_RSS_KB (\d+)", proc.stdout).group(1))
    result = summarize(folder, preset, seed, peak / 2**20, time.time() - t0)
    (folder / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def resummarize(folder: Path) -> dict | None:
    """A finished run's result read again from its folder (so a change to ``summarize``
    reaches runs already done), keeping the peak RSS and wall time measured when it ran."""
    if not (folder / "result.json").is_file():
        return None
    old = json.loads((folder / "result.json").read_text())
    new = summarize(folder, old["preset"], old["seed"], old["peak_rss_gib"], old["wall_seconds"])
    (folder / "result.json").write_text(json.dumps(new, indent=2) + "\n")
    return new


def summarize(folder: Path, preset: str, seed: int, peak_gib: float, wall: float) -> dict:
    """The numbers of one finished run folder (module docstring)."""
    return summarize_run(_run_of(folder), preset, seed, peak_gib, wall)


def summarize_run(
    run: Path, preset: str, seed: int, peak_gib: float | None, wall: float | None
) -> dict:
    """The numbers of one finished run directory (``summary.json``, ``metrics.jsonl``);
    ``preset`` is its row's label; a peak RSS or wall time not measured is None."""
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    rows = [r for r in rows if "rollout/format_error_rate" in r]
    evals = summary["evals"]
    before, after = evals[0], evals[-1]
    gen = [r["steps"] * r["rollout/completion_tokens"] / r["time/rollout"] for r in rows]
    upd = [r["update/forward_tokens"] / r["time/update"] for r in rows]
    return {
        "preset": preset, "seed": seed, "iterations": summary["iterations"],
        "episodes": summary["episodes"], "train_seconds": summary["train_seconds"],
        "wall_seconds": None if wall is None else round(wall, 1),
        "peak_rss_gib": None if peak_gib is None else round(peak_gib, 2), "run": str(run),
        "success_before": before["eval/success"], "success_after": after["eval/success"],
        "eval_format_before": before["eval/format_error_rate"],
        "eval_format_after": after["eval/format_error_rate"],
        "sampled_format_first": rows[0]["rollout/format_error_rate"],
        "sampled_format_last": rows[-1]["rollout/format_error_rate"],
        "rollout_success_first": rows[0]["rollout/success"],
        "rollout_success_last": rows[-1]["rollout/success"],
        "sampled_format_first3": window(rows[:3], "rollout/format_error_rate"),
        "sampled_format_last3": window(rows[-3:], "rollout/format_error_rate"),
        "sampled_invalid_first3": window(rows[:3], "rollout/invalid_rate"),
        "sampled_invalid_last3": window(rows[-3:], "rollout/invalid_rate"),
        "rollout_success_first3": window(rows[:3], "rollout/success"),
        "rollout_success_last3": window(rows[-3:], "rollout/success"),
        "task_blind_first3": mean_of(rows[:3], "rollout/task_blind"),
        "task_blind_last3": mean_of(rows[-3:], "rollout/task_blind"),
        "curriculum_level_last": rows[-1].get("curriculum/level"),
        "entropy_first3": mean_of(rows[:3], "actor/entropy"),
        "entropy_last3": mean_of(rows[-3:], "actor/entropy"),
        "entropy_min": min((r["actor/entropy"] for r in rows if "actor/entropy" in r),
                           default=None),
        "evals": [[e.get("iteration"), e["eval/success"]] for e in evals],
        "gen_tokens_per_s": round(median(gen), 1), "update_tokens_per_s": round(median(upd), 1),
        "seconds_per_iteration": round(median(r["time/iteration"] for r in rows), 1),
    }  # fmt: skip


def window(rows: list[dict], key: str) -> float:
    """``key``'s per-step rate over ``rows`` (iterations), weighted by their steps."""
    return round(sum(r[key] * r["steps"] for r in rows) / sum(r["steps"] for r in rows), 4)


def mean_of(rows: list[dict], key: str) -> float | None:
    """``key``'s mean over the ``rows`` that log it (an episode share: task_blind); None
    where none does (a run from before the metric, or an env that does not judge it)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(sum(values) / len(values), 4) if values else None


def spread(values: list[float | None], fmt: str = ".2f") -> str:
    """``mean (min-max)`` of ``values`` (``n/a`` where one is missing)."""
    if any(v is None for v in values):
        return "n/a"
    mean = sum(values) / len(values)
    return f"{mean:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def table(results: list[dict]) -> str:
    """One row per preset: mean (min-max) over seeds."""
    cols = [
        ("held-out success before", "success_before", ".2f"),
        ("after", "success_after", ".2f"),
        ("eval format errors before", "eval_format_before", ".2f"),
        ("after", "eval_format_after", ".2f"),
        ("sampled format errors, first 3 it.", "sampled_format_first3", ".2f"),
        ("last 3 it.", "sampled_format_last3", ".2f"),
        ("sampled invalid actions, first 3 it.", "sampled_invalid_first3", ".2f"),
        ("last 3 it.", "sampled_invalid_last3", ".2f"),
        ("sampled success, first 3 it.", "rollout_success_first3", ".2f"),
        ("last 3 it.", "rollout_success_last3", ".2f"),
        ("task-blind episodes, first 3 it.", "task_blind_first3", ".2f"),
        ("last 3 it.", "task_blind_last3", ".2f"),
        ("policy entropy, first 3 it.", "entropy_first3", ".2f"),
        ("last 3 it.", "entropy_last3", ".2f"),
        ("lowest", "entropy_min", ".2f"),
        ("curriculum level at the end", "curriculum_level_last", ".1f"),
        ("iterations", "iterations", ".0f"),
        ("s/it", "seconds_per_iteration", ".0f"),
        ("generated tok/s", "gen_tokens_per_s", ".0f"),
        ("update tok/s", "update_tokens_per_s", ".0f"),
        ("peak RSS GiB", "peak_rss_gib", ".1f"),
    ]
    lines = ["| preset | seeds | " + " | ".join(c[0] for c in cols) + " |"]
    lines.append("|" + " --- |" * (len(cols) + 2))
    for preset in dict.fromkeys(r["preset"] for r in results):
        rs = [r for r in results if r["preset"] == preset]
        seeds = ",".join(str(r["seed"]) for r in rs)
        cells = [spread([r.get(k) for r in rs], f) for _, k, f in cols]
        lines.append(f"| {preset} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed(results: list[dict]) -> str:
    keys = ["preset", "seed", "success_before", "success_after", "evals", "eval_format_before",
            "eval_format_after", "sampled_format_first", "sampled_format_last",
            "sampled_invalid_first3", "sampled_invalid_last3",
            "rollout_success_first", "rollout_success_last", "task_blind_last3",
            "entropy_last3", "entropy_min", "curriculum_level_last", "iterations",
            "train_seconds", "peak_rss_gib"]  # fmt: skip
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in results]
    return "\n".join(lines)


def _cell(value: object) -> str:
    """A table cell: held-out points as ``iteration: success`` pairs, floats to 3 places."""
    if isinstance(value, list):
        return ", ".join(f"{it}: {rate:.2f}" for it, rate in value)
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _run_of(folder: Path) -> Path:
    """The one finished run directory inside a seed's folder."""
    (run,) = [p for p in folder.iterdir() if (p / "summary.json").is_file()]
    return run


def plot(results: list[dict], out: Path, path: Path, share_y: bool = False) -> None:
    """Per preset, one panel each of held-out greedy success, sampled success, policy
    entropy and the task-blind share against training seconds, a line per seed
    (``share_y``: one y scale per column, for rows that are arms of a comparison)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = list(dict.fromkeys(r["preset"] for r in results))
    panels = [
        ("eval/success", "held-out greedy success"),
        ("rollout/success", "sampled success"),
        ("actor/entropy", "policy entropy"),
        ("rollout/task_blind", "task-blind share"),
    ]
    fig, axes = plt.subplots(
        len(presets), 4, figsize=(16, 3.4 * len(presets)), squeeze=False,
        sharey="col" if share_y else False,
    )  # fmt: skip
    for row, preset in zip(axes, presets, strict=True):
        for r in (r for r in results if r["preset"] == preset):
            run = Path(r["run"]) if "run" in r else _run_of(out / f"{preset}-s{r['seed']}")
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
            minutes = {m["iteration"]: m.get("time/train_seconds", 0.0) / 60 for m in rows}
            minutes[0] = 0.0  # the untrained model's evaluation (summary only, no row)
            for ax, (key, title) in zip(row, panels, strict=True):
                if key == "eval/success":
                    pts = [(minutes.get(it, 0.0), rate) for it, rate in r["evals"]]
                else:
                    pts = [(minutes[m["iteration"]], m[key]) for m in rows
                           if m.get(key) is not None]  # fmt: skip
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, marker="o" if key == "eval/success" else None,
                            label=f"seed {r['seed']}", lw=1.2)  # fmt: skip
                ax.set_title(f"{preset}: {title}", fontsize=9)
                ax.set_xlabel("training minutes")
        row[1].legend(fontsize=8)  # sampled success: every run has it
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def kept_reading(path: Path) -> str:
    """The hand-written reading of the record at ``path`` (a placeholder where none is)."""
    found = READING.search(path.read_text()) if path.is_file() else None
    return found.group(1) if found else "(to be written after reading the runs)\n"


def threads_of(results: list[dict]) -> str:
    """The runs' ``train.threads`` in words (read from their configs)."""
    found = {rundir.read_config(Path(r["run"])).get("train", {}).get("threads") for r in results}
    if not found:
        return "no runs"
    if found == {1}:
        return "one thread per run"
    if found == {None}:
        return "every core per run (train.threads null)"
    words = sorted("null" if t is None else str(t) for t in found)
    return f"train.threads {', '.join(words)} per run (null: every core)"


def shown(path: Path) -> Path:
    """``path`` as a record names it: from the checkout's root, or whole outside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def record(results: list[dict], args: argparse.Namespace, load: str) -> str:
    reading = kept_reading(args.record)
    cmd = (
        f"nice python benchmarks/real/real_models.py --budget {args.budget:g} --jobs {args.jobs} "
        f"--seeds {' '.join(map(str, args.seeds))}"
    )
    if list(args.presets) != list(PRESETS):
        cmd += f" --presets {' '.join(args.presets)}"
    if args.record != RECORD:
        cmd += f" --record {shown(args.record)}"
    cmd += "".join(f" --set {kv}" for kv in args.set)
    return f"""# {args.title}

Command: `{cmd}` (each run: `cairn train PRESET --set seed=S --set
train.time_budget_s={args.budget:g} --set eval.every=0` and the command's `--set`s after
those, greedy evaluation of the untrained model first and of the trained one at the end).
Machine: 2 CPU cores, torch CPU, {threads_of(results)}; {load}.
Mean (min-max) over seeds; held-out instances are the presets' eval seeds.

{table(results)}

![curves]({args.record.with_suffix(".png").name})

### Per seed

{per_seed(results)}

### Reading

<!-- reading -->
{reading}<!-- /reading -->
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=600.0, help="training seconds per run")
    p.add_argument(
        "--jobs", type=int, default=1, help="runs at once (--set train.threads=1: a core each)"
    )
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "real")
    p.add_argument("--load", default="", help="what else ran, for the record")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--record", type=Path, default=RECORD, help="the record file to write")
    p.add_argument("--title", default=TITLE, help="the record's heading")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run"
    )
    args = p.parse_args(argv)
    # seed-major: with --jobs 2 the runs that start together are different presets, so
    # two search_qa_smol runs (up to 10.8 GiB each) do not share the machine's memory
    todo = [(preset, seed) for seed in args.seeds for preset in args.presets]
    if args.report_only:
        results = [resummarize(args.out / f"{p}-s{s}") for p, s in todo]
        results = [r for r in results if r is not None]
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda t: run_one(*t, args.budget, args.out, args.set), todo))
    for r in results:
        print(json.dumps(r))
    load = args.load or f"{args.jobs} run(s) at once"
    args.record = args.record.resolve()
    write_record(args.record, record(results, args, load))
    plot(results, args.out, args.record.with_suffix(".png"))
    print(f"wrote {shown(args.record)} and its .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
