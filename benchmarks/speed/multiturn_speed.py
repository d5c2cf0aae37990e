"""The multi-turn real-model preset (sokoban_smol: SmolLM2-135M-Instruct, LoRA, history 1)
before and after the generation and scoring speed-ups (the response-only head, dropped
finished rows, the shared prefix, packed episodes), in one script with alternating arms.

    python benchmarks/speed/multiturn_speed.py [--repeats 2] [--iterations 2] [--set KEY=VALUE]
    python benchmarks/speed/multiturn_speed.py --dry     # seconds: 1 tiny iteration per arm

Arms (each a fresh process, so torch's thread pool and the model load are the same):

- ``before``: the code path of commit 1e1f825 (before those speed-ups). That commit cannot run
  sokoban_smol (it has neither the preset, the embedded model, the text rendering nor the
  tagged format), so the arm runs this checkout's tree (``git archive HEAD``) with
  ``src/cairn/policies/hf.py`` taken from 1e1f825: its prefill computes every prompt
  position's logits, no finished row is dropped, no prefix is shared, and scoring runs the
  whole model (the last A positions' logits). One fix is patched in, because without it the
  arm would do different work: generation ends at every end token of the model's
  generation config (SmolLM2 ends a turn with <|im_end|>; 1e1f825 knew only the eos).
  It also trains every turn as its own row (``train.pack_episodes=false``) and shuffles
  rows one by one into minibatches (``optim.group_prompts=false``): packing and grouped
  minibatches came with the same work. With ``--same-minibatches`` it keeps the preset's
  minibatch order, so that only the code differs (the update's math is then the same).
- ``after``: this checkout (``src/``): the prefill keeps the last position's logits,
  finished rows are dropped, the prompts' shared prefix runs once (``share_prefix``),
  scoring runs the head on response tokens only, and with a full history
  (``--set agent.history=N`` for N >= max_turns - 1) generation continues each episode's
  KV cache (``reuse_cache``) and, with ``--set train.pack_episodes=true``, the update
  trains each episode as one row.
- ``exact`` (with ``--exact``): ``after`` with ``drop_finished``, ``share_prefix`` and
  ``reuse_cache`` off,
  whose generation is bit-identical to ``before``: for the same seed, its first
  iteration's rollout must give the same metrics.
- ``bf16`` (with ``--bf16``): ``after`` with ``model.dtype=bfloat16``: the frozen base
  weights and activations in bfloat16, the LoRA adapters (and so Adam) in float32 (peft
  keeps adapters of a bfloat16 base in float32), log-probs from float32 logits. A CPU with
  AVX512-BF16 (or AMX) multiplies bfloat16 matrices 2-3x faster than float32. The math
  changes (rounding of the base model's activations), so its metrics differ from
  ``after``'s beyond float32 rounding; it is reported beside the others, not as ``after``.

Every arm trains the same seed with ``train.threads`` 1, ``--iterations`` iterations per
process; the table gives per arm the median over iterations and repeats of seconds per
iteration, its rollout (generation + env steps), the time inside ``generate``, the update,
the tokens pushed through the model per episode by the rollout and by the update (the
shared prefix counted once), the tokens generated per episode and the process's peak RSS,
then the metrics of iteration 1 that differ between the arms. Written to
``benchmarks/results/speed/multiturn.md`` (and ``multiturn.json``) unless --dry.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/_lib
from _lib.arms import arm_result  # noqa: E402  (imports no cairn: an arm imports it first)

OUT = ROOT / "benchmarks" / "results" / "speed"
BEFORE_COMMIT = "1e1f825"
CONFIG = "sokoban_smol"
# Overrides of an arm beyond --set (after them: they win).
ARM_SETS = {
    "before": ["train.pack_episodes=false", "optim.group_prompts=false"],
    "bf16": ["model.dtype=bfloat16"],
}
DRY = ["rollout.groups=2", "rollout.group_size=2", "rollout.max_turns=2",
       "rollout.max_new_tokens=16", "optim.minibatch_size=8"]  # fmt: skip
# What 1e1f825's hf.py lacks that would change the work done (see the module docstring).
END_TOKENS_PATCH = [
    ("        self.eos_id = tokenizer.eos_token_id\n",
     "        self.eos_id = tokenizer.eos_token_id\n"
     "        self.end_ids = end_token_ids(model, tokenizer)\n"),
    ('        if tok == self.eos_id:\n            return "eos"\n',
     '        if tok in self.end_ids:\n            return "eos"\n'),
]  # fmt: skip


def before_tree(dest: Path) -> Path:
    """This checkout's committed tree with 1e1f825's hf.py (patched for end tokens) in
    ``dest``; returns its ``src`` folder."""
    archive = subprocess.run(
        ["git", "archive", "HEAD", "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    old = subprocess.run(
        ["git", "show", f"{BEFORE_COMMIT}:src/cairn/policies/hf.py"],
        cwd=ROOT, capture_output=True, check=True, text=True,
    ).stdout  # fmt: skip
    for a, b in END_TOKENS_PATCH:
        if old.count(a) != 1:
            raise RuntimeError(f"{BEFORE_COMMIT}'s hf.py: patch target not found once: {a!r}")
        old = old.replace(a, b)
    import inspect

    from cairn.policies import hf

    old += "\n\n" + inspect.getsource(hf.end_token_ids)
    (dest / "src" / "cairn" / "policies" / "hf.py").write_text(old)
    return dest / "src"


def arm(name: str, iterations: int, extra: list[str]) -> dict:
    """One process: ``iterations`` iterations of sokoban_smol; per-iteration seconds, token
    counts and metrics, and the peak RSS."""
    import torch

    from cairn.policies.hf import HFPolicy
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    timers = {"generate_s": 0.0, "generated": 0}
    generate = HFPolicy.generate

    def timed(self, prompts, **kw):
        t = time.perf_counter()
        out = generate(self, prompts, **kw)
        timers["generate_s"] += time.perf_counter() - t
        timers["generated"] += sum(len(g.token_ids) for g in out)
        return out

    HFPolicy.generate = timed
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        overrides = [
            f"train.iterations={iterations}", "train.threads=1", "train.time_budget_s=null",
            "eval.at_start=false", "eval.every=0", "checkpoint.every=100000",
            "log.progress=false", f"out_dir={tmp}", *extra,
        ]  # fmt: skip
        if name == "exact":  # the plain path's rows, the scoring buckets kept
            import cairn.policies as policies

            made = policies.generation_options
            policies.generation_options = lambda cfg, extend_turns=False: dataclasses.replace(
                made(cfg, extend_turns), drop_finished=False, share_prefix=False,
                reuse_cache=False, prefix_block=0,
            )  # fmt: skip
        trainer = Trainer(load_config(CONFIG, overrides), Path(tmp) / "run")
        rows = []
        for it in range(1, iterations + 1):
            trainer.iteration = it
            timers["generate_s"], timers["generated"] = 0.0, 0
            before = trainer.policy.forward_tokens
            row = trainer.train_iteration()
            update_tokens = trainer.policy.forward_tokens - before - row["rollout/forward_tokens"]
            n = trainer.cfg.rollout.groups * trainer.cfg.rollout.group_size
            rows.append({
                "time/generate": timers["generate_s"],
                "tokens/rollout_per_episode": row["rollout/forward_tokens"] / n,
                "tokens/update_per_episode": update_tokens / n,
                "tokens/generated_per_episode": timers["generated"] / n,
                **{k: v for k, v in row.items() if isinstance(v, int | float)},
            })  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (kB on Linux)
    return {"arm": name, "torch": torch.__version__, "peak_rss_gib": peak, "rows": rows}


def run(
    arms: list[str], repeats: int, iterations: int, extra: list[str], src: Path, same: bool
) -> list:
    """``repeats`` rounds of the arms in turn; ``same``: "before" keeps the preset's
    minibatch order (module docstring)."""
    out = []
    for rep in range(repeats):
        for name in arms:
            path = src if name == "before" else ROOT / "src"
            env = {**os.environ, "PYTHONPATH": str(path)}
            drop = {"optim.group_prompts=false"} if same else set()
            sets = [*extra, *(x for x in ARM_SETS.get(name, []) if x not in drop)]
            spec = json.dumps({"arm": name, "iterations": iterations, "extra": sets})
            result = {"repeat": rep, **arm_result(__file__, spec, f"arm {name}", env, ROOT)}
            print(json.dumps(_brief(result)), flush=True)
            out.append(result)
    return out


COLUMNS = [  # (key, header, format)
    ("time/iteration", "s / iteration", ".1f"),
    ("time/rollout", "rollout s", ".1f"),
    ("time/generate", "in generate s", ".1f"),
    ("time/update", "update s", ".1f"),
    ("tokens/rollout_per_episode", "rollout tokens / ep", ".0f"),
    ("tokens/update_per_episode", "update tokens / ep", ".0f"),
    ("tokens/generated_per_episode", "generated / ep", ".1f"),
]


def _brief(result: dict) -> dict:
    keys = [k for k, _, _ in COLUMNS]
    return {
        "arm": result["arm"],
        "repeat": result["repeat"],
        "peak_rss_gib": round(result["peak_rss_gib"], 2),
        "rows": [{k: round(r[k], 2) for k in keys} for r in result["rows"]],
    }


def _median(results: list[dict], name: str, key: str) -> float:
    return statistics.median(r[key] for res in results if res["arm"] == name for r in res["rows"])


def table(results: list[dict], arms: list[str], args: argparse.Namespace, load) -> str:
    lines = [
        "| arm | " + " | ".join(h for _, h, _ in COLUMNS) + " | peak RSS GiB |",
        "|---|" + "---:|" * (len(COLUMNS) + 1),
    ]
    for name in arms:
        cells = []
        for key, _, fmt in COLUMNS:
            values = [r[key] for res in results if res["arm"] == name for r in res["rows"]]
            spread = f" ({min(values):{fmt}}-{max(values):{fmt}})" if key.startswith("time") else ""
            cells.append(f"{statistics.median(values):{fmt}}{spread}")
        rss = [res["peak_rss_gib"] for res in results if res["arm"] == name]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {max(rss):.2f} |")
    base = _median(results, "before", "time/iteration")
    ratios = ", ".join(
        f"{name} {base / _median(results, name, 'time/iteration'):.2f}x"
        for name in arms
        if name != "before"
    )
    head = (
        f"Measured {date.today()} on {platform.machine()} ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}, torch {results[0]['torch']}), load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after, by `python "
        f"benchmarks/speed/multiturn_speed.py --repeats {args.repeats} --iterations "
        f"{args.iterations}{' --exact' if args.exact else ''}{' --bf16' if args.bf16 else ''}"
        f"{' --same-minibatches' if args.same_minibatches else ''}"
        f"{''.join(f' --set {s}' for s in args.set)}"
        f"{f' --label {args.label}' if args.label != CONFIG else ''}`: {CONFIG}, seed 0, "
        f"train.threads 1, arms alternating ({', '.join(arms)}), each a fresh process; "
        "medians over all iterations (spread min-max). Speed-up of the median iteration "
        f"over before: {ratios}."
    )
    return "\n".join([head, "", *lines, "", *_differences(results, arms)]) + "\n"


def _differences(results: list[dict], arms: list[str]) -> list[str]:
    """Iteration 1's non-time metrics of the first repeat that differ between arms."""
    first = {res["arm"]: res["rows"][0] for res in results if res["repeat"] == 0}
    ref = first["before"]
    out = []
    for name in arms[1:]:
        row = first[name]
        keys = sorted(k for k in ref if not k.startswith(("time/", "tokens/")) and k in row)
        diff = [k for k in keys if ref[k] != row[k]]
        same = len(keys) - len(diff)
        text = ", ".join(f"{k} {ref[k]:.6g} vs {row[k]:.6g}" for k in diff) or "none"
        out.append(
            f"Iteration 1, before vs {name}: {same} of {len(keys)} non-time metrics equal; "
            f"differing: {text}."
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--exact", action="store_true", help="also the bit-identical 'exact' arm")
    ap.add_argument("--bf16", action="store_true", help="also the 'bf16' arm (bfloat16 base)")
    ap.add_argument("--dry", action="store_true", help="1 tiny iteration per arm, no file")
    ap.add_argument(
        "--same-minibatches",
        action="store_true",
        help="'before' keeps the preset's minibatch order: only the code differs",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every arm (e.g. a smaller rollout)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--label", default=CONFIG, help="the record's section (one per label)")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        spec = json.loads(args.arm)
        print(json.dumps(arm(spec["arm"], spec["iterations"], spec["extra"])))
        return 0
    extra = (DRY if args.dry else []) + args.set
    if args.dry:
        args.repeats, args.iterations = 1, 1
    arms = ["before", "after"] + [a for a in ("exact", "bf16") if getattr(args, a)]
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
        src = before_tree(Path(tmp))
        load_before = os.getloadavg()[0]
        results = run(arms, args.repeats, args.iterations, extra, src, args.same_minibatches)
        text = table(results, arms, args, (load_before, os.getloadavg()[0]))
    print(text)
    if not args.dry:
        sys.path.insert(
            0, str(Path(__file__).resolve().parents[2] / "benchmarks")
        )  # benchmarks/_lib
        from _lib.records import write_section

        header = "# Multi-turn real-model iterations before and after issue 25\n"
        title = "seconds per iteration, tokens, peak RSS"
        write_section(args.out / "multiturn.md", args.label, title, text, header)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.label)
        rows = "multiturn.json" if args.label == CONFIG else f"multiturn-{slug}.json"
        (args.out / rows).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
