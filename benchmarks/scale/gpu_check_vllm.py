"""GPU check: a ~0.5B Qwen2-style model built from a config (no download) trains GiGPO on
sokoban with vLLM generation; prints generation and training tokens/s and the logprob
mismatch between vLLM and the trainer. Run by ``benchmarks/scale/gpu_check.py`` where vLLM imports.

    python benchmarks/scale/gpu_check_vllm.py [--iterations 4] [--out FILE.md]

Generation tokens/s: tokens vLLM sampled / seconds inside ``LLM.generate`` (all rows of a
turn in one batched call; prompts are prefix-cached). Training tokens/s: tokens pushed
through the model in ``Trainer.update`` (prompt + action of every row, forward and
backward) / seconds of the update. Mismatch: per sampled token, |logp_trainer - logp_vllm|
(mean and max) and the k3 estimate of KL(vLLM || trainer). The first iteration includes
vLLM's warm-up and is reported but left out of the means.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from cairn.train.config import load_config
from cairn.train.trainer import Trainer

OVERRIDES = [
    # ~507M parameters: Qwen2 layout, 24 layers of width 1024 (the vocabulary is the env's)
    "model.arch=qwen2",
    "model.hidden_size=1024",
    "model.layers=24",
    "model.heads=16",
    "model.intermediate_size=5504",
    "model.dtype=bfloat16",
    "model.device=cuda",
    "model.attn_implementation=sdpa",
    "rollout.engine=vllm",
    "rollout.engine_options={gpu_memory_utilization: 0.3, tis_cap: 2.0}",
    "rollout.restrict_to_admissible=false",  # vLLM samples free text (choices go to HF)
    "rollout.max_new_tokens=8",
    "rollout.max_turns=8",
    "rollout.groups=16",
    "rollout.group_size=8",
    "advantage.name=gigpo",
    "advantage.options={episode_norm: mean_std}",  # as recorded (eq. 3 with the std)
    "optim.lr=1e-5",
    "optim.epochs=1",
    "optim.minibatch_size=256",
    "eval.at_start=false",
    "eval.episodes=16",
    "eval.every=0",
    "train.time_budget_s=null",
    "checkpoint.every=1000",
    "log.progress=false",
]


def _timed(obj, name: str, box: dict) -> None:
    """Wrap ``obj.name`` to add its wall time (CUDA-synchronised) to ``box[name]``."""
    fn = getattr(obj, name)

    def wrapper(*args, **kwargs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        torch.cuda.synchronize()
        box[name] = box.get(name, 0.0) + time.perf_counter() - t
        return out

    setattr(obj, name, wrapper)


def run(iterations: int, out_dir: Path) -> list[dict]:
    cfg = load_config(None, [*OVERRIDES, f"train.iterations={iterations}", f"out_dir={out_dir}"])
    trainer = Trainer(cfg, out_dir / "run")
    policy = trainer.policy
    params = sum(p.numel() for p in policy.model.parameters())
    print(f"model: {params / 1e6:.1f}M parameters, {policy.model.dtype}", flush=True)
    box: dict[str, float] = {}
    _timed(policy.llm, "generate", box)
    _timed(trainer, "update", box)
    rows = []
    for it in range(1, iterations + 1):
        trainer.iteration = it
        box.clear()
        gen0, fwd0 = policy.generated_tokens, policy.forward_tokens
        row = trainer.train_iteration()
        train_tokens = policy.forward_tokens - fwd0 - row["rollout/forward_tokens"]
        rows.append({
            "iteration": it,
            "params_m": params / 1e6,
            "gen_tokens": policy.generated_tokens - gen0,
            "gen_tokens_per_s": (policy.generated_tokens - gen0) / box["generate"],
            "train_tokens": train_tokens,
            "train_tokens_per_s": train_tokens / box["update"],
            "logprob_abs_diff_mean": row["rollout/logprob_abs_diff_mean"],
            "logprob_abs_diff_max": row["rollout/logprob_abs_diff_max"],
            "logprob_kl_k3": row["rollout/logprob_kl_k3"],
            "iteration_s": row["time/iteration"],
            "steps": row["steps"],
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    trainer._finish(trainer._summary(0.0))
    return rows


def report(rows: list[dict]) -> str:
    import vllm

    warm = rows[1:] or rows
    mean = {k: float(np.mean([r[k] for r in warm])) for k in rows[0] if k != "iteration"}
    gpu = torch.cuda.get_device_name(0)
    lines = [
        "# GPU check: GiGPO on sokoban with vLLM generation",
        "",
        f"Measured {date.today()} on {gpu} (torch {torch.__version__}, vLLM {vllm.__version__}, "
        f"Python {platform.python_version()}) by `python benchmarks/scale/gpu_check_vllm.py`: a "
        f"{rows[0]['params_m']:.0f}M-parameter Qwen2-style model built from a config (bf16, no "
        "download), 16 groups x 8 episodes per iteration, free-text actions of at most 8 tokens.",
        "",
        "| iteration | gen tokens/s | train tokens/s | |dlogp| mean | |dlogp| max | KL k3 | "
        "iteration (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in [*rows, {**mean, "iteration": "mean (2..)"}]:
        lines.append(
            f"| {r['iteration']} | {r['gen_tokens_per_s']:,.0f} | {r['train_tokens_per_s']:,.0f} | "
            f"{r['logprob_abs_diff_mean']:.2e} | {r['logprob_abs_diff_max']:.2e} | "
            f"{r['logprob_kl_k3']:.2e} | {r['iteration_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/scale/gpu_check_vllm.md"))
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/cairn_gpu_check"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device visible to torch")
    text = report(run(args.iterations, args.run_dir))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
