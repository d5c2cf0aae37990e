"""The free-text demo (configs/sokoban_text.yaml) on 3 seeds: warm-up, then GiGPO.

Each seed is one ``cairn train`` under ``nice -n 19`` with ``train.threads=1``, at most 2
at a time. Per seed the record gives: greedy held-out success after the warm-up (= before
RL: the at-start eval) and after RL, the format-error rate over training, the mean
completion length, and the seconds of each stage, wall and CPU (the process's own CPU
time: on a shared machine wall time also counts the waits for a core). Then the sampling
cost per token, free text vs decoding restricted to the admissible actions, on the first
seed's trained policy, same prompts, one thread.

    python benchmarks/demo/sokoban_text.py   # writes benchmarks/results/demo/sokoban_text.md
    python benchmarks/demo/sokoban_text.py --seeds 0 --set train.iterations=5   # a quick look
    python benchmarks/demo/sokoban_text.py --reuse --seeds 0 1   # record finished seeds' runs

With ``--reuse`` a seed whose run folder has a summary is not run again (its CPU seconds
are then those written in its ``cpu.txt``, or unknown).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_section

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "src" / "cairn" / "presets" / "sokoban_text.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "demo" / "sokoban_text.md"
HEADER = """# Free text on sokoban: format warm-up, then GiGPO

