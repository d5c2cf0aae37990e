"""Model forward tokens of TreePO tree sampling vs independent sampling, same leaves.

    python benchmarks/speed/tree_sampling.py --quick   # one JSON line (the default tree options)
    python benchmarks/speed/tree_sampling.py           # table of settings, writes
                                                       # benchmarks/results/speed/tree_sampling.md

Setup: the demo preset (``configs/sokoban_gigpo.yaml``: compact 6x6 sokoban, 1 box,
15 steps, restricted decoding, the tiny random-init model). For every setting, the same
task seeds are sampled twice from the same policy: by ``group`` (``leaves`` independent
episodes per task) and by ``tree`` (``leaves`` leaves per task). ``policy.forward_tokens``
counts every token pushed through the model (prefill of each distinct prompt of a
``generate`` call, plus decode steps); ``token_saving = 1 - tree / independent``.

Cross-call prefix cache: ``generate`` already prefills a prompt once per call however many
rows share it. A KV cache kept across calls could also skip the part of a prompt that an
earlier call prefilled. ``cacheable`` is the share of the forward tokens such a
cache (unbounded, exact-prefix) could skip at best: for each distinct prompt of a call, the
longest token prefix it shares with any prompt of an earlier call of the same collect.
``forward_share`` is the share of the sampling wall time spent inside the model's forward,
an upper bound on the time such a cache could save.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cairn.agent import PromptBuilder
from cairn.envs import make
from cairn.policies import build_policy
from cairn.rollout import EnvPool, RolloutContext, RolloutSettings, make_strategy
from cairn.train.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "sokoban_gigpo.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "speed" / "tree_sampling.md"
DEFAULT_TREE: dict[str, Any] = {}  # the strategy's own defaults

BIAS_NOTE = (
    "The leaves' success rate is below that of independent samples: the budget goes to "
    "paths still running, so a path that succeeds early keeps one leaf while live (mostly "
    "failing) paths split. Longer segments and a single root share more (bigger saving) "
    "but split later; segment_turns 1 or two roots give up most of the saving."
)

CACHE_NOTE = (
    "Cross-call prefix cache, decision: not built. `generate` already prefills each distinct "
    "prompt once per call. With history 0 most of what is left (`cacheable`, about 0.85) is "
    "whole prompts repeated across turns (the same state met again), i.e. memoising the "
    "policy per state, not sharing a KV prefix; with history 2 or 8 the cacheable share "
    "falls to 0.6 and 0.4 (the instruction plus overlapping history). Skipping it could "
    "save at most the forward share of the wall time (0.4 to 0.5 at history 0), but needs "
    "invalidation on every weight update and batching cached KV entries of different "
    "lengths into one left-padded cache inside HFPolicy.generate; on GPU the vLLM engine's "
    "automatic prefix caching does this already. Prefix sharing across branches is done "
    "without a cache: a branch copies its parent's steps and never regenerates them "
    "(`turns` above)."
)

#: (leaves per task, tree options, prompt history) rows of the full table.
SETTINGS: list[tuple[int, dict[str, Any], int]] = [
    (8, {}, 0),
    (8, {"segment_turns": 1}, 0),
    (8, {"segment_turns": 2}, 0),
    (8, {"segment_turns": 4}, 0),
    (8, {"roots": 2}, 0),
    (8, {"roots": 2, "segment_turns": 2}, 0),
    (8, {"width": 4, "segment_turns": 2}, 0),
    (8, {"repeat": "ignore"}, 0),
    (8, {"repeat": "truncate"}, 0),
    (16, {}, 0),
    (16, {"segment_turns": 2}, 0),
    (8, {}, 2),
    (8, {}, 8),
]


class PrefixMeter:
    """Wraps ``policy.generate`` to count the prompt tokens a cross-call cache could skip."""

    def __init__(self, policy):
        self.policy, self.trie, self.cacheable, self.rows = policy, {}, 0, 0
        self._generate = policy.generate
        policy.generate = self.generate

    def generate(self, prompts, **kwargs):
        self.rows += len(prompts)
        distinct = {tuple(p) for p in prompts}
        self.cacheable += sum(self._shared(p) for p in distinct)
        for p in distinct:
            node = self.trie
            for tok in p:
                node = node.setdefault(tok, {})
        return self._generate(prompts, **kwargs)

    def _shared(self, prompt: tuple[int, ...]) -> int:
        node, k = self.trie, 0
        for tok in prompt:
            if tok not in node:
                break
            node, k = node[tok], k + 1
        return min(k, len(prompt) - 1)  # the last prompt token is always recomputed

    def close(self) -> None:
        self.policy.generate = self._generate


class ForwardTimer:
    """Seconds spent inside the model's forward (hooks), to weigh what a cache could save."""

    def __init__(self, model):
        self.seconds, self._t0 = 0.0, 0.0
        self._hooks = [
            model.register_forward_pre_hook(self._start),
            model.register_forward_hook(self._stop),
        ]

    def _start(self, *_):
        self._t0 = time.perf_counter()

    def _stop(self, *_):
        self.seconds += time.perf_counter() - self._t0

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


