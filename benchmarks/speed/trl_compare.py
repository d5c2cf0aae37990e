"""cairn vs TRL's GRPOTrainer on the same GRPO work: SmolLM2-135M-Instruct, single-turn
countdown, the same prompts and reward, timed side by side in one script.

    python benchmarks/speed/trl_compare.py [--repeats 20] [--budget-min 35] [--steps 3]
    python benchmarks/speed/trl_compare.py --dry-run   # the plan: settings, commands; runs nothing

The work (both arms): the ``countdown_smol`` preset's task and prompts (its chat prompt
with the made-up exchange, cairn's ``render: text`` instances), 2 prompts per step with 8
completions each (group 8, 16 rows), ``--new-tokens`` new tokens at most (default 32; the
preset samples 48), temperature 1, no top-p/top-k, LoRA r 16 / alpha 32 on all linear
layers (``--mode full``: every weight), AdamW lr 2e-4 constant, no weight decay, gradient
norm clipped at 1, no KL (TRL ``beta=0``, cairn ``loss.kl_coef`` 0), clip 0.2 / 0.28,
token-mean loss (TRL ``loss_type="dapo"``), group mean/std advantages (TRL
``scale_rewards="group"``), one update per step (cairn: 1 epoch of one 16-row minibatch;
TRL: batch 16, no accumulation, ``num_iterations=1``), float32, 1 torch thread
(``torch.set_num_threads(1)`` and ``OMP_NUM_THREADS=1`` in both), gradient checkpointing
the same in both (``--grad-ckpt``, default off: cairn ``model.gradient_checkpointing``, TRL
``gradient_checkpointing``, which GRPOConfig turns on by default; it trades the update's
time for its activation memory, so arms that differ in it do not compare).

Same prompts: a cairn arm runs first and records the prompt ids its trainer built for each
step (seed 0, so every cairn process draws the same tasks) with their env seeds; TRL gets
them decoded as plain-text prompts (already chat-formatted, so TRL applies no template) in
that order (``shuffle_dataset=False``), and the record says whether re-encoding gave back
the same ids. Same reward: TRL's reward function is cairn's: the completion's answer read
by ``cairn.agent.parse_action`` (the preset's ``tagged`` format), stepped in a
``cairn.envs.countdown.Countdown`` reset with that prompt's seed (the env's reward, with
the preset's 0.1 format reward), minus the preset's invalid penalty (0).

Arms alternate (cairn, TRL, cairn, TRL, ...), each a fresh process running 1 warm-up step
(left out) and ``--steps`` measured steps, until ``--repeats`` pairs are done or the next
pair would pass ``--budget-min`` minutes. TRL lives in its own virtual environment
(``runs/.trl-venv``, made on first use with ``python -m venv`` and pip: trl 1.16.0 with the
torch, transformers, peft, accelerate, datasets and gguf versions of the running Python,
reused when it imports), never in cairn's dependencies; its process imports only cairn's
countdown env and answer parser (``PYTHONPATH=src``).

What is measured, per step (medians over a process's measured steps):

- generation s: cairn: wall time inside ``HFPolicy.generate`` (the rollout's only sampling
  call: prefill + decode of the 16 rows). TRL: wall time inside
  ``GRPOTrainer._generate_single_turn`` (padding the prompt ids, ``model.generate``, cutting
  at the first end token). TRL 1.16's own timings (``profiling_context``) are only sent to
  wandb/mlflow/trackio, so the call is wrapped instead.
- step s: cairn: ``time/iteration`` of ``Trainer.train_iteration`` (rollout, rewards,
  advantages, update). TRL: from the ``on_step_begin`` to the ``on_step_end`` callback of
  its training loop (prompt tokenisation, generation, rewards, advantages, forward,
  backward, clipping, optimizer step); neither includes logging.
- update s: step s minus generation s, the same definition in both (cairn's own
  ``time/update`` is recorded beside it).
- generated tokens/s: new tokens sampled (end tokens included) / generation s.
- trained tokens/s: completion tokens the loss covers (cairn: the steps' action ids; TRL:
  ``completion_mask``) / update s.
- peak RSS: ``VmHWM`` of the arm's own process (``/proc/self/status``) at its end, model
  loading included; "steps peak" resets it (``/proc/self/clear_refs``) once the trainer is
  built, so it covers the steps only.

The table gives the cairn/TRL ratio of each (paired by repeat: each cairn process against
the TRL process after it) as the median and min-max over repeats, the arms' own medians,
and the load average before and after (the machine may be shared). Written to
``benchmarks/results/speed/trl_compare.md``; the per-process rows go to
``runs/trl_compare.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "speed"
VENV = ROOT / "runs" / ".trl-venv"
TRL_VERSION = "1.16.0"
#: Packages the TRL venv takes at the versions of the running Python's (cairn's) install.
PINNED = ("torch", "transformers", "peft", "accelerate", "datasets", "gguf")
PRESET = "countdown_smol"
MODEL = "smollm2-135m-instruct"
ARMS = ("cairn", "trl")
#: (key, label, higher is better): the per-step numbers each arm reports.
METRICS = (
    ("step_s", "whole step s", False),
    ("gen_s", "generation s", False),
    ("update_s", "update s (step - generation)", False),
    ("gen_tok_s", "generated tokens/s", True),
    ("train_tok_s", "trained tokens/s", True),
    ("peak_rss_mb", "peak RSS MB (process)", False),
    ("steps_peak_mb", "peak RSS MB (steps only)", False),
)
#: The issue's checks: cairn/TRL ratio at most this (median over repeats).
CHECKS = {"step_s": 0.5, "gen_s": 0.6, "peak_rss_mb": 0.6}
LR, CLIP_LOW, CLIP_HIGH, MAX_GRAD_NORM = 2e-4, 0.2, 0.28, 1.0


# -- settings ---------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="cairn/TRL pairs at most")
    ap.add_argument("--budget-min", type=float, default=35.0, help="start no pair past this")
    ap.add_argument("--steps", type=int, default=3, help="measured steps per process")
    ap.add_argument("--new-tokens", type=int, default=32, help="max new tokens (16-32)")
    ap.add_argument("--groups", type=int, default=2, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    ap.add_argument("--mode", choices=("lora", "full"), default="lora")
    ap.add_argument(
        "--grad-ckpt", choices=("off", "on"), default="off", help="gradient checkpointing, both"
    )
    ap.add_argument("--venv", type=Path, default=VENV, help="TRL's virtual environment")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--need-mb", type=float, default=10000, help="wait for this much free")
    ap.add_argument("--rows", type=Path, default=ROOT / "runs" / "trl_compare.json")
    ap.add_argument("--resume", action="store_true", help="continue the rows in --rows")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("repeats", "steps", "groups", "group_size"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 1 <= args.new_tokens <= 512:
        ap.error(f"--new-tokens must be in [1, 512], got {args.new_tokens}")
    if args.budget_min <= 0:
        ap.error(f"--budget-min must be > 0, got {args.budget_min}")
    if args.arm and args.spec is None:
        ap.error("--arm needs --spec")
    return args


def cairn_overrides(args: argparse.Namespace, out_dir: str) -> list[str]:
    """The ``--set`` overrides of the preset for one cairn arm process."""
    steps = args.steps + 1  # the first is the warm-up
    model = [] if args.mode == "lora" else ["model.lora=null"]
    model.append(f"model.gradient_checkpointing={args.grad_ckpt == 'on'}")
    return [
        f"rollout.groups={args.groups}", f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.new_tokens}", "rollout.temperature=1.0",
        "rollout.top_p=1.0", f"optim.minibatch_size={args.groups * args.group_size}",
        "optim.epochs=1", f"optim.lr={LR}", "optim.lr_schedule=constant",
        "optim.weight_decay=0.0", f"optim.max_grad_norm={MAX_GRAD_NORM}",
        "loss.kl_coef=0.0", f"loss.clip_low={CLIP_LOW}", f"loss.clip_high={CLIP_HIGH}",
        "loss.agg=token-mean", "train.threads=1", f"train.iterations={steps}",
        "train.time_budget_s=null", "eval.at_start=false", "eval.every=0",
        "checkpoint.every=100000", "log.progress=false", f"out_dir={out_dir}", *model,
    ]  # fmt: skip


def trl_config(args: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments for one TRL arm process."""
    rows = args.groups * args.group_size
    return {
        "output_dir": out_dir, "per_device_train_batch_size": rows,
        "num_generations": args.group_size, "gradient_accumulation_steps": 1,
        "steps_per_generation": 1, "num_iterations": 1,
        "max_completion_length": args.new_tokens, "temperature": 1.0, "top_p": 1.0,
        "top_k": 0, "beta": 0.0, "epsilon": CLIP_LOW, "epsilon_high": CLIP_HIGH,
        "loss_type": "dapo", "scale_rewards": "group", "learning_rate": LR,
        "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0,
        "max_grad_norm": MAX_GRAD_NORM, "max_steps": args.steps + 1, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "use_cpu": True, "bf16": False,
        "shuffle_dataset": False, "seed": 0, "dataloader_num_workers": 0,
        "disable_tqdm": True, "gradient_checkpointing": args.grad_ckpt == "on",
    }  # fmt: skip


