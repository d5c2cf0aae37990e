"""The JSON a report embeds: overview, curves, evaluations and the sampled episodes.

Strings (observations, anchors, actions) go into one table ``strings`` and steps refer to
them by index, so the many repeats of a group (all its episodes start from one state)
are stored once. A step is ``{"t", "o" observation, "a" anchor, "x" action, "c"
completion (when it differs from the action), "r" env reward, "p" penalty (when not 0),
"sh" sum of shaped reward terms (when any), "ok"
0 (only when invalid), "lp" logprob, "A" advantage, "q" {advantage term: value}, "k"
{other numeric column: value}, "crit" 1, "tips" [string], "pk"/"pf"/"pl"/"pa" the prompt
the model saw (the first "pk" characters of the step before's prompt, its "pl" characters
from "pf", then string "pa"; the viewer rebuilds it), "e" {anything else}}``.
Advantage terms are the per-step columns named ``A_*`` (GiGPO ``A_E``/``A_S``, ProxMO,
ELPO ``A_b``/``A_t``); other numbers (``G``, ``w``, ``value``, ...) are shown as values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from cairn.report.credit import anchor_neighbours, build_tree, first_crit, step_groups
from cairn.report.rundata import Dump, RunData, Sampling, evenly_spaced

__all__ = ["CURVE_POINTS", "PANELS", "curves", "run_payload"]

CURVE_POINTS = 2000  # at most this many points per curve (evenly spaced rows beyond)
PANELS: list[tuple[str, list[str]]] = [
    ("success", ["rollout/success", "eval/success"]),
    ("return", ["rollout/return", "eval/return"]),
    ("invalid rate", ["rollout/invalid_rate", "eval/invalid_rate"]),
    ("task-blind share", ["rollout/task_blind", "eval/task_blind"]),
    ("curriculum level", ["curriculum/level", "curriculum/success"]),
    ("entropy", ["actor/entropy"]),
    ("KL and clip fraction", ["actor/kl", "actor/approx_kl", "actor/clipfrac"]),
    ("advantage", ["adv/mean", "adv/std", "adv/abs_max"]),
    ("episode length", ["rollout/length", "eval/length"]),
    ("seconds per phase", ["time/rollout", "time/advantage", "time/update"]),
]
_BASE = {"t", "observation", "anchor", "action", "completion", "reward", "penalty", "valid"}
_BASE |= {"logprob", "advantage", "after_error", "crit", "tips", "path", "prompt"}


class Strings:
    """A table of distinct strings; ``add`` returns a string's index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def add(self, text: object) -> int:
        text = "" if text is None else str(text)
        k = self.index.get(text)
        if k is None:
            k = self.index[text] = len(self.items)
            self.items.append(text)
        return k


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


# -- curves ------------------------------------------------------------------------------------
def _series(rows: list[dict], key: str) -> dict[str, object] | None:
    pts = [(_num(r.get("episodes", r.get("iteration"))), _num(r.get(key))) for r in rows]
    pts = [(x, y) for x, y in pts if x is not None and y is not None]
    if not pts:
        return None
    return {"name": key, "x": [p[0] for p in pts], "y": [p[1] for p in pts]}


def curves(metrics: list[dict[str, Any]], evals: list[dict[str, Any]]) -> dict[str, object]:
    """Panels of series ``{"name", "x" (episodes), "y"}``; eval series come from ``evals``."""
    note = ""
    if len(metrics) > CURVE_POINTS:
        note = f"training curves show {CURVE_POINTS} of {len(metrics)} iterations, evenly spaced"
        metrics = [metrics[i] for i in evenly_spaced(len(metrics), CURVE_POINTS)]
    panels, used = [], set()
    for title, keys in PANELS:
        series = [_series(evals if k.startswith("eval/") else metrics, k) for k in keys]
        series = [s for s in series if s is not None]
        used.update(keys)
        if series:
            panels.append({"title": title, "series": series})
    numeric = {k for r in metrics for k, v in r.items() if _num(v) is not None}
    other = sorted(numeric - used - {"iteration", "episodes"})
    extra = [s for s in (_series(metrics, k) for k in other) if s is not None]
    return {"panels": panels, "other": extra, "xlabel": "training episodes", "note": note}


