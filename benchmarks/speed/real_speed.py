"""Seconds per training iteration of the real-model presets, before and after, in one run.

    python benchmarks/speed/real_speed.py          # sokoban_smol + countdown_smol, 3 iterations
    python benchmarks/speed/real_speed.py --iterations 5 --repeats 2 --presets countdown_smol
    python benchmarks/speed/real_speed.py --after-set model.dtype=bfloat16 --label bf16
    python benchmarks/speed/real_speed.py --smoke  # minutes: proves the script runs
    python benchmarks/speed/real_speed.py --prompts --presets countdown_smol search_qa_smol

Arms, each preset x arm in a fresh process (the model load, torch's thread pool and the
allocator start equal), alternating before, after, before, after, ...:

- ``before``: the presets and the code as they were at ``--before`` (a commit; default
  ``BEFORE``, the tree before the work on faster iterations), extracted with
  ``git archive`` into a temporary folder and put first on ``PYTHONPATH``; with
  ``--before-set`` overrides on top (to reproduce old settings on the current code instead,
  pass ``--before HEAD`` with the old values as ``--before-set``).
- ``after``: this checkout's ``src/`` as it is on disk (uncommitted changes included: the
  record says so), with ``--after-set`` overrides on top.

``--set`` applies to both arms (e.g. smaller groups). Every arm runs the preset's own
``train.threads`` (the "after" presets use both cores; pass ``--set train.threads=1`` to
compare one thread) for ``--iterations`` iterations after no warm-up: each iteration is
timed, the first one included, and the record gives per arm and preset the median and the
spread (min-max) of seconds per iteration, its rollout and update parts, the mean prompt
tokens at turn 1 and over all turns, the tokens generated per step, and the tokens each
part pushed through the model. Episodes per iteration are the preset's in both arms unless
``--set`` changes them.

The record (``benchmarks/results/speed/real_speed.md``, a section per ``--label``, and the
raw rows in ``real_speed-<label>.json``) names the command, the commit of both arms, the
load average before and after, and the other processes that used the CPU when it started:
timings are only comparable on a quiet machine (one run alone). ``--smoke`` (1 iteration,
1 group of 2 episodes, at most 2 turns) writes no record unless ``--out`` is given.
``--prompts`` prints each preset's prompt tokens at turns 1-3 in both arms and how many of
them every instance's prompt shares (the prefix computed once per generate call and per
minibatch); SmolLM2's tokenizer, no model, seconds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/_lib
from _lib.arms import arm_result  # noqa: E402  (imports no cairn: an arm imports it first)

OUT = ROOT / "benchmarks" / "results" / "speed"
BEFORE = "c13f8b9"  # main before the faster real-model iterations (prompts, threads, tokens)
PRESETS = ("sokoban_smol", "countdown_smol")
SMOKE = ["rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
         "optim.minibatch_size=2"]  # fmt: skip
# Every arm: no evaluation, no checkpoint, no live line, a temporary run folder.
QUIET = ["train.time_budget_s=null", "eval.at_start=false", "eval.every=0",
         "checkpoint.every=100000", "log.progress=false", "log.trajectories_every=0"]  # fmt: skip


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def before_tree(commit: str, dest: Path) -> Path:
    """``src/`` of ``commit`` extracted into ``dest``; returns that ``src`` folder."""
    archive = subprocess.run(
        ["git", "archive", commit, "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


# -- one arm, in its own process ------------------------------------------------------------
def arm(preset: str, iterations: int, overrides: list[str]) -> dict:
    """``iterations`` timed iterations of ``preset``: per iteration its times, token counts
    and the prompt lengths of its generate calls (the first call is turn 1)."""
    import resource

    import torch

    from cairn.policies.hf import HFPolicy
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    calls: list[dict] = []
    generate = HFPolicy.generate

    def counted(self, prompts, **kw):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = generate(self, prompts, **kw)
        lengths = [len(p) for p in prompts]
        made = [len(g.token_ids) for g in out]
        calls.append({"s": time.perf_counter() - t, "prompts": lengths, "generated": made})
        return out

    HFPolicy.generate = counted  # type: ignore[method-assign]
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        sets = [f"train.iterations={iterations}", *QUIET, f"out_dir={tmp}", *overrides]
        started = time.perf_counter()
        trainer = Trainer(load_config(preset, sets), Path(tmp) / "run")
        build_s = time.perf_counter() - started
        rows = []
        for it in range(1, iterations + 1):
            trainer.iteration, calls[:] = it, []
            row = trainer.train_iteration()
            prompts = [n for c in calls for n in c["prompts"]]
            made = [n for c in calls for n in c["generated"]]
            rows.append({
                **{k: v for k, v in row.items() if isinstance(v, int | float)},
                "prompt/turn1_tokens": statistics.mean(calls[0]["prompts"]) if calls else 0.0,
                "prompt/mean_tokens": statistics.mean(prompts) if prompts else 0.0,
                "prompt/generated_per_step": statistics.mean(made) if made else 0.0,
                "time/generate": sum(c["s"] for c in calls),
                "generate_calls": len(calls),
            })  # fmt: skip
        threads = torch.get_num_threads()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (kB on Linux)
    return {
        "threads": threads, "build_s": build_s, "peak_rss_gib": peak, "rows": rows,
        "allocator": _allocator_name(),
    }  # fmt: skip


def _allocator_module() -> ModuleType | None:
    """The arm's ``cairn.cli.allocator``, or None for code from before that module."""
    try:
        from cairn.cli import allocator
    except ImportError:
        return None
    return allocator