def install_commands(venv: Path, versions: dict[str, str]) -> list[list[str]]:
    """The commands that make TRL's venv: ``python -m venv``, then one pip install of trl
    and the pinned packages (``versions``: name -> version)."""
    py = str(venv / "bin" / "python")
    pins = [f"{name}=={versions[name]}" for name in PINNED]
    return [
        [sys.executable, "-m", "venv", str(venv)],
        [py, "-m", "pip", "install", "--quiet", f"trl=={TRL_VERSION}", *pins],
    ]


def local_versions() -> dict[str, str]:
    """The installed versions of ``PINNED`` in this Python (a local tag such as ``+cpu``
    dropped: the plain version resolves to the same wheel)."""
    from importlib.metadata import version

    return {name: version(name).split("+")[0] for name in PINNED}


# -- arithmetic -------------------------------------------------------------------------------
def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of ``values``."""
    if not values:
        raise ValueError("spread of no values")
    return statistics.median(values), min(values), max(values)


def pair_ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """cairn/TRL ratio of every metric per repeat: each repeat's cairn row against its TRL
    row (a repeat missing either arm is left out)."""
    by_rep: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_rep.setdefault(row["repeat"], {})[row["arm"]] = row
    out = []
    for rep in sorted(by_rep):
        arms = by_rep[rep]
        if set(arms) != set(ARMS):
            continue
        out.append({k: arms["cairn"][k] / arms["trl"][k] for k, _, _ in METRICS})
    return out


def fmt_spread(values: Sequence[float], digits: int = 2, suffix: str = "") -> str:
    med, lo, hi = spread(values)
    return f"{med:.{digits}f}{suffix} ({lo:.{digits}f}-{hi:.{digits}f})"


def verdict(key: str, ratios: Sequence[float]) -> str:
    """``pass``/``FAIL`` of the issue's check on ``key`` (by the median), or ``-``."""
    if key not in CHECKS:
        return "-"
    med = statistics.median(ratios)
    return f"{'pass' if med <= CHECKS[key] else 'FAIL'} (<= {CHECKS[key]})"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The ratio table: per metric, cairn/TRL median (min-max) over repeats, each arm's
    median over its processes, and the check."""
    ratios = pair_ratios(rows)
    if not ratios:
        raise ValueError("no repeat has both arms")
    lines = [
        "| metric | cairn/TRL (median, min-max) | cairn | TRL | check |",
        "|---|---|---:|---:|---|",
    ]
    for key, label, _ in METRICS:
        r = [x[key] for x in ratios]
        arm = {a: statistics.median(x[key] for x in rows if x["arm"] == a) for a in ARMS}
        cells = [label, fmt_spread(r, suffix="x"), f"{arm['cairn']:.2f}", f"{arm['trl']:.2f}"]
        lines.append("| " + " | ".join([*cells, verdict(key, r)]) + " |")
    return "\n".join(lines) + "\n"


def repeat_lines(rows: Sequence[dict[str, Any]]) -> str:
    """One line per process: its medians, tokens per step and mean reward."""
    head = "| repeat | arm | step s | gen s | update s | gen tok/step | peak MB | reward |"
    lines = [head, "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['repeat']} | {r['arm']} | {r['step_s']:.2f} | {r['gen_s']:.2f} | "
            f"{r['update_s']:.2f} | {r['gen_tokens']:.0f} | {r['peak_rss_mb']:.0f} | "
            f"{r['reward']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def summarize_steps(steps: Sequence[dict[str, float]], peaks: dict[str, float]) -> dict:
    """A process's row from its measured steps (each: gen_s, step_s, gen_tokens,
    train_tokens, reward, optional own_update_s) and its peaks (MB): medians per step."""
    if not steps:
        raise ValueError("no measured steps")
    med = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    per = {
        "update_s": statistics.median(s["step_s"] - s["gen_s"] for s in steps),
        "gen_tok_s": statistics.median(s["gen_tokens"] / s["gen_s"] for s in steps),
        "train_tok_s": statistics.median(
            s["train_tokens"] / (s["step_s"] - s["gen_s"]) for s in steps
        ),
    }
    return {**med, **per, **peaks}


# -- the arms (child processes) ---------------------------------------------------------------
def vm_hwm_mb() -> float:
    """This process's peak resident set (``VmHWM``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak() -> None:
    """Restart ``VmHWM`` from the current resident set (Linux ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _timed(fn: Callable, on_done: Callable[[float, Any, tuple], None]) -> Callable:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        on_done(time.perf_counter() - t0, out, a)
        return out

    return wrapper


def cairn_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """One cairn process: the preset's trainer, 1 warm-up + N steps; its row and the
    prompts (text, ids, env seed) of every step in order."""
    import torch

    torch.set_num_threads(1)
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    args = argparse.Namespace(**spec["args"])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(load_config(PRESET, cairn_overrides(args, tmp)), Path(tmp) / "run")
        policy, seeds_of, cur = trainer.policy, trainer._draw_seeds, {}

        def on_generate(dt: float, gens: Any, a: tuple) -> None:
            cur["gen_s"] += dt
            cur["gen_tokens"] += sum(len(g.token_ids) for g in gens)
            cur["prompts"] = list(dict.fromkeys(tuple(p) for p in a[0]))

        def on_seeds(dt: float, seeds: Any, a: tuple) -> None:
            cur["seeds"] = [int(s) for s in seeds]

        policy.generate = _timed(policy.generate, on_generate)
        trainer._draw_seeds = _timed(seeds_of, on_seeds)
        loaded_peak = vm_hwm_mb()
        reset_peak()
        steps, prompts = [], []
        for it in range(1, args.steps + 2):
            cur.update(gen_s=0.0, gen_tokens=0)
            trainer.iteration = it
            row = trainer.train_iteration()
            if len(cur["prompts"]) != len(cur["seeds"]):
                raise RuntimeError(f"{len(cur['prompts'])} distinct prompts, {cur['seeds']} seeds")
            prompts += [
                {"ids": list(p), "text": policy.tokenizer.decode(list(p)), "seed": s}
                for p, s in zip(cur["prompts"], cur["seeds"], strict=True)
            ]
            steps.append({
                "gen_s": cur["gen_s"], "step_s": row["time/iteration"],
                "gen_tokens": cur["gen_tokens"], "train_tokens": cur["gen_tokens"],
                "reward": row.get("rollout/return", float("nan")),
                "own_update_s": row["time/update"],
            })  # fmt: skip
        peaks = peaks_mb(loaded_peak)
    return {"row": summarize_steps(steps[1:], peaks), "prompts": prompts}


def peaks_mb(loaded_peak: float) -> dict[str, float]:
    """The peaks (MB): the steps' (``VmHWM`` since ``reset_peak``) and the process's (the
    larger of that and ``loaded_peak``, the peak before the reset)."""
    steps = vm_hwm_mb()
    return {"steps_peak_mb": steps, "peak_rss_mb": max(steps, loaded_peak)}


def countdown_reward(spec: dict[str, Any]) -> Callable[..., list[float]]:
    """cairn's countdown reward as a TRL reward function: the answer read by cairn's parser,
    stepped in a Countdown env reset with the prompt's ``seed`` column."""
    from cairn.agent.parse import parse_action
    from cairn.envs.countdown import Countdown

    env = Countdown(**spec["env_options"])
    agent = spec["agent"]

    def reward(completions: list[str], seed: list[int], **_: Any) -> list[float]:
        out = []
        for text, s in zip(completions, seed, strict=True):
            env.reset(seed=int(s))
            action = parse_action(text, agent["action_pattern"], agent["action_format"])
            _, r, _, _, info = env.step(action or "")
            valid = action is not None and bool(info.get("valid", True))
            out.append(float(r) - (0.0 if valid else agent["invalid_penalty"]))
        return out

    reward.__name__ = "cairn_countdown"
    return reward