# -- episodes ----------------------------------------------------------------------------------
def _step(s: dict[str, Any], strings: Strings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "t": s.get("t"),
        "o": strings.add(s.get("observation")),
        "a": strings.add(s.get("anchor", s.get("observation"))),
        "x": strings.add(s.get("action")),
        "r": _num(s.get("reward")),
        "lp": _num(s.get("logprob")),
        "A": _num(s.get("advantage")),
    }
    prompt = s.get("prompt")
    if isinstance(prompt, dict):  # the prompt the model saw, as new text since the step before
        out["pk"] = int(prompt.get("keep", 0))
        out["pa"] = strings.add(prompt.get("add", ""))
        if prompt.get("len"):
            out["pf"], out["pl"] = int(prompt.get("from", 0)), int(prompt["len"])
    comp = s.get("completion")
    if comp is not None and comp != s.get("action"):
        out["c"] = strings.add(comp)
    if _num(s.get("penalty")):
        out["p"] = _num(s.get("penalty"))
    if s.get("valid") is False:
        out["ok"] = 0
    if s.get("after_error", s.get("crit")):  # ELPO's flag, by either name (COLUMN_ALIASES)
        out["crit"] = 1
    tips = s.get("tips")
    if tips:
        out["tips"] = [strings.add(x) for x in (tips if isinstance(tips, list) else [tips])]
    terms: dict[str, float | None] = {}
    cols: dict[str, float | None] = {}
    extra: dict[str, Any] = {}
    for k, v in s.items():
        if k in _BASE:
            continue
        if _num(v) is not None:
            (terms if k.startswith("A_") else cols)[k] = _num(v)
        elif isinstance(v, dict) and v and all(_num(x) is not None for x in v.values()):
            cols.update({f"{k}/{name}": _num(x) for name, x in v.items()})  # e.g. shaped terms
        else:
            extra[k] = v
    shaped = s.get("shaped")
    if isinstance(shaped, dict) and shaped:
        out["sh"] = sum(_num(x) or 0.0 for x in shaped.values())
    for key, d in (("q", terms), ("k", cols), ("e", extra)):
        if d:
            out[key] = d
    return out


def _episode(e: dict[str, Any], strings: Strings) -> dict[str, Any]:
    steps: list[Any] = e["steps"] if isinstance(e.get("steps"), list) else []
    out = {
        "id": e.get("id"),
        "success": bool(e.get("success")),
        "return": _num(e.get("return")),
        "source": e.get("source", 0),
        "path": e.get("path") or [],
        "terminated": bool(e.get("terminated")),
        "truncated": bool(e.get("truncated")),
        "t_crit": first_crit(e),
        "steps": [_step(s, strings) for s in steps if isinstance(s, dict)],
    }
    if e.get("meta"):
        out["meta"] = e["meta"]
    tips = e.get("tips") or (e.get("meta") or {}).get("tips")
    if tips:
        out["tips"] = [strings.add(x) for x in (tips if isinstance(tips, list) else [tips])]
    return out


def _neighbours(
    episodes: list[dict[str, Any]], strings: Strings, proximity: Proximity
) -> tuple[dict[str, list], str]:
    counts = step_groups(episodes)
    anchors = list(counts)
    rows, method = anchor_neighbours(
        anchors, [counts[a] for a in anchors], tau=proximity.tau, tokens=proximity.tokens
    )
    sid = [strings.add(a) for a in anchors]
    table = {
        str(sid[a]): [[sid[b], round(w, 6), counts[anchors[b]]] for b, w in row]
        for a, row in enumerate(rows)
    }
    return table, method


def _group(
    gid: int, records: list[dict[str, Any]], strings: Strings, proximity: Proximity | None
) -> dict[str, Any]:
    counts = step_groups(records)
    out: dict[str, Any] = {
        "group": gid,
        "task": records[0].get("task"),
        "episodes": [_episode(e, strings) for e in records],
        "step_groups": len(counts),
        "singletons": sum(c == 1 for c in counts.values()),
        "success_rate": float(np.mean([bool(e.get("success")) for e in records])),
        "tree": build_tree(records),
    }
    if proximity is not None and counts:
        out["neighbours"], out["similarity"] = _neighbours(records, strings, proximity)
    return out