def _allocator_of_the_arm() -> None:
    """An arm runs on the allocator its code's ``cairn`` command would choose: this process
    executes itself again on mimalloc where the arm's ``cairn.cli.allocator`` does (code
    from before that module: glibc's malloc)."""
    if (allocator := _allocator_module()) is not None:
        allocator.reexec([__file__, *sys.argv[1:]])  # returns once re-executed
        allocator.settle()


def _allocator_name() -> str:
    allocator = _allocator_module()
    return "system" if allocator is None else allocator.current()


def prompt_tokens(preset: str, overrides: list[str], turns: int = 3) -> dict:
    """SmolLM2 tokens of ``preset``'s prompt at turns 1..``turns`` (no model: the tokenizer
    only), on the first train seed whose episode lasts that long under the env's gold
    actions (each earlier reply: the gold action in the preset's format, then <|im_end|>)."""
    from transformers import AutoTokenizer

    from cairn.agent import Turn, example_completion, fit_prompt
    from cairn.envs import make
    from cairn.policies.smol import alias_dir
    from cairn.rollout.turn import instruction_for
    from cairn.train.config import load_config
    from cairn.train.settings import prompt_builder, sampling_settings

    cfg = load_config(preset, overrides)
    tok = AutoTokenizer.from_pretrained(alias_dir(cfg.model.path))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    encode = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    env = make(cfg.env.name, **cfg.env.options)
    builder, settings = prompt_builder(cfg, tok, env), sampling_settings(cfg)
    want = min(turns, cfg.rollout.max_turns or 1)
    best: list[int] = []
    firsts: list[list[int]] = []  # turn-1 prompts of the seeds tried: their shared prefix
    for seed in range(1, 200):
        obs, _ = env.reset(seed=seed)
        counts, past = [], []
        for _ in range(want):
            instruction = instruction_for(env, settings, builder.renders_tools)
            ids = fit_prompt(builder, encode, eos, instruction, past, obs).ids
            firsts += [ids] if not past else []
            counts.append(len(ids))
            gold = env.gold_action() or env.example_action
            text = example_completion(cfg.agent.action_format, gold, getattr(env, "tools", ()))
            reply = [*encode(text.removeprefix(cfg.agent.response_prefix)), eos]
            past.append(Turn(obs, gold, reply))
            obs, _, terminated, truncated, _ = env.step(gold)
            if terminated or truncated:
                break
        best = counts if len(counts) > len(best) else best
        if len(best) == want and len(firsts) > 1:
            break
    shared = min(_common(firsts[0], other) for other in firsts[1:])
    return {"seed": seed, "tokens": best, "shared": shared}


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def run_arm(
    name: str, preset: str, src: Path, iterations: int, overrides: list[str], what: str = "train"
) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    spec = json.dumps(
        {"preset": preset, "iterations": iterations, "overrides": overrides, "what": what}
    )
    result = arm_result(__file__, spec, f"arm {name} of {preset}", env, ROOT)
    return {"arm": name, "preset": preset, "overrides": overrides, **result}