def trl_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """One TRL process: GRPOTrainer on the cairn arm's prompts, 1 warm-up + N steps."""
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    args = argparse.Namespace(**spec["args"])
    cur: dict[str, Any] = {"steps": []}

    class Timed(GRPOTrainer):  # generation and trained tokens, counted where TRL makes them
        def _generate_single_turn(self, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*a, **kw)
            cur["gen_s"] += time.perf_counter() - t0
            cur["gen_tokens"] += sum(len(c) for c in out[0])
            return out

        def _generate_and_score_completions(self, *a: Any, **kw: Any) -> Any:
            out = super()._generate_and_score_completions(*a, **kw)
            cur["train_tokens"] += int(out["completion_mask"].sum())
            return out

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            cur.update(t0=time.perf_counter(), gen_s=0.0, gen_tokens=0, train_tokens=0)

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            keys = ("gen_s", "gen_tokens", "train_tokens", "reward")
            cur["steps"].append({
                "gen_s": cur["gen_s"], "step_s": time.perf_counter() - cur["t0"],
                **{k: cur[k] for k in keys if k != "gen_s"},
            })  # fmt: skip

    base_reward = countdown_reward(spec)

    def reward(completions: list[str], seed: list[int], **kw: Any) -> list[float]:
        out = base_reward(completions, seed, **kw)
        cur["reward"] = statistics.mean(out)
        return out

    reward.__name__ = base_reward.__name__
    folder = spec["model_dir"]
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    data = Dataset.from_list([{"prompt": p["text"], "seed": p["seed"]} for p in spec["prompts"]])
    peft = None
    if args.mode == "lora":
        from peft import LoraConfig

        lora = spec["lora"]
        peft = LoraConfig(
            r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
            target_modules=lora["target_modules"], task_type="CAUSAL_LM",
        )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Timed(
            model=model, reward_funcs=[reward], args=GRPOConfig(**trl_config(args, tmp)),
            train_dataset=data, processing_class=tok, peft_config=peft, callbacks=[Clock()],
        )  # fmt: skip
        loaded_peak = vm_hwm_mb()
        reset_peak()
        trainer.train()
        peaks = peaks_mb(loaded_peak)
    # What TRL's own tokenizer call (``processing_class(text=prompts)``) makes of the text.
    same = all(tok(text=p["text"])["input_ids"] == p["ids"] for p in spec["prompts"])
    return {"row": summarize_steps(cur["steps"][1:], peaks), "roundtrip": same}