def _iteration(dump: Dump, strings: Strings, proximity: Proximity | None) -> dict[str, Any]:
    return {
        "iteration": dump.iteration,
        "groups_total": dump.n_groups,
        "episodes_total": dump.n_episodes,
        "groups": [_group(g, recs, strings, proximity) for g, recs in dump.groups],
    }


def _scale(iterations: list[dict[str, Any]]) -> float:
    """Colour scale: the 95th percentile of |A| and |A_*| over the shown steps (>= 1e-6)."""
    vals = [
        abs(v)
        for it in iterations
        for g in it["groups"]
        for e in g["episodes"]
        for s in e["steps"]
        for v in [s["A"], *s.get("q", {}).values()]
        if v is not None
    ]
    return max(float(np.percentile(vals, 95)), 1e-6) if vals else 1.0


# -- overview ----------------------------------------------------------------------------------
def _fmt(v: object) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def _to_target(summary: Mapping[str, object]) -> object:
    hit = summary.get("episodes_to_target")
    return "not reached" if hit is None and summary.get("target") is not None else hit


def _overview(data: RunData) -> list[list[str]]:
    cfg, s = data.config, data.summary
    last = data.metrics[-1] if data.metrics else {}
    rows = [
        ("env", (cfg.get("env") or {}).get("name")),
        ("advantage estimator", (cfg.get("advantage") or {}).get("name")),
        ("rollout strategy", (cfg.get("rollout") or {}).get("strategy")),
        ("iterations", s.get("iterations", last.get("iteration"))),
        ("episodes", s.get("episodes", last.get("episodes"))),
        ("untrained greedy success", s.get("untrained_success")),
        ("final greedy success", s.get("eval_success")),
        ("best greedy success", s.get("best_eval_success")),
        (f"episodes to success {s.get('target', '')}".strip(), _to_target(s)),
        ("train seconds", s.get("train_seconds", last.get("time/train_seconds"))),
        ("wall seconds", s.get("wall_seconds")),
    ]
    if not s:
        rows.append(("status", "no summary.json yet (running or stopped early)"))
    return [[k, _fmt(v)] for k, v in rows if v is not None or k.startswith("final")]


class Proximity(NamedTuple):
    """ProxMO's PSA settings of the run (softmax temperature, TF-IDF tokens)."""

    tau: float
    tokens: str


def _proximity(config: dict[str, Any]) -> Proximity | None:
    adv = config.get("advantage") or {}
    if adv.get("name") != "proxmo":
        return None
    options = adv.get("options") or {}
    tau = _num(options.get("tau"))
    tokens = options.get("tokens") if options.get("tokens") in ("words", "cells") else "words"
    return Proximity(tau if tau and tau > 0 else 0.1, str(tokens))


def run_payload(data: RunData, sampling: Sampling) -> dict[str, object]:
    """The report's data for one run (JSON-ready)."""
    strings = Strings()
    proximity = _proximity(data.config)
    iterations = [_iteration(d, strings, proximity) for d in data.dumps]
    shown = [d.iteration for d in data.dumps]
    return {
        "kind": "run",
        "title": str(data.config.get("name") or data.run_dir.name),
        "run_dir": str(data.run_dir),
        "generated": datetime.now().isoformat(timespec="seconds"),
        "overview": _overview(data),
        "config_text": data.config_text,
        "curves": curves(data.metrics, data.evals),
        "evals": _eval_table(data.evals),
        "sampling": {
            "rule": sampling.describe(),
            "dumped": len(data.dumped),
            "shown": shown,
            "skipped": data.skipped,
        },
        "tau": proximity.tau if proximity else None,
        "scale": _scale(iterations),
        "terms": _names(iterations, "q"),
        "columns": _names(iterations, "k"),
        "strings": strings.items,
        "iterations": iterations,
    }


def _names(iterations: list[dict[str, Any]], key: str) -> list[str]:
    seen: dict[str, None] = {}
    for it in iterations:
        for g in it["groups"]:
            for e in g["episodes"]:
                for s in e["steps"]:
                    seen.update(dict.fromkeys(s.get(key, {})))
    return list(seen)


def _eval_table(evals: Sequence[Mapping[str, object]]) -> dict[str, object]:
    cols = ["iteration", "episodes"]
    for e in evals:
        cols += [k for k in e if k.startswith("eval/") and k not in cols]
    return {"columns": cols, "rows": [[_num(e.get(c)) for c in cols] for e in evals]}