# -- the record -------------------------------------------------------------------------------
COLUMNS = [  # (row key, header, format, with spread)
    ("time/iteration", "s / iteration", ".1f", True),
    ("time/rollout", "rollout s", ".1f", True),
    ("time/update", "update s", ".1f", True),
    ("prompt/turn1_tokens", "prompt tok, turn 1", ".0f", False),
    ("prompt/mean_tokens", "prompt tok, all turns", ".0f", False),
    ("prompt/generated_per_step", "generated tok / step", ".1f", False),
    ("rollout/forward_tokens", "rollout fwd tok", ".0f", False),
    ("update/forward_tokens", "update fwd tok", ".0f", False),
    ("steps", "steps", ".0f", False),
]


def _values(results: list[dict], preset: str, name: str, key: str) -> list[float]:
    return [
        r[key] for res in results if res["arm"] == name and res["preset"] == preset
        for r in res["rows"] if key in r
    ]  # fmt: skip


def table(results: list[dict], presets: list[str]) -> list[str]:
    head = (
        "| preset | arm | threads | "
        + " | ".join(c[1] for c in COLUMNS)
        + " | peak RSS GiB | allocator |"
    )
    lines = [head, "|---|---|---:|" + "---:|" * (len(COLUMNS) + 1) + "---|"]
    for preset in presets:
        for name in ("before", "after"):
            runs = [r for r in results if r["arm"] == name and r["preset"] == preset]
            if not runs:
                continue
            cells = []
            for key, _, fmt, spread in COLUMNS:
                v = _values(results, preset, name, key)
                cell = f"{statistics.median(v):{fmt}}" if v else "-"
                cells.append(cell + (f" ({min(v):{fmt}}-{max(v):{fmt}})" if v and spread else ""))
            rss = max(r["peak_rss_gib"] for r in runs)
            lines.append(
                f"| {preset} | {name} | {runs[0]['threads']} | " + " | ".join(cells)
                + f" | {rss:.2f} | {'/'.join(sorted({r.get('allocator', '-') for r in runs}))} |"
            )  # fmt: skip
    return lines


def speedups(results: list[dict], presets: list[str]) -> list[str]:
    out = []
    for preset in presets:
        b = _values(results, preset, "before", "time/iteration")
        a = _values(results, preset, "after", "time/iteration")
        if a and b:
            ratio = statistics.median(b) / statistics.median(a)
            out.append(
                f"- {preset}: {statistics.median(b):.1f} -> {statistics.median(a):.1f} s per "
                f"iteration (median), {ratio:.2f}x"
            )
    return out


