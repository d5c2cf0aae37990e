"""Speed of every registered env: steps per second, reset time, snapshot + restore time.

    python benchmarks/speed/env_speed.py              # 5 s of stepping per env, writes
                                                      # benchmarks/results/speed/env_speed.md
    python benchmarks/speed/env_speed.py --quick      # 0.5 s per env, prints only
    python benchmarks/speed/env_speed.py --envs countdown,search_qa --seconds 2

Every name in ``cairn.envs.available()`` is built with its options from ``OPTIONS`` (empty
by default); an env whose extra is missing or that fails to start is skipped with the
reason printed. Episodes reset with seeds 0, 1, 2, ... and end on termination or
truncation. Actions are drawn uniformly from ``info["admissible"]`` where the env gives it,
else from the env's entry in ``ACTIONS`` (random, mostly well-formed actions), else a word
of ``env.vocabulary()``. Only the time inside ``reset`` / ``step`` / ``snapshot`` +
``restore`` is counted (``time.perf_counter``), not the time to choose actions.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.envs import TextEnv, available, make

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "speed" / "env_speed.md"

#: Constructor options per env (anything not listed uses the env's defaults).
OPTIONS: dict[str, dict[str, Any]] = {
    "scienceworld": {},  # the fast path; admissible=True lists actions (~0.2 s a step)
    "textworld": {"num_games": 2},  # a small pool of generated games, cached on disk
}

ActionPicker = Callable[[TextEnv, str, dict[str, Any], random.Random], str]


def _countdown_action(env: TextEnv, obs: str, info: dict[str, Any], rng: random.Random) -> str:
    """A random expression over a random subset of the given numbers (always well-formed)."""
    numbers = rng.sample(list(info["numbers"]), rng.randint(1, len(info["numbers"])))
    text = str(numbers[0])
    for n in numbers[1:]:
        text = f"( {text} {rng.choice('+-*/')} {n} )"
    return text


_INTEGRATION_GUESSES = ("x", "x**2/2", "sin(x)", "-cos(x)", "exp(x)", "log(x)", "x*exp(x)")


def _integration_action(env: TextEnv, obs: str, info: dict[str, Any], rng: random.Random) -> str:
    """A random antiderivative-shaped guess, sometimes with a random coefficient."""
    return f"{rng.randint(-3, 3)}*{rng.choice(_INTEGRATION_GUESSES)} + {rng.randint(0, 9)}*x**2"


def _search_qa_action(env: TextEnv, obs: str, info: dict[str, Any], rng: random.Random) -> str:
    """Mostly searches for two words of the question or the last results; sometimes answers."""
    words = [w for w in f"{info['question']} {obs}".split() if w.isalpha()]
    if rng.random() < 0.2:
        return f"answer[{rng.choice(words)}]"
    return f"search[{' '.join(rng.sample(words, min(2, len(words))))}]"


#: Action pickers for envs that give no admissible list.
ACTIONS: dict[str, ActionPicker] = {
    "countdown": _countdown_action,
    "integration": _integration_action,
    "search_qa": _search_qa_action,
}


def pick_action(name: str, env: TextEnv, obs: str, info: dict[str, Any], rng: random.Random):
    if info.get("admissible"):
        return rng.choice(info["admissible"])
    if name in ACTIONS:
        return ACTIONS[name](env, obs, info, rng)
    vocabulary = env.vocabulary()
    return rng.choice(vocabulary) if vocabulary else "look"


@dataclass
class Speed:
    steps: int
    episodes: int
    step_seconds: float
    reset_seconds: float
    branch_seconds: float
    branches: int

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.step_seconds if self.step_seconds else float("nan")

    @property
    def reset_ms(self) -> float:
        return 1000 * self.reset_seconds / max(self.episodes, 1)

    @property
    def branch_ms(self) -> float:
        return 1000 * self.branch_seconds / self.branches if self.branches else float("nan")


def measure(name: str, env: TextEnv, seconds: float, seed: int = 0) -> Speed:
    """Step ``env`` with random actions for about ``seconds`` of wall time."""
    rng = random.Random(seed)
    speed = Speed(0, 0, 0.0, 0.0, 0.0, 0)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        obs, info = env.reset(seed=speed.episodes)
        speed.reset_seconds += time.perf_counter() - t0
        speed.episodes += 1
        done = False
        while not done and time.perf_counter() < deadline:
            if rng.random() < 0.1:  # branch timing on a sample of live states
                _time_branch(env, speed)
            action = pick_action(name, env, obs, info, rng)
            t0 = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            speed.step_seconds += time.perf_counter() - t0
            speed.steps += 1
            done = terminated or truncated
    return speed


def _time_branch(env: TextEnv, speed: Speed) -> None:
    t0 = time.perf_counter()
    env.restore(env.snapshot())
    speed.branch_seconds += time.perf_counter() - t0
    speed.branches += 1


def run(names: list[str], seconds: float) -> list[tuple[str, Speed | str]]:
    rows: list[tuple[str, Speed | str]] = []
    for name in names:
        try:
            with make(name, **OPTIONS.get(name, {})) as env:
                speed = measure(name, env, seconds)
        except Exception as err:  # missing extras, external engines that cannot start
            reason = f"skipped: {type(err).__name__}: {_first_line(err)}"
            print(f"{name:14s} {reason}", flush=True)
            rows.append((name, reason))
            continue
        print(
            f"{name:14s} {speed.steps_per_second:10.0f} steps/s   reset {speed.reset_ms:8.3f} ms"
            f"   snapshot+restore {speed.branch_ms:8.3f} ms"
            f"   ({speed.steps} steps, {speed.episodes} episodes)",
            flush=True,
        )
        rows.append((name, speed))
    return rows


def _first_line(err: Exception) -> str:
    try:
        text = str(err)
    except Exception:  # some bridged exceptions cannot print themselves
        text = ""
    return (text.splitlines() or ["(no message)"])[0][:120]


def to_markdown(rows: list[tuple[str, Speed | str]], seconds: float) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        "# Env speed",
        "",
        f"Measured {today} on {os.cpu_count()} CPU cores ({platform.machine()}, "
        f"{platform.system()}, Python {platform.python_version()}), single process, "
        f"{seconds:g} s of random stepping per env (`python benchmarks/speed/env_speed.py`). "
        "Actions: random admissible actions where the env lists them, else random mostly "
        "well-formed actions (see `ACTIONS` in the script). Times count only the env calls.",
        "",
        "| env | options | steps/s | reset (ms) | snapshot+restore (ms) | steps | episodes |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, result in rows:
        options = ", ".join(f"{k}={v!r}" for k, v in OPTIONS.get(name, {}).items()) or "defaults"
        if isinstance(result, str):
            lines.append(f"| {name} | {options} | {result} | | | | |")
        else:
            lines.append(
                f"| {name} | {options} | {result.steps_per_second:,.0f} | {result.reset_ms:.3f} "
                f"| {result.branch_ms:.3f} | {result.steps} | {result.episodes} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s per env, print only")
    parser.add_argument("--seconds", type=float, default=None, help="stepping time per env")
    parser.add_argument("--envs", default="", help="comma-separated names (default: all)")
    parser.add_argument("--out", type=Path, default=None, help=f"markdown file ({RESULTS})")
    args = parser.parse_args(argv)
    names = [n for n in args.envs.split(",") if n] or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        parser.error(f"unknown env(s) {unknown}; available: {', '.join(available())}")
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 5.0)
    rows = run(names, seconds)
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_record(out, to_markdown(rows, seconds))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
