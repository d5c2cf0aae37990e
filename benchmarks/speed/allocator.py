"""Seconds of the same rollout before and after updates, under glibc's malloc and mimalloc.

    python benchmarks/speed/allocator.py                   # twx_smol, 2 processes per allocator
    python benchmarks/speed/allocator.py --presets sokoban_smol --repeats 1
    python benchmarks/speed/allocator.py --smoke           # the tiny default, seconds, no record

Each arm is a fresh process, alternating system, mimalloc, system, ...: a mimalloc arm
executes itself again with the library preloaded (``cairn.cli.allocator.reexec``, what the
``cairn`` command does), a system arm runs with ``CAIRN_ALLOCATOR=system``. In the process,
the preset's trainer plays rollout 1 and rollout 2 from the same weights and random streams
(the same episodes), then runs update 1 (on rollout 1's episodes), rollout 3 (weights and
streams restored to rollout 1's: the same episodes again), update 2 (the same batch) and
rollout 4 (restored again). So every rollout is the same work and both updates are; a
rollout that takes longer after an update than before it ran slower, not more. The record
gives per arm the seconds, CPU seconds (user, system) and page faults of each step, and
the allocator the process ran on (read from its memory map).

Record: benchmarks/results/speed/allocator.md (a section per --label) and
allocator-<label>.json. Timings on a shared machine are noisy: run it alone.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/_lib
from _lib.arms import arm_result  # noqa: E402  (imports no cairn: an arm imports it first)

OUT = ROOT / "benchmarks" / "results" / "speed"
STEPS = ("rollout 1", "rollout 2", "update 1", "rollout 3", "update 2", "rollout 4")
QUIET = ["train.time_budget_s=null", "eval.at_start=false", "eval.every=0",
         "checkpoint.every=100000", "log.progress=false", "log.trajectories_every=0"]  # fmt: skip


def arm(preset: str, overrides: list[str]) -> dict:
    """The six steps of the module docstring in this process: per step its seconds, CPU
    seconds and minor page faults."""
    import torch

    from cairn.cli import allocator
    from cairn.data.tokens import TokenBatch
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        cfg = load_config(preset, ["train.iterations=1", *QUIET, f"out_dir={tmp}", *overrides])
        trainer = Trainer(cfg, Path(tmp) / "run")
        model = trainer.policy.model
        weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        streams = copy.deepcopy((trainer.state.task_rng, trainer.state.sample_gen))
        steps: list[dict] = []

        def timed(name: str, fn):  # type: ignore[no-untyped-def]
            before, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            out = fn()
            after = resource.getrusage(resource.RUSAGE_SELF)
            steps.append({
                "step": name, "s": time.perf_counter() - t,
                "user_s": after.ru_utime - before.ru_utime,
                "sys_s": after.ru_stime - before.ru_stime,
                "minor_faults": after.ru_minflt - before.ru_minflt,
            })  # fmt: skip
            return out

        def rollout():  # type: ignore[no-untyped-def]
            trainer.state.task_rng, trainer.state.sample_gen = copy.deepcopy(streams)
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if n in weights:
                        p.copy_(weights[n])
            tokens = trainer.policy.forward_tokens
            episodes, _ = trainer.collect()
            return episodes, trainer.policy.forward_tokens - tokens

        episodes, tokens = timed("rollout 1", rollout)
        timed("rollout 2", rollout)
        batch, adv, terms = trainer.advantage(episodes)
        token_batch = TokenBatch.from_episodes(
            episodes, adv, pad_id=trainer.policy.pad_id, pack=cfg.train.pack_episodes
        )
        for k in (1, 2):
            timed(f"update {k}", lambda: trainer.update(token_batch, batch, terms))
            timed(f"rollout {k + 2}", rollout)
    return {
        "allocator": allocator.current(),
        "steps": steps,
        "rollout_tokens": tokens,
        "episode_steps": len(batch),
        "threads": torch.get_num_threads(),
    }


def run_arm(name: str, preset: str, overrides: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if "mimalloc" in env.get("LD_PRELOAD", ""):
        env.pop("LD_PRELOAD")
    env["CAIRN_ALLOCATOR"] = name
    spec = json.dumps({"preset": preset, "overrides": overrides})
    result = arm_result(__file__, spec, f"arm {name} of {preset}", env, ROOT)
    if result["allocator"] != name:
        raise RuntimeError(
            f"arm {name} ran on {result['allocator']} (is cmeel-mimalloc installed?)"
        )
    return {"arm": name, "preset": preset, **result}


def record(args: argparse.Namespace, results: list[dict], load: tuple[float, float]) -> str:
    """The section's markdown: the command, the machine, and per preset and arm the median
    (min-max) over processes of each step's seconds, then CPU and page faults."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    lines = [
        f"Commit: `{commit}`",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()}), by `python "
        f"benchmarks/speed/allocator.py {' '.join(sys.argv[1:])}`.",
        "",
        f"- {args.repeats} process(es) per allocator, arms alternating; load average "
        f"{load[0]:.2f} before and {load[1]:.2f} after",
        "",
        "| preset | allocator | "
        + " | ".join(f"{s} s" for s in STEPS)
        + " | user CPU s, rollouts 1-2 / 3-4 | minor faults, rollouts 1-2 / 3-4 |",
        "|---|---|" + "---:|" * (len(STEPS) + 2),
    ]
    for preset in args.presets:
        for name in ("system", "mimalloc"):
            runs = [r for r in results if r["preset"] == preset and r["arm"] == name]
            if not runs:
                continue
            cells = []
            for step in STEPS:
                vals = [s["s"] for r in runs for s in r["steps"] if s["step"] == step]
                cells.append(_spread(vals))

            def total(key: str, names: tuple[str, ...], rr: list[dict] = runs) -> str:
                return _spread([
                    sum(s[key] for s in r["steps"] if s["step"] in names) for r in rr
                ], 0 if key == "minor_faults" else 1)  # fmt: skip

            early, late = ("rollout 1", "rollout 2"), ("rollout 3", "rollout 4")
            lines.append(
                f"| {preset} | {name} | "
                + " | ".join(cells)
                + f" | {total('user_s', early)} / {total('user_s', late)}"
                + f" | {total('minor_faults', early)} / {total('minor_faults', late)} |"
            )
    tokens = {r["preset"]: (r["rollout_tokens"], r["episode_steps"]) for r in results}
    lines += ["", "Work per rollout (forward tokens, steps): " + ", ".join(
        f"{p} {t:,} tokens, {n} steps" for p, (t, n) in tokens.items()
    )]  # fmt: skip
    return "\n".join(lines) + "\n"