def busy_processes(limit: int = 6) -> str:
    """The processes with the most CPU time share now (ps), this script's own left out."""
    try:
        text = subprocess.run(
            ["ps", "-eo", "pid,ppid,pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True
        ).stdout
    except OSError:
        return "ps not available"
    mine = {os.getpid(), os.getppid()}
    rows = []
    for line in text.splitlines()[1:]:
        pid, ppid, cpu, comm = line.split(None, 3)
        if int(pid) in mine or int(ppid) == os.getpid() or float(cpu) < 5:
            continue
        rows.append(f"{comm} {cpu} %")
    return ", ".join(rows[:limit]) or "none above 5 % CPU"


def record(args: argparse.Namespace, results: list[dict], info: dict) -> str:
    presets = args.presets
    lines = [
        f"Measured {info['date']} on {platform.machine()} ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}), by `{info['command']}`.",
        "",
        f"- before: `{info['before']}` (the presets and code of that commit)"
        + (f" with {' '.join(args.before_set)}" if args.before_set else ""),
        f"- after: `{info['after']}`{info['dirty']}"
        + (f" with {' '.join(args.after_set)}" if args.after_set else ""),
        f"- both arms: {' '.join(args.set) or 'the presets as they are'}; "
        f"{args.iterations} iteration(s) per process, {args.repeats} repeat(s), arms "
        "alternating, medians over every iteration (spread min-max)",
        f"- load average {info['load'][0]:.2f} before and {info['load'][1]:.2f} after; "
        f"other processes at the start: {info['busy']}",
        "",
        *table(results, presets),
        "",
        *speedups(results, presets),
    ]
    return "\n".join(lines) + "\n"


def show_prompt_tokens(args: argparse.Namespace) -> int:
    """``--prompts``: each preset's prompt tokens at turns 1-3 in both arms (no model)."""
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        old_src = before_tree(args.before, Path(tmp))
        for preset in args.presets:
            for name, src, extra in (
                ("before", old_src, args.before_set), ("after", ROOT / "src", args.after_set)
            ):  # fmt: skip
                res = run_arm(name, preset, src, 0, [*args.set, *extra], what="prompts")
                print(f"{preset} {name}: prompt tokens at turns 1.. {res['tokens']} (seed "
                      f"{res['seed']}), of which shared by every instance {res['shared']}",
                      flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations per process")
    ap.add_argument("--repeats", type=int, default=1, help="processes per arm and preset")
    ap.add_argument("--before", default=BEFORE, help="commit of the 'before' arm")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for both arms")  # fmt: skip
    ap.add_argument("--before-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--after-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--smoke", action="store_true", help="1 tiny iteration per arm, no record")
    ap.add_argument(
        "--prompts", action="store_true", help="only the prompt tokens at turns 1-3 per arm"
    )
    ap.add_argument("--label", default="sokoban_smol and countdown_smol")
    ap.add_argument("--out", type=Path, default=None, help=f"record folder (default {OUT})")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        _allocator_of_the_arm()
        spec = json.loads(args.arm)
        if spec["what"] == "prompts":
            print(json.dumps(prompt_tokens(spec["preset"], spec["overrides"])))
        else:
            print(json.dumps(arm(spec["preset"], spec["iterations"], spec["overrides"])))
        return 0
    if args.prompts:
        return show_prompt_tokens(args)
    _records().check_label(args.label)  # before the runs, which take minutes
    if args.smoke:
        args.iterations, args.repeats, args.set = 1, 1, [*SMOKE, *args.set]
    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(
            ["python", "benchmarks/speed/real_speed.py", *(argv or sys.argv[1:])]
        ),
        "before": git("rev-parse", args.before),
        "after": git("rev-parse", "HEAD"),
        "dirty": " plus uncommitted changes" if git("status", "--porcelain", "src") else "",
        "busy": busy_processes(),
    }
    load0 = os.getloadavg()[0]
    results = []
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        old_src = before_tree(args.before, Path(tmp))
        for _ in range(args.repeats):
            for preset in args.presets:
                for name, src, extra in (
                    ("before", old_src, args.before_set), ("after", ROOT / "src", args.after_set)
                ):  # fmt: skip
                    res = run_arm(name, preset, src, args.iterations, [*args.set, *extra])
                    times = [round(r["time/iteration"], 1) for r in res["rows"]]
                    print(f"{preset} {name}: s/it {times}", flush=True)
                    results.append(res)
    info["load"] = (load0, os.getloadavg()[0])
    text = record(args, results, info)
    print(text)
    out = args.out or (None if args.smoke else OUT)
    if out is not None:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.label)
        out.mkdir(parents=True, exist_ok=True)  # --out may name a new folder
        (out / f"real_speed-{slug}.json").write_text(json.dumps(results, indent=1) + "\n")
        header = "# Real-model iterations (SmolLM2-135M-Instruct, LoRA) before and after\n"
        _records().write_section(
            out / "real_speed.md", args.label, "seconds per iteration", text, header
        )
    return 0


def _records():  # type: ignore[no-untyped-def]
    """benchmarks/_lib/records.py, imported in the parent only (an arm's PYTHONPATH is its
    own)."""
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/_lib
    from _lib import records

    return records


if __name__ == "__main__":
    sys.exit(main())