`configs/sokoban_text.yaml`: the tiny Llama-style model with a local BPE chat tokenizer
(ChatML template) writes `<think>...</think><action>...</action>` with no restriction to the
admissible actions, over chat prompts (the last turn, token-in/token-out). A supervised
warm-up on solver demonstrations (the `warmup:` stage) teaches the format, then GiGPO
trains. Greedy success on 200 held-out rooms. One section per run of
`benchmarks/demo/sokoban_text.py` (label: `--label`).
"""


def _launch(seed: int, out: Path, overrides: list[str]) -> subprocess.Popen:
    cmd = [
        "nice", "-n", "19", sys.executable, "-m", "cairn.cli", "train", str(PRESET),
        "--set", f"seed={seed}", "--set", f"out_dir={out}", "--set", "train.threads=1",
        "--set", "log.progress=false", *(x for o in overrides for x in ("--set", o)),
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "log.txt", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def run_seeds(
    seeds: list[int], base: Path, overrides: list[str], parallel: int, reuse: bool = False
) -> dict:
    """Run every seed (at most ``parallel`` at a time); returns seed -> CPU seconds."""
    done = [s for s in seeds if reuse and list((base / f"seed{s}").glob("*/summary.json"))]
    cpu = {s: _saved_cpu(base / f"seed{s}") for s in done}
    pending, running = [s for s in seeds if s not in done], {}
    while pending or running:
        while pending and len(running) < parallel:
            seed = pending.pop(0)
            running[_launch(seed, base / f"seed{seed}", overrides).pid] = seed
        pid, status, usage = os.wait4(-1, 0)
        if pid in running:
            seed = running.pop(pid)
            if status != 0:
                raise SystemExit(f"seed {seed} failed: see {base / f'seed{seed}' / 'log.txt'}")
            cpu[seed] = usage.ru_utime + usage.ru_stime
            (base / f"seed{seed}" / "cpu.txt").write_text(f"{cpu[seed]:.2f}\n")
    return cpu


def _saved_cpu(folder: Path) -> float | None:
    path = folder / "cpu.txt"
    return float(path.read_text()) if path.exists() else None


def _run_dir(base: Path, seed: int) -> Path:
    return sorted((base / f"seed{seed}").glob("*/summary.json"))[-1].parent


def seed_record(run: Path, cpu: float | None) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    w = summary["warmup"]
    fmt = [r["rollout/format_error_rate"] for r in rows]
    quarter = max(1, len(fmt) // 4)
    return {
        "after_warmup": summary["untrained_success"],
        "after_rl": summary["eval_success"],
        "best": summary["best_eval_success"],
        "format_first": float(np.mean(fmt[:quarter])),
        "format_last": float(np.mean(fmt[-quarter:])),
        "completion_tokens": float(np.mean([r["rollout/completion_tokens"] for r in rows])),
        "truncated": float(np.sum([r["rollout/truncated_actions"] for r in rows])),
        "iterations": summary["iterations"],
        "warmup_s": w["warmup/stage_seconds"],
        "warmup_cpu": w["warmup/stage_cpu_seconds"],
        "rl_s": summary["train_seconds"],
        "wall_s": summary["wall_seconds"],
        "cpu_s": cpu,
        "format_curve": fmt,
    }


def sampling_cost(run: Path, prompts_n: int = 64, repeats: int = 3) -> dict:
    """CPU seconds per sampled token and per action, free vs restricted, same prompts."""
    import torch

    from cairn.agent import PromptBuilder, Turn, fit_prompt
    from cairn.envs import make
    from cairn.policies import build_policy
    from cairn.train.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(str(run / "config.yaml"))
    env = make(cfg.env.name, **cfg.env.options)
    newest = sorted((run / "checkpoints").glob("iter_*"))[-1]  # its weights and tokenizer
    policy = build_policy(cfg.model, env, env.instruction, cfg.seed, newest)
    prompt = PromptBuilder(history=cfg.agent.history, chat_template=policy.tokenizer, style="chat")
    prompts, choices = [], []
    for k in range(prompts_n):
        obs, info = env.reset(seed=10**9 + k)
        past: list[Turn] = []
        prompts.append(
            fit_prompt(prompt, policy.encode, policy.eos_id, env.instruction, past, obs).ids
        )
        choices.append(info["admissible"])
    out = {}
    for name, ch in (("free", None), ("restricted", choices)):
        best = None
        for r in range(repeats):
            gen = torch.Generator().manual_seed(r)
            t0 = time.process_time()
            gens = policy.generate(prompts, max_new_tokens=cfg.rollout.max_new_tokens,
                                   choices=ch, generator=gen)  # fmt: skip
            dt = time.process_time() - t0
            tokens = sum(len(g.token_ids) for g in gens)
            if best is None or dt < best[0]:
                best = (dt, tokens)
        dt, tokens = best
        out[name] = {"cpu_s": dt, "tokens": tokens, "per_token_ms": 1e3 * dt / tokens,
                     "per_action_ms": 1e3 * dt / prompts_n}  # fmt: skip
    return out


def render(records: dict[int, dict], cost: dict, overrides: list[str], flags: str = "") -> str:
    a = np.array([r["after_warmup"] for r in records.values()])
    b = np.array([r["after_rl"] for r in records.values()])
    lines = [
        f"Command: `python benchmarks/demo/sokoban_text.py{flags}"
        f"{''.join(f' --set {o}' for o in overrides)}` (each seed: `nice -n 19 cairn train "
        "configs/sokoban_text.yaml --set seed=S --set train.threads=1`, 2 seeds at a time). "
        f"Recorded {date.today()} on {platform.machine()}, {platform.python_version()}, "
        f"{os.cpu_count()} cores shared with other jobs (wall seconds include waiting for a "
        "core; CPU seconds are the run's own).",
        "",
        "| seed | after warm-up | after RL | best | format errors, first quarter | last "
        "quarter | completion tokens | cut | iterations | warm-up s (CPU) | RL s | wall s | "
        "CPU s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for seed, r in sorted(records.items()):
        cpu_s = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.0f}"
        lines.append(
            f"| {seed} | {r['after_warmup']:.3f} | {r['after_rl']:.3f} | {r['best']:.3f} | "
            f"{r['format_first']:.3f} | {r['format_last']:.3f} | "
            f"{r['completion_tokens']:.1f} | {r['truncated']:.0f} | {r['iterations']} | "
            f"{r['warmup_s']:.0f} ({r['warmup_cpu']:.0f}) | {r['rl_s']:.0f} | "
            f"{r['wall_s']:.0f} | {cpu_s} |"
        )
    verdict = (
        "RL improves on the warm-up alone on every seed."
        if (b > a).all()
        else "RL does not improve on the warm-up on every seed (see the rows)."
    )
    f, r = cost["free"], cost["restricted"]
    lines += [
        "",
        f"Greedy success after the warm-up: mean {a.mean():.3f}; after RL: mean {b.mean():.3f} "
        f"({b.mean() - a.mean():+.3f}) over seeds {', '.join(map(str, sorted(records)))}. "
        f"{verdict}",
        "",
        "Format-error rate per iteration (seed order):",
        "",
        *(
            f"- seed {s}: " + " ".join(f"{x:.2f}" for x in rec["format_curve"])
            for s, rec in sorted(records.items())
        ),
        "",
        "### Sampling cost: free text vs restricted decoding",
        "",
        f"Seed {min(records)}'s trained policy, 64 held-out first prompts in one batch, one "
        "thread, CPU time (best of 3):",
        "",
        "| decoding | tokens | ms per token | ms per action |",
        "|---|---:|---:|---:|",
        f"| free text | {f['tokens']} | {f['per_token_ms']:.2f} | {f['per_action_ms']:.2f} |",
        f"| restricted to admissible | {r['tokens']} | {r['per_token_ms']:.2f} | "
        f"{r['per_action_ms']:.2f} |",
        "",
        f"Free text costs {f['per_action_ms'] / r['per_action_ms']:.1f}x per action: "
        f"{f['tokens'] / r['tokens']:.1f}x the tokens at "
        f"{f['per_token_ms'] / r['per_token_ms']:.2f}x the cost per token.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_sokoban_text")
    ap.add_argument("--no-record", action="store_true", help="print, do not write the record")
    ap.add_argument("--reuse", action="store_true", help="skip seeds that have a summary")
    ap.add_argument("--label", default="default", help="the record section to (re)write")
    args = ap.parse_args()
    cpu = run_seeds(args.seeds, args.out, args.overrides, args.parallel, args.reuse)
    records = {s: seed_record(_run_dir(args.out, s), cpu[s]) for s in args.seeds}
    cost = sampling_cost(_run_dir(args.out, min(args.seeds)))
    flags = "" if args.seeds == [0, 1, 2] else f" --seeds {' '.join(map(str, args.seeds))}"
    text = render(records, cost, args.overrides, flags)
    (args.out / "records.json").write_text(json.dumps({"seeds": records, "cost": cost}))
    if args.no_record:
        print(text)
    else:
        title = f"seeds {', '.join(map(str, args.seeds))}"
        write_section(RESULTS, args.label, title, text, HEADER)
        print(f"wrote section {args.label!r} of {RESULTS}")


if __name__ == "__main__":
    main()
