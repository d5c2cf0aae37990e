"""`cairn compare`: each config on N seeds, then curves with spread and episodes-to-target.

Runs land in ``OUT/<config name>/seed<k>/``; a run that already has a summary is reused
and one with a checkpoint is resumed, so an interrupted comparison continues where it
stopped. Results: ``compare.json``, ``compare.md`` (tables) and ``curves.png``.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from cairn.train.config import load_config

__all__ = ["compare", "summarise"]


def _run_one(path: str | None, overrides: list[str], run_dir: str) -> dict[str, Any]:
    from cairn.train.checkpoint import latest_checkpoint
    from cairn.train.trainer import Trainer

    done = Path(run_dir) / "summary.json"
    if done.exists():
        return json.loads(done.read_text())
    cfg = load_config(path, overrides)
    resume = Path(run_dir).exists() and latest_checkpoint(Path(run_dir)) is not None
    return Trainer(cfg, Path(run_dir), resume=resume).run()


def compare(
    configs: list[str],
    seeds: int,
    out: Path,
    overrides: list[str] | None = None,
    target: float | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Train every config on seeds 0..seeds-1 and summarise; returns the summary dict."""
    overrides = list(overrides or [])
    plan = []
    for path in configs:
        name = load_config(path, overrides).name  # fails early on a bad config
        for s in range(seeds):
            extra = [*overrides, f"seed={s}", "log.progress=false"]
            if jobs > 1:
                extra.append("train.threads=1")
            plan.append((name, s, path, extra, str(out / name / f"seed{s}")))
    if jobs > 1:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            futures = [pool.submit(_run_one, p, o, d) for _, _, p, o, d in plan]
            results = [f.result() for f in futures]
    else:
        results = [_run_one(p, o, d) for _, _, p, o, d in plan]
    runs: dict[str, list[dict[str, Any]]] = {}
    for (name, _, _, _, _), res in zip(plan, results, strict=True):
        runs.setdefault(name, []).append(res)
    summary = summarise(runs, target)
    write_report(summary, out)
    return summary


def summarise(runs: dict[str, list[dict[str, Any]]], target: float | None) -> dict[str, Any]:
    """Per config: eval curves over seeds, episodes to target, final success with a 95% CI."""
    out: dict[str, Any] = {"target": target, "configs": {}}
    for name, results in runs.items():
        tgt = target if target is not None else results[0]["target"]
        out["target"] = tgt
        to_target = [_episodes_to(r["evals"], tgt) for r in results]
        finals = np.array([r["eval_success"] for r in results], dtype=float)
        reached = [e for e in to_target if e is not None]
        half = 1.96 * finals.std(ddof=1) / math.sqrt(len(finals)) if len(finals) > 1 else None
        out["configs"][name] = {
            "seeds": len(results),
            "episodes_to_target": to_target,
            "episodes_to_target_mean": float(np.mean(reached)) if reached else None,
            "reached": f"{len(reached)}/{len(results)}",
            "final_success": finals.tolist(),
            "final_success_mean": float(finals.mean()),
            "final_success_ci95": half,
            "untrained_success": [r.get("untrained_success") for r in results],
            "train_seconds": [r["train_seconds"] for r in results],
            "curves": [[(e["episodes"], e["eval/success"]) for e in r["evals"]] for r in results],
        }
    return out


def _episodes_to(evals: list[dict[str, Any]], target: float) -> int | None:
    hit = next((e for e in evals if e["eval/success"] >= target), None)
    return hit["episodes"] if hit else None


def write_report(summary: dict[str, Any], out: Path) -> None:
    from cairn.report.plots import plot_compare

    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(summary, indent=2))
    tgt = summary["target"]
    lines = [
        f"| config | seeds | episodes to {tgt} (per seed) | mean | reached | "
        "final success (per seed) | mean ± 95% CI |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in summary["configs"].items():
        per = ", ".join("-" if e is None else str(e) for e in c["episodes_to_target"])
        mean = (
            "-" if c["episodes_to_target_mean"] is None else f"{c['episodes_to_target_mean']:.0f}"
        )
        fin = ", ".join(f"{x:.3f}" for x in c["final_success"])
        ci = "" if c["final_success_ci95"] is None else f" ± {c['final_success_ci95']:.3f}"
        lines.append(
            f"| {name} | {c['seeds']} | {per} | {mean} | {c['reached']} | {fin} | "
            f"{c['final_success_mean']:.3f}{ci} |"
        )
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    plot_compare(summary, out / "curves.png")
