"""Peak memory and time of one training minibatch's log-probs (forward + backward) on a
SmolLM2-135M-sized model, scoring through the whole model's logits (the path before) vs
the response-only, chunked head (``HFPolicy.score``).

    python benchmarks/speed/score_memory.py [--rows 16 --prompt 300 --response 48] [--quick]

Each arm runs in its own process (peak RSS = ``resource.getrusage`` maxrss of that
process, so arms do not share allocator state); the model is a LlamaConfig of SmolLM2-135M's
shape (hidden 576, 30 layers, 9 heads, 3 kv heads, MLP 1536, vocabulary 49152, tied
embeddings) with random weights, fp32, sdpa attention, on CPU with ``--threads`` torch
threads. The minibatch is like a multi-turn sokoban one of the real-model preset: ``rows``
rows of distinct prompts of about ``prompt`` tokens and responses of up to ``response``
tokens. Reported: peak RSS of the process, its growth over the RSS after building the model
and batch, and the seconds of one forward + backward (after one warm-up pass with --repeats
> 1). Writes benchmarks/results/speed/score_memory.md (--quick: a few seconds, no file).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from datetime import date
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.arms import arm_result
from _lib.records import write_record

ARMS = {
    "whole-model logits (before)": {"whole": True, "ckpt": False},
    "response-only chunked head": {"whole": False, "ckpt": False},
    "chunked + gradient checkpointing": {"whole": False, "ckpt": True},
}


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def arm(spec: dict) -> dict:
    """One arm in this process: build, score, backward; the numbers as a dict."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from cairn.data.tokens import collate_scoring
    from cairn.policies import HFPolicy

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    small = spec["quick"]
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64 if small else 576,
        num_hidden_layers=2 if small else 30,
        num_attention_heads=4 if small else 9,
        num_key_value_heads=2 if small else 3,
        intermediate_size=128 if small else 1536,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    model = AutoModelForCausalLM.from_config(config)
    if spec["ckpt"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    policy = HFPolicy(model, SimpleNamespace(eos_token_id=2, pad_token_id=0))
    g = torch.Generator().manual_seed(1)
    rows, p_len, a_len = spec["rows"], spec["prompt"], spec["response"]
    prompts = [
        torch.randint(3, 49152, (p_len - 20 + (i * 7) % 40,), generator=g).tolist()
        for i in range(rows)
    ]
    actions = [
        torch.randint(3, 49152, (max(1, a_len - (i * 5) % 24),), generator=g).tolist()
        for i in range(rows)
    ]
    batch = collate_scoring(prompts, actions, pad_id=0)
    score = policy._score_logits if spec["whole"] else policy.score
    base = _current_rss_mib()
    seconds = []
    for _ in range(spec["repeats"]):
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        logp, ent = score(batch, 1.0, True)
        m = batch.action_mask
        loss = -(logp * m).sum() / m.sum() - 0.001 * (ent * m).sum() / m.sum()
        loss.backward()
        seconds.append(time.perf_counter() - t)
    return {
        "peak_rss_mib": _rss_mib(),
        "base_rss_mib": base,
        "seconds": min(seconds[1:] or seconds),
        "tokens": int(batch.attention_mask.sum()),
        "response_tokens": int(batch.action_mask.sum()),
        "loss": float(loss),
    }


def run_arms(args: argparse.Namespace) -> list[dict]:
    out = []
    for name, flags in ARMS.items():
        spec = {**flags, **{k: getattr(args, k) for k in ("rows", "prompt", "response")}}
        spec.update(threads=args.threads, repeats=args.repeats, quick=args.quick)
        row = {"arm": name, **arm_result(__file__, json.dumps(spec), f"the {name} arm")}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def table(rows: list[dict], args: argparse.Namespace) -> str:
    before = rows[0]
    lines = [
        "# Training log-probs: peak memory and time, whole-model logits vs response-only head",
        "",
        f"Measured {date.today()} on {platform.machine()} ({platform.python_version()}), "
        f"{args.threads} torch thread(s), 2 CPU cores shared with other jobs, by "
        "`python benchmarks/speed/score_memory.py`: a SmolLM2-135M-shaped Llama (576 wide, 30 "
        "layers, 9/3 heads, MLP 1536, vocabulary 49152, tied) with random weights, fp32, sdpa; "
        f"one minibatch of {args.rows} rows, prompts of {args.prompt - 20}-{args.prompt + 19} "
        f"tokens, responses of {args.response - 23}-{args.response} tokens "
        f"({before['tokens']} context tokens, {before['response_tokens']} response tokens); "
        "log-probs and entropy, then a backward pass through the whole model (full fine-tune). "
        "Each arm in its own process; growth = peak RSS minus RSS after building model and "
        f"batch; seconds: the best of {args.repeats} forward + backward passes.",
        "",
        "| arm | peak RSS (MiB) | growth (MiB) | growth vs before | seconds | loss |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        growth = r["peak_rss_mib"] - r["base_rss_mib"]
        ratio = growth / (before["peak_rss_mib"] - before["base_rss_mib"])
        lines.append(
            f"| {r['arm']} | {r['peak_rss_mib']:,.0f} | {growth:,.0f} | {ratio:.2f}x | "
            f"{r['seconds']:.1f} | {r['loss']:.6f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--response", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a 2-layer model, tiny batch, no file")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/score_memory.md"))
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(json.loads(args.arm))))
        return
    if args.quick:
        args.rows, args.prompt, args.response = 2, 30, 24
    rows = run_arms(args)
    text = table(rows, args)
    print(text)
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_record(args.out, text)


if __name__ == "__main__":
    main()
