"""`cairn compare`: each config on N seeds, then curves with spread and episodes-to-target.

Runs land in ``OUT/<label>/seed<k>/``, the label being the config's ``name`` (``name-2``,
``name-3`` for later configs of the same name, so each config keeps its own folder and
row). A folder holds one resolved config: a seed whose folder has the same config is
reused (its summary) or resumed (its checkpoint), so an interrupted comparison continues
where it stopped, and one with neither starts clean; a folder that holds a different
config is refused before any training, naming the keys that differ.
Results: ``compare.json`` and ``compare.md`` (tables); the CLI then draws ``curves.png``
(`cairn.report.plots.plot_compare_dir`).

A comparison owns its output folder: it holds ``OUT/compare.lock`` (an flock, with its pid)
from before it looks at any seed folder to the end, so a second ``cairn compare`` into the
same ``--out`` stops at once with one line (`CompareLocked`) and touches nothing. A clean
start deletes a seed folder only while holding that run's own ``run.lock`` (a lock the
kernel drops when its holder dies, so a held one means a live writer): a folder that
another process writes is never deleted, and its lock file is kept for the new run.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cairn._errors import ConfigError
from cairn._files import read_text
from cairn.data import rundir
from cairn.data.rundir import RunLock, RunLocked
from cairn.train.config import load_config

__all__ = [
    "COMPARE_LOCK",
    "T95",
    "CompareLocked",
    "ci95_half",
    "compare",
    "summarise",
    "write_config",
]

COMPARE_LOCK = "compare.lock"

#: Two-sided 95 % Student-t quantiles by degrees of freedom (seeds - 1); beyond 10 the
#: normal 1.96 (at most 12 % narrow at 11 dof, less with more seeds).
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
}


def ci95_half(values: Sequence[float] | np.ndarray) -> float | None:
    """Half-width of the 95 % Student-t interval of the mean over seeds (None for fewer
    than two values)."""
    a = np.asarray(values, dtype=float)
    if len(a) < 2:
        return None
    return float(T95.get(len(a) - 1, 1.96) * a.std(ddof=1) / np.sqrt(len(a)))


class CompareLocked(RunLocked):
    """Another process runs a comparison into this output folder."""


#: Keys that do not change what a run computes; the rest must match to reuse a folder.
_IGNORED = ("log.progress", "out_dir")


def write_config(source: str | Path, overrides: list[str], path: Path) -> Path:
    """``source`` (a file or preset) with ``overrides``, resolved and written to ``path``:
    one config file per arm of a comparison (what ``compare`` takes)."""
    cfg = load_config(source, overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    return path


@dataclass(frozen=True)
class _Seed:
    label: str
    seed: int
    path: str | None
    overrides: list[str]
    run_dir: str


def _run_one(path: str | None, overrides: list[str], run_dir: str) -> dict[str, Any]:
    from cairn.train.checkpoint.read import latest_checkpoint
    from cairn.train.trainer import Trainer

    run = Path(run_dir)
    done = run / rundir.SUMMARY
    if done.exists():
        return json.loads(read_text(done, rundir.LIMITS[rundir.SUMMARY], root=run))
    cfg = load_config(path, overrides)
    with _own(run):  # RunLocked while another process writes it: nothing is deleted
        resume = run.exists() and latest_checkpoint(run) is not None
        if run.exists() and not resume:  # killed before its first checkpoint: start clean
            _clear(run)
        return Trainer(cfg, run, resume=resume, checked=True).run()  # load_config checked cfg


@contextmanager
def _own(run: Path) -> Iterator[None]:
    """Hold ``run``'s run.lock (the Trainer takes it again, re-entrantly)."""
    run.mkdir(parents=True, exist_ok=True)
    with RunLock(run):
        yield


def _clear(run: Path) -> None:
    """Everything in ``run`` but its run.lock (held by this process: the new run keeps it)."""
    for entry in run.iterdir():
        if entry.name == rundir.LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@contextmanager