# -- the driver -------------------------------------------------------------------------------
def child_env() -> dict[str, str]:
    """The environment of an arm: cairn's source first on the path, one thread."""
    env = dict(os.environ)
    path = [str(ROOT / "src"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        PYTHONPATH=os.pathsep.join(path), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
    )  # fmt: skip
    return env


class ArmFailed(RuntimeError):
    """An arm's process ended with an error (or was killed)."""


def run_arm(python: str, arm: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one arm in a fresh process of ``python``; its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        cmd = [python, str(Path(__file__).resolve()), "--arm", arm, "--spec", f.name]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ArmFailed(f"{arm} arm failed (exit {proc.returncode}):\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def trl_python(venv: Path) -> str:
    """TRL's venv's Python, made on first use (reused when it imports trl at the version)."""
    py = venv / "bin" / "python"
    probe = f"import trl, sys; sys.exit(trl.__version__ != {TRL_VERSION!r})"
    if py.exists() and subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0:
        return str(py)
    venv.parent.mkdir(parents=True, exist_ok=True)
    for cmd in install_commands(venv, local_versions()):
        print("$", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return str(py)


def base_spec(args: argparse.Namespace) -> dict[str, Any]:
    """What both arms share: settings, env options, agent settings, LoRA, model folder."""
    from cairn.policies.smol import alias_dir
    from cairn.train.config import load_config

    cfg = load_config(PRESET, cairn_overrides(args, "runs"))
    lora = cfg.model.lora
    return {
        "args": {k: v for k, v in vars(args).items() if k in ("steps", "new_tokens", "groups",
                                                              "group_size", "mode", "grad_ckpt")},
        "env_options": dict(cfg.env.options),
        "agent": {
            "action_pattern": cfg.agent.action_pattern,
            "action_format": cfg.agent.action_format,
            "invalid_penalty": cfg.agent.invalid_penalty,
        },
        "lora": None if lora is None else {
            "r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout,
            "target_modules": lora.target_modules,
        },
        "model_dir": str(alias_dir(MODEL)),
    }  # fmt: skip


def plan(args: argparse.Namespace) -> str:
    """The dry run: settings and the commands and overrides the run would use."""
    have = (args.venv / "bin" / "python").exists()
    lines = [
        f"cairn vs TRL {TRL_VERSION}: {PRESET}, {args.groups} prompts x {args.group_size} "
        f"completions, {args.new_tokens} new tokens, {args.mode}, gradient checkpointing "
        f"{args.grad_ckpt}, 1 thread",
        f"arms alternate {' -> '.join(ARMS)}, up to {args.repeats} pairs within "
        f"{args.budget_min:g} min, each process 1 warm-up + {args.steps} measured steps",
        f"TRL venv: {args.venv} ({'reused when it imports trl' if have else 'to be made'})",
    ]
    try:
        versions = local_versions()
    except ImportError as err:  # PackageNotFoundError: a plan still prints without them
        lines.append(f"  (versions not found: {err})")
    else:
        lines += ["  $ " + shlex.join(c) for c in install_commands(args.venv, versions)]
    lines.append("cairn overrides: " + " ".join(cairn_overrides(args, "<tmp>")))
    cfg = trl_config(args, "<tmp>")
    lines.append("GRPOConfig: " + ", ".join(f"{k}={v!r}" for k, v in cfg.items()))
    return "\n".join(lines) + "\n"


def loadavg_text() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def record(rows: list[dict], args: argparse.Namespace, meta: dict[str, Any]) -> str:
    """The markdown record of a run."""
    cmd = "python benchmarks/speed/trl_compare.py " + " ".join(meta["argv"])
    pairs = len(pair_ratios(rows))
    lengths = meta["prompt_tokens"]
    prompts = fmt_spread(lengths, digits=0) if lengths else "-"
    lines = [
        "# cairn vs TRL GRPOTrainer: the same GRPO step on SmolLM2-135M-Instruct",
        "",
        f"Measured {date.today()} by `{cmd.strip()}` on {platform.machine()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()}), TRL {TRL_VERSION} "
        f"in its own venv; load average (1, 5, 15 min) {meta['load_before']} before and "
        f"{meta['load_after']} after, over {meta['minutes']:.1f} min.",
        "",
        f"Work: {PRESET} prompts and reward, {args.groups} prompts x {args.group_size} "
        f"completions per step, at most {args.new_tokens} new tokens, {args.mode}, "
        f"gradient checkpointing {args.grad_ckpt} in both, no KL, one "
        f"update per step, float32, 1 thread in both arms. {pairs} alternating pairs of "
        f"processes, each 1 warm-up + {args.steps} measured steps (per-process medians). "
        f"TRL's tokenizer gives back cairn's prompt ids for every prompt: "
        f"{'yes' if meta['roundtrip'] else 'NO'}; prompt tokens {prompts}. How each "
        "number is measured: the script's docstring (benchmarks/speed/trl_compare.py).",
        "",
        f"This session started at repeat {meta.get('resumed', 0)} (``--resume`` keeps the "
        f"rows of earlier ones), waited {meta.get('waited_min', 0.0):.1f} min for "
        f"{args.need_mb:.0f} MB of free memory before arms, and lost "
        f"{len(meta.get('failed', []))} process(es) ({', '.join(meta.get('failed', [])) or '-'}).",
        "",
        table(rows),
        "Per process:",
        "",
        repeat_lines(rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.arm:
        spec = json.loads(args.spec.read_text())
        print(json.dumps((cairn_arm if args.arm == "cairn" else trl_arm)(spec)))
        return 0
    if args.dry_run:
        print(plan(args), end="")
        return 0
    return drive(args, list(sys.argv[1:] if argv is None else argv))


def mem_available_mb() -> float:
    """``MemAvailable`` of the machine (``/proc/meminfo``), MB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def wait_for_memory(need_mb: float, timeout_s: float, poll_s: float = 10.0) -> float:
    """Wait (at most ``timeout_s``) until ``need_mb`` MB are available, so that an arm is
    not killed by the kernel for other jobs' memory; the seconds waited."""
    t0 = time.monotonic()
    while mem_available_mb() < need_mb and time.monotonic() - t0 < timeout_s:
        time.sleep(poll_s)
    return time.monotonic() - t0


def drive(args: argparse.Namespace, argv: list[str]) -> int:
    """Alternate the arms within the budget, then write the record. Rows are saved after
    every process (``args.rows``); ``--resume`` continues from that file. A process that
    fails (e.g. killed for memory) loses its pair, which is counted and skipped."""
    trl_py = trl_python(args.venv)
    spec = base_spec(args)
    load_before, started = loadavg_text(), time.monotonic()
    rows = json.loads(args.rows.read_text()) if args.resume and args.rows.exists() else []
    first = 1 + max((r["repeat"] for r in rows), default=-1)
    trl_spec, roundtrip, last, failed, waited = None, True, 0.0, [], 0.0
    for rep in range(first, first + args.repeats):
        elapsed = time.monotonic() - started
        if rep > first and elapsed + last > args.budget_min * 60:
            break
        t0 = time.monotonic()
        for arm in ARMS:
            waited += wait_for_memory(args.need_mb, args.budget_min * 60 - elapsed)
            try:
                if arm == "cairn":
                    got = run_arm(sys.executable, arm, spec)
                    if trl_spec is None:
                        trl_spec = {**spec, "prompts": got["prompts"]}
                    elif got["prompts"] != trl_spec["prompts"]:
                        raise RuntimeError(f"repeat {rep}: cairn drew other prompts than before")
                else:
                    got = run_arm(trl_py, arm, trl_spec)
                    roundtrip &= bool(got["roundtrip"])
            except ArmFailed as err:
                print(f"repeat {rep}: {err}", flush=True)
                failed.append(f"{rep}/{arm}")
                break
            rows.append({"repeat": rep, "arm": arm, **got["row"]})
            print(json.dumps(rows[-1]), flush=True)
            args.rows.parent.mkdir(parents=True, exist_ok=True)
            args.rows.write_text(json.dumps(rows, indent=1))
        last = time.monotonic() - t0
    meta = {
        "argv": argv, "load_before": load_before, "load_after": loadavg_text(),
        "minutes": (time.monotonic() - started) / 60, "roundtrip": roundtrip,
        "prompt_tokens": [len(p["ids"]) for p in (trl_spec or {}).get("prompts", [])],
        "failed": failed, "waited_min": waited / 60, "resumed": first,
    }  # fmt: skip
    sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/_lib
    from _lib.records import write_record

    text = record(rows, args, meta)
    print(text)
    write_record(args.out / "trl_compare.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