def _spread(vals: list[float], digits: int = 1) -> str:
    if not vals:
        return "-"
    fmt = f"{{:,.{digits}f}}"
    mid = fmt.format(statistics.median(vals))
    return mid if len(vals) == 1 else f"{mid} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["twx_smol"])
    ap.add_argument("--repeats", type=int, default=2, help="processes per allocator and preset")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--smoke", action="store_true", help="the tiny sokoban preset, no record")
    ap.add_argument("--label", default="the same rollout before and after updates")
    ap.add_argument("--out", type=Path, default=None, help=f"record folder (default {OUT})")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        from cairn.cli import allocator

        allocator.reexec([__file__, *sys.argv[1:]])  # mimalloc arms: returns once re-executed
        allocator.settle()
        spec = json.loads(args.arm)
        print(json.dumps(arm(spec["preset"], spec["overrides"])))
        return 0
    if args.smoke:
        args.presets, args.repeats = ["sokoban_grpo"], 1
        args.set += ["rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2"]
    load0, results = os.getloadavg()[0], []
    for preset in args.presets:
        for _ in range(args.repeats):
            for name in ("system", "mimalloc"):
                res = run_arm(name, preset, args.set)
                secs = [round(s["s"], 1) for s in res["steps"]]
                print(f"{preset} {name}: {secs}", flush=True)
                results.append(res)
    text = record(args, results, (load0, os.getloadavg()[0]))
    print(text)
    out = args.out or (None if args.smoke else OUT)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        from _lib.records import write_section

        slug = "".join(c if c.isalnum() or c in "_.-" else "-" for c in args.label)
        (out / f"allocator-{slug}.json").write_text(json.dumps(results, indent=1) + "\n")
        header = "# The same rollout before and after updates, per memory allocator\n"
        write_section(out / "allocator.md", args.label, "seconds", text, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