def _compare_lock(out: Path) -> Iterator[None]:
    """``out/compare.lock`` for the whole comparison (CompareLocked naming the holder)."""
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out, name=COMPARE_LOCK)
    try:
        lock.acquire()
    except RunLocked as err:
        raise CompareLocked(
            f"{out} is in use: process {err.holder} runs a cairn compare into it (it holds "
            f"{out / COMPARE_LOCK}); wait for it to end, or choose another --out"
        ) from None
    try:
        yield
    finally:
        lock.release()


def compare(
    configs: list[str],
    seeds: int,
    out: Path,
    overrides: list[str] | None = None,
    target: float | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Train every config on seeds 0..seeds-1 and summarise; returns the summary dict."""
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds}: a comparison needs at least 1 seed")
    with _compare_lock(Path(out)):
        return _compare(configs, seeds, Path(out), list(overrides or []), target, jobs)


def _compare(
    configs: list[str], seeds: int, out: Path, overrides: list[str], target: float | None, jobs: int
) -> dict[str, Any]:
    plan = _plan(configs, seeds, out, overrides, jobs)
    for s in plan:  # fails before any training
        _check_folder(s)
    if jobs > 1:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            futures = [pool.submit(_run_one, s.path, s.overrides, s.run_dir) for s in plan]
            results = [f.result() for f in futures]
    else:
        results = [_run_one(s.path, s.overrides, s.run_dir) for s in plan]
    runs: dict[str, list[dict[str, Any]]] = {}
    for s, res in zip(plan, results, strict=True):
        runs.setdefault(s.label, []).append(res)
    summary = summarise(runs, target)
    write_report(summary, out)
    return summary


def _plan(
    configs: list[str], seeds: int, out: Path, overrides: list[str], jobs: int
) -> list[_Seed]:
    plan, labels = [], set()
    for path in configs:
        name = load_config(path, overrides).name  # fails early on a bad config
        label, k = name, 1
        while label in labels:
            k += 1
            label = f"{name}-{k}"
        labels.add(label)
        for s in range(seeds):
            extra = [*overrides, f"seed={s}", "log.progress=false"]
            if jobs > 1:
                extra.append("train.threads=1")
            plan.append(_Seed(label, s, path, extra, str(out / label / f"seed{s}")))
    return plan


def _check_folder(s: _Seed) -> None:
    """Refuse a seed folder whose recorded config differs from this one's."""
    saved = Path(s.run_dir) / rundir.CONFIG
    if not saved.exists():
        return
    now = _flat(yaml.safe_load(yaml.safe_dump(load_config(s.path, s.overrides).model_dump())))
    before = _flat(rundir.read_config(Path(s.run_dir)))
    diff = sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))
    diff = [k for k in diff if k not in _IGNORED]
    if diff:
        shown = "; ".join(f"{k}: {before.get(k)!r} there, {now.get(k)!r} now" for k in diff[:3])
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        raise ConfigError(
            f"{s.run_dir} holds the results of a different config ({shown}{more}); "
            "choose another --out, or remove that folder to rerun it"
        )


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            flat |= _flat(v, f"{prefix}{k}.")
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def summarise(runs: dict[str, list[dict[str, Any]]], target: float | None) -> dict[str, Any]:
    """Per config: eval curves over seeds, episodes to target, final success with a 95%
    t-interval over seeds."""
    out: dict[str, Any] = {"target": target, "configs": {}}
    for name, results in runs.items():
        tgt = target if target is not None else results[0]["target"]
        out["target"] = tgt
        to_target = [_episodes_to(r["evals"], tgt) for r in results]
        finals = np.array([r["eval_success"] for r in results], dtype=float)
        reached = [e for e in to_target if e is not None]
        half = ci95_half(finals)  # Student-t: with 3 seeds, 4.30 standard errors, not 1.96
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