def _context(history: int, seed: int = 0):
    cfg = load_config(PRESET, [f"agent.history={history}"])
    pool = EnvPool(lambda: make(cfg.env.name, **cfg.env.options))
    probe = pool.take(1)[0]
    probe.reset(seed=0)
    policy = build_policy(cfg.model, probe, probe.instruction, seed)
    settings = RolloutSettings(
        temperature=cfg.rollout.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens,
        restrict_to_admissible=cfg.rollout.restrict_to_admissible,
        invalid_penalty=cfg.agent.invalid_penalty,
    )
    return policy, pool, PromptBuilder(history=history), settings


def measure(
    leaves: int, options: dict[str, Any], history: int, groups: int, seed: int = 0
) -> dict[str, Any]:
    """Forward tokens of ``tree`` and ``group`` on the same ``groups`` task seeds."""
    policy, pool, prompt, settings = _context(history)
    seeds = np.random.default_rng(seed).integers(0, 10**9, size=groups)
    row: dict[str, Any] = {"leaves": leaves * groups}
    for name, strategy, opts in (("independent", "group", {}), ("tree", "tree", options)):
        gen = torch.Generator().manual_seed(seed)
        ctx = RolloutContext(policy, pool, prompt, settings, gen, 0)
        meter = PrefixMeter(policy)
        timer = ForwardTimer(policy.model)
        before, t0 = policy.forward_tokens, time.perf_counter()
        episodes = make_strategy(strategy, **opts).collect(ctx, seeds, leaves)
        seconds = time.perf_counter() - t0
        timer.close()
        row[f"seconds_{name}"] = round(seconds, 2)
        row[f"forward_share_{name}"] = round(timer.seconds / seconds, 3)
        row[f"forward_tokens_{name}"] = policy.forward_tokens - before
        row[f"turns_{name}"] = meter.rows  # actions sampled (copied prefix steps are not)
        row[f"steps_{name}"] = sum(len(e.steps) for e in episodes)  # training rows
        row[f"success_{name}"] = round(float(np.mean([e.success for e in episodes])), 3)
        assert len(episodes) == leaves * groups, (name, len(episodes))
        meter.close()
        row[f"cacheable_{name}"] = round(meter.cacheable / row[f"forward_tokens_{name}"], 3)
    ratio = row["forward_tokens_tree"] / row["forward_tokens_independent"]
    row["token_saving"] = round(1 - ratio, 3)
    pool.close()
    return row


def _table(rows: list[tuple[int, dict[str, Any], int, dict[str, Any]]], groups: int) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        "# Tree sampling (TreePO) vs independent sampling: model forward tokens",
        "",
        f"Measured {today} on {os.cpu_count()} CPU cores ({platform.machine()}, "
        f"{platform.system()}, Python {platform.python_version()}) with "
        f"`python benchmarks/speed/tree_sampling.py`: the demo preset's env and tiny random-init "
        f"model, {groups} task seeds per row, both methods on the same seeds and the same "
        "policy. Tree defaults: width 2, segment_turns 3, roots 1, repeat no_branch, fill "
        "branch. "
        "`saving` = 1 - tree/independent forward tokens; `turns` = actions sampled (the "
        "tree's copied prefix steps are not sampled again; both give about the same number "
        "of training rows); `cacheable` = share of the "
        "forward tokens an ideal cross-call prefix cache could still skip; `fwd time` = share "
        "of the sampling wall time inside the model's forward and `seconds` the sampling wall "
        "time (tree / independent; the machine was shared, so times are rough).",
        "",
        "| leaves/task | tree options | history | forward tokens tree | independent | saving "
        "| turns tree | independent | success tree | independent | cacheable tree | independent "
        "| fwd time | seconds |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for leaves, opts, history, r in rows:
        text = ", ".join(f"{k}={v}" for k, v in opts.items()) or "defaults"
        lines.append(
            f"| {leaves} | {text} | {history} | {r['forward_tokens_tree']:,} | "
            f"{r['forward_tokens_independent']:,} | {r['token_saving']:.3f} | "
            f"{r['turns_tree']:,} | {r['turns_independent']:,} | {r['success_tree']:.3f} | "
            f"{r['success_independent']:.3f} | {r['cacheable_tree']:.2f} | "
            f"{r['cacheable_independent']:.2f} | {r['forward_share_tree']:.2f} / "
            f"{r['forward_share_independent']:.2f} | {r['seconds_tree']:.1f} / "
            f"{r['seconds_independent']:.1f} |"
        )
    lines += ["", BIAS_NOTE, "", CACHE_NOTE]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one JSON line, default options")
    parser.add_argument("--groups", type=int, default=None, help="task seeds (32 quick, 64)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown table file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        row = measure(8, DEFAULT_TREE, 0, args.groups or 32)
        print(json.dumps(row))
        return 0
    groups = args.groups or 64
    rows = []
    for leaves, opts, history in SETTINGS:
        r = measure(leaves, opts, history, groups)
        print(json.dumps({"options": opts, "history": history, **r}), flush=True)
        rows.append((leaves, opts, history, r))
    write_record(args.out, _table(rows, groups))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
