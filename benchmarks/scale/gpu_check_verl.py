"""GPU check, verl part: the example (examples/verl/run_sokoban_gigpo.sh) for 2 training
steps on stock verl with vLLM, on a ~0.5B Qwen2-style model built from a config (random
weights, no download); records tokens/s and success from verl's console metrics in
benchmarks/results/scale/gpu_check_verl.md. Run through ``benchmarks/scale/gpu_check.sh``.

    python benchmarks/scale/gpu_check_verl.py [--steps 2] [--work /tmp/cairn_gpu_check_verl]

It needs verl 0.9.1 with vLLM (``pip install verl[vllm]``-style environment) and
exits 2 naming what is missing. The model's tokenizer is the env's word-level one with a
plain chat template, so that verl's prompt-length filter can render the dataset prompts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEED = ("verl", "vllm", "hydra", "datasets", "pyarrow", "transfer_queue", "ray")
#: verl's console metrics worth recording (key in its "step:N - key:value - ..." lines).
KEYS = (
    "cairn/success",
    "cairn/episodes",
    "cairn/failed_episodes",
    "cairn/turns_per_episode",
    "cairn/invalid_actions",
    "perf/throughput",
    "perf/total_num_tokens",
    "timing_s/gen",
    "timing_s/step",
    "response_length/mean",
)
TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
SMALL_RUN = [  # a short run that fits one GPU next to vLLM
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=2",
    "++cairn.rollout.max_new_tokens=8",
    "++cairn.rollout.max_turns=8",
    "trainer.test_freq=-1",
]


def build_model(out: Path) -> None:
    """The ~0.5B model of benchmarks/scale/gpu_check_vllm.py, saved with its tokenizer and
    template."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))
    from gpu_check_vllm import OVERRIDES

    from cairn.envs import make
    from cairn.policies import build_policy
    from cairn.train.config import load_config

    model_keys = [o for o in OVERRIDES if o.startswith("model.") and "device" not in o]
    cfg = load_config(None, [*model_keys, "env.options.render=grid"])
    env = make(cfg.env.name, **cfg.env.options)
    env.reset(seed=0)
    policy = build_policy(cfg.model, env, env.instruction, seed=0)
    policy.tokenizer.chat_template = TEMPLATE
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)


def metrics(log: str) -> list[dict[str, float]]:
    """One dict per training step from verl's console lines."""
    rows = []
    for line in log.splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if not m:
            continue
        row = {"step": float(m.group(1))}
        for key, value in re.findall(r"([\w/@.\-]+):([-+\d.eE]+|nan)", m.group(2)):
            if key in KEYS:
                row[key] = float(value)
        rows.append(row)
    return rows


def report(rows: list[dict[str, float]], seconds: float, rc: int) -> str:
    head = "| step | " + " | ".join(KEYS) + " |"
    lines = [head, "|" + "---|" * (len(KEYS) + 1)]
    for r in rows:
        cells = [f"{r[k]:.4g}" if k in r else "n/a" for k in KEYS]
        lines.append(f"| {int(r['step'])} | " + " | ".join(cells) + " |")
    return (
        f"# GPU check: cairn on stock verl (example, 2 steps)\n\n"
        f"`bash benchmarks/scale/gpu_check.sh` ({date.today()}): "
        f"`examples/verl/run_sokoban_gigpo.sh`"
        f" with a ~0.5B random-weight Qwen2-style model, vLLM rollout, GiGPO; exit status "
        f"{rc}, {seconds:.0f} s wall. perf/throughput is verl's tokens/s per GPU; cairn/success "
        f"is the share of episodes solved (a random-weight model: expect ~0).\n\n"
        + "\n".join(lines)
        + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cairn_gpu_check_verl"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale/gpu_check_verl.md")
    args = ap.parse_args()
    missing = [m for m in NEED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"gpu_check_verl: missing packages {missing}", file=sys.stderr)
        return 2
    model = args.work / "model"
    build_model(model)
    env = {**os.environ, "MODEL": str(model), "DATA": str(args.work / "data"), "NGPUS": "1"}
    env["STEPS"], env["PYTHON"] = str(args.steps), sys.executable
    start = time.perf_counter()
    proc = subprocess.run(
        ["bash", str(ROOT / "examples/verl/run_sokoban_gigpo.sh"), *SMALL_RUN],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    (args.work / "verl.log").write_text(proc.stdout + proc.stderr)
    rows = metrics(proc.stdout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, seconds, proc.returncode))
    print(args.out.read_text())
    if proc.returncode != 0 or len(rows) < args.steps:
        print(f"gpu_check_verl: verl failed; log in {args.work / 'verl.log'}", file=sys.stderr)
        print(proc.stderr[-4000:], file=sys.stderr)
        return proc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
