"""Fault injection: what a cairn run survives, and that nothing is lost.

    nice -n 19 python benchmarks/faults/faults.py  # every part, writes results/faults/faults.md
    python benchmarks/faults/faults.py --only actions,cli --quick  # a smaller pass, prints only

Seven parts, each a section of the record:

- ``kill``: a tiny run of each of three presets (EMPO2 memory, a PPO critic, plain GiGPO)
  is SIGKILLed at seeded random moments: a phase of the uninterrupted run (setup and the
  first iteration, each later iteration, the final eval and exit, timed by when its metrics
  rows appeared), then a moment uniform over that phase. A kill that lands after the run
  has exited (it ran faster than the reference) is not counted and is drawn again, until
  ``--kills`` have been delivered (at most 3 draws per kill; a shortfall counts as lost).
  A killed run with a complete checkpoint continues with ``cairn train --resume``; one
  killed before its first checkpoint must be refused by ``--resume`` in one line and is
  started again. Its metrics.jsonl (every key but ``time/*``) and summary.json must equal
  the uninterrupted run's. Runs are forked from this process after ``cairn`` is imported
  (each a real process, killed with SIGKILL), so a run costs seconds instead of the import.
- ``env``: a wrapper env (``FlakyEnv``, registered by import path) fails on a steady share
  of training episodes: raises, hangs past ``rollout.env_timeout_s``, SIGKILLs its worker
  process, and on ScienceWorld (when installed) SIGKILLs the JVM. The run must finish every
  iteration, with the injected faults counted in ``rollout/env_*`` metrics.
- ``actions``: random strings, long strings, unicode, nested parentheses and JSON
  fragments as actions of every built-in env: no exception may escape ``step``, and every
  action that is not one of the env's admissible actions must answer ``valid=False``.
- ``cli``: fuzzed ``--set`` keys and values, malformed YAML files and bad paths through
  ``cairn.cli.main`` in-process (plus a few as real subprocesses): each rejected input
  must end in one line, a non-zero exit, no traceback and no new run folder.
- ``checkpoint``: files planted into a run killed after its second checkpoint (a state.json
  with ``iteration: -5``, numpy scalars of a string dtype, same-size garbage, ``latest``
  pointing into another run, a symlinked checkpoint, a stale corrupt one with
  ``checkpoint.keep=1``, a torn metrics row, a pickle); ``cairn train --resume`` must
  finish the run with every metrics row.
- ``parsers``: hostile completions (deep nesting, huge numbers, NaN, duplicate keys,
  control characters, long strings) through ``parse_action`` in every action format: no
  exception may escape.
- ``hostile``: attacks as real ``cairn`` processes: a second compare into a live
  ``--out``, a model folder with an ``auto_map`` and ``y`` on stdin, ``kill -9`` of a
  trainer with process workers (workers left?), a gzip bomb under ``inspect`` (peak RSS),
  FIFOs as run files under inspect / resume / eval, a config.yaml linked to /etc/passwd, a
  SafetensorError in a checkpoint write, unbounded env sizes, ``optim.lr=1e30``, evals
  racing ``checkpoint.keep=1``, SIGHUP, and 200 concurrent ``--serve`` requests; then a run
  folder received from someone else whose config names code (``imports``, a dataset reward
  function) under eval / export / inspect / resume (exit status, marker file, seconds),
  TextWorld and TextWorld-Express sizes past their bounds, and two identical runs (their
  checkpoints' safetensors compared byte for byte).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cairn.envs import TextEnv, available, make, register

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "faults" / "faults.md"
HEADER = (
    "# Faults: what a run survives\n\n"
    "Written by `benchmarks/faults/faults.py`. Each section: what was injected, how "
    "many times, what survived and what was lost (must be nothing).\n"
)

# -- tiny runs -------------------------------------------------------------------------------
TINY = [
    "rollout.groups=2",
    "rollout.group_size=3",
    "optim.minibatch_size=64",
    "optim.epochs=1",
    "eval.every=0",
    "eval.at_start=false",
    "eval.episodes=4",
    "train.time_budget_s=null",
    "train.max_episodes=null",
    "train.iterations=3",
    "train.threads=1",
    "checkpoint.every=1",
    "log.progress=false",
    "log.trajectories_every=1",
]
#: One preset with EMPO2 memory (every iteration uses the tips, so a stale memory shows),
#: one with a critic, one plain.
KILL_PRESETS: dict[str, list[str]] = {
    "frozenlake_empo2": ["exploration.memory.probs={off_policy: 1.0}"],
    "sokoban_ppo": [],
    "sokoban_gigpo": [],
}


def _cli_child(argv: list[str], log: str) -> None:
    """Body of a forked run: cairn.cli.main(argv), output to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from cairn.cli import main

    os._exit(main(argv))


def _fork_cli(argv: list[str], log: Path) -> multiprocessing.Process:
    proc = multiprocessing.get_context("fork").Process(target=_cli_child, args=(argv, str(log)))
    proc.start()
    return proc


def _run_cli(argv: list[str], log: Path) -> int:
    proc = _fork_cli(argv, log)
    proc.join()
    return int(proc.exitcode or 0)


def _train_argv(preset: str, out: Path) -> list[str]:
    sets = [*TINY, *KILL_PRESETS[preset], f"out_dir={out}"]
    return ["train", preset, *[a for s in sets for a in ("--set", s)]]


def _run_folder(out: Path) -> Path | None:
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return runs[0] if runs else None


def _metrics(run: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _timeless(data: Any) -> Any:
    """``data`` without clock times and the run's own path."""
    if isinstance(data, dict):
        drop = ("seconds", "time/", "run_dir")
        return {k: _timeless(v) for k, v in data.items() if not any(d in k for d in drop)}
    if isinstance(data, list):
        return [_timeless(v) for v in data]
    return data


def _summary(run: Path) -> dict[str, Any]:
    return _timeless(json.loads((run / "summary.json").read_text()))


def _state_at_kill(run: Path | None) -> str:
    """Where the kill landed, from what the folder held right after it."""
    if run is None:
        return "before the run folder"
    lines = (run / "metrics.jsonl").read_bytes() if (run / "metrics.jsonl").exists() else b""
    done = lines.count(b"\n")
    half = " + half a metrics line" if lines and not lines.endswith(b"\n") else ""
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("iter_*")) if run.exists() else []
    if (run / "summary.json").exists():
        return "after the summary"
    ck = ckpts[-1] if ckpts else "no checkpoint"
    return f"{done} metrics rows{half}, {ck}"


def _rows(run: Path | None) -> int:
    path = run / "metrics.jsonl" if run else None
    return path.read_bytes().count(b"\n") if path and path.exists() else 0


def _reference(preset: str, work: Path) -> tuple[Path, list[float]]:
    """The uninterrupted run, and the seconds from its folder's creation to each metrics
    row and to its exit: the phases a kill is drawn from."""
    out = work / f"{preset}-full"
    proc = _fork_cli(_train_argv(preset, out), work / f"{preset}-full.log")
    while proc.is_alive() and _run_folder(out) is None:
        time.sleep(0.005)
    start, marks = time.perf_counter(), []
    while proc.is_alive():
        if _rows(_run_folder(out)) > len(marks):
            marks.append(time.perf_counter() - start)
        time.sleep(0.005)
    if proc.exitcode != 0:
        raise RuntimeError(f"{preset}: reference run failed, see {work}/{preset}-full.log")
    return _run_folder(out), [*marks, time.perf_counter() - start]  # type: ignore[return-value]


def _kill_once(preset: str, work: Path, k: int, rows: int, delay: float) -> dict[str, Any]:
    """Start a run, wait for its folder and ``rows`` metrics rows, then ``delay`` s, SIGKILL."""
    out, log = work / f"{preset}-kill{k}", work / f"{preset}-kill{k}.log"
    proc = _fork_cli(_train_argv(preset, out), log)
    while proc.is_alive() and (_run_folder(out) is None or _rows(_run_folder(out)) < rows):
        time.sleep(0.005)
    time.sleep(delay)
    killed = proc.is_alive()
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    run = _run_folder(out)
    at = _state_at_kill(run) if killed else "finished before the kill"
    how = "--resume"
    if run is None:
        how = "started again (no folder)"
        rc = _run_cli(_train_argv(preset, out), log)
    else:
        rc = _run_cli(["train", "--resume", str(run)], log)
        if rc != 0:
            refusal = log.read_text().strip().splitlines()[-1]
            if "no checkpoint there" not in refusal:
                return {"at": at, "how": how, "equal": False, "note": refusal}
            how = "--resume refused in one line; started again"
            shutil.rmtree(run)
            rc = _run_cli(_train_argv(preset, out), log)
            run = _run_folder(out)
    return {"at": at, "how": how, "rc": rc, "run": run, "killed": killed}


def part_kill(kills: int, seed: int, work: Path, only: str) -> tuple[list[list[str]], str]:
    """``kills`` spread over the presets (``only``: one of them, with its share)."""
    presets = list(KILL_PRESETS)
    rows, details = [], []
    for i, preset in enumerate(presets):
        if only and preset != only:
            continue
        rng = random.Random(f"{seed}-{preset}")
        full, marks = _reference(preset, work)  # rows at marks[:-1], exit at marks[-1]
        want_m, want_s = _metrics(full), _summary(full)
        n = kills // len(presets) + (i < kills % len(presets))
        equal = delivered = drawn = 0
        while delivered < n and drawn < 3 * n:  # a kill that lands after the exit is redrawn
            drawn += 1  # a phase (setup + iteration 1, iteration r + 1, final eval)
            row = rng.randrange(len(marks))  # then a moment uniform over that phase
            delay = rng.uniform(0, marks[row] - (marks[row - 1] if row else 0))
            got = _kill_once(preset, work, drawn, row, delay)
            ok = (
                got.get("rc") == 0
                and _metrics(got["run"]) == want_m
                and _summary(got["run"]) == want_s
            )
            killed = got.get("killed", True)
            equal += ok and killed
            delivered += killed
            verdict = "equal" if ok else "DIFFERENT " + got.get("note", "")
            details.append(
                f"| {preset} | row {row} + {delay:.2f} s | {got['at']} | {got['how']} | "
                f"{verdict if killed else 'not counted, redrawn'} |"
            )
        span = f"{len(want_m)} it, {marks[-1]:.1f} s from folder to exit, {drawn} drawn"
        rows.append([f"SIGKILL, {preset} ({span})", delivered, equal, n - equal])
    body = (
        "| preset | kill at (after metrics row r appeared) | state at the kill | continued by | "
        "metrics + summary vs uninterrupted |\n|---|---|---|---|---|\n" + "\n".join(details)
    )
    return rows, body


# -- env faults ------------------------------------------------------------------------------
class FlakyEnv(TextEnv):
    """An env (``inner`` with ``options``) that fails on every ``every``-th training reset of
    its process, cycling through ``modes``: ``raise`` (RuntimeError at the first step),
    ``hang`` (sleeps ``hang_s`` at the first step), ``kill`` (SIGKILLs its own worker
    process), ``jvm`` (SIGKILLs the ScienceWorld JVM behind it, then steps). Held-out eval
    seeds (``>= eval_from``) never fail. Each injection appends a line to ``log``."""

    resets, pid = 0, 0

    def __init__(
        self,
        inner: str = "sokoban",
        options: dict[str, Any] | None = None,
        modes: tuple[str, ...] | list[str] = ("raise", "hang"),
        every: int = 7,
        hang_s: float = 3.0,
        eval_from: int = 1_000_000_000,
        log: str = "",
        gap_s: float = 0.0,
    ):
        super().__init__()
        self.inner = make(inner, **(options or {}))
        self.modes, self.every, self.hang_s = list(modes), every, hang_s
        self.eval_from, self.log, self.fail, self.gap_s = eval_from, log, "", gap_s

    @property
    def instruction(self) -> str:  # type: ignore[override]
        return self.inner.instruction

    def vocabulary(self) -> list[str]:
        return self.inner.vocabulary()

    def close(self) -> None:
        self.inner.close()

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.fail = ""
        if seed is None or seed < self.eval_from:
            if FlakyEnv.pid != os.getpid():  # a new worker: its own phase, so the workers
                FlakyEnv.pid, FlakyEnv.resets = os.getpid(), os.getpid() % self.every  # stagger
            FlakyEnv.resets += 1
            n = FlakyEnv.resets
            if n % self.every == 0:
                self.fail = self.modes[(n // self.every + os.getpid()) % len(self.modes)]
        return self.inner.reset(seed=seed)

    def _claim_fault(self) -> bool:
        """Whether this env may fail now: no fault (of any process) was claimed in the last
        ``gap_s`` seconds, so faults of different workers land in different iterations
        instead of taking all of one. Claimed at the step that fails, under a file lock (the
        workers step together), not at reset: a reset may never step (the trainer's probe)."""
        with open(self.log + ".claim", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            f.seek(0)
            last = float(f.read() or "-inf")
            if time.time() - last < self.gap_s:
                return False
            f.seek(0), f.truncate()
            f.write(repr(time.time()))
            return True

    def _step(self, action: str) -> Any:
        mode, self.fail = self.fail, ""
        if mode and not self._claim_fault():
            mode = ""
        if mode:
            with open(self.log, "a") as f:
                f.write(mode + "\n")
        if mode == "raise":
            raise RuntimeError("injected env failure")
        if mode == "hang":
            time.sleep(self.hang_s)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "jvm":
            _kill_jvm(self.inner)
        return self.inner.step(action)


def _kill_jvm(env: Any) -> None:
    """SIGKILL the JVM of a ScienceWorld env (the shared JVM of its process)."""
    pids = {p for p in _java_children(os.getpid())}
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def _java_children(parent: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and "java" in (d / "comm").read_text():
                out.append(int(d.name))
    return out


register("flaky", "faults:FlakyEnv")

ENV_CASES: dict[str, list[str]] = {
    "raise + hang, in-process envs (timeout 1 s)": [
        "env.options={modes: [raise, hang], every: 5}",
        "rollout.env_timeout_s=1.0",
    ],
    "raise + hang + worker SIGKILL, 4 worker processes (timeout 10 s, 12 iterations)": [
        "env.options={modes: [raise, kill, hang], every: 12, gap_s: 1, hang_s: 15}",
        "train.iterations=12",
        "rollout.env_timeout_s=10",  # a loaded machine answers a normal step in seconds
        "rollout.workers=4",
        "rollout.worker_backend=process",
        "rollout.group_size=4",
    ],
}
SCIENCEWORLD = [  # 2 workers, each with one JVM shared by its 3 envs; a kill costs one
    # episode (the first env to find the JVM dead), the others replay on a new JVM
    "env.options={inner: scienceworld, options: {task: melt}, modes: [jvm], every: 2, gap_s: 30}",
    "rollout.env_timeout_s=60",
    "rollout.workers=2",
    "rollout.worker_backend=process",
    "rollout.groups=2",
    "rollout.group_size=3",
    "train.iterations=6",
    "eval.episodes=1",
]


def _flaky_run(index: int, name: str, sets: list[str], work: Path) -> list[Any]:
    import faults  # the module the registry imports (not __main__)
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    log = work / f"{index}.injected"
    base = [*TINY, "train.iterations=6", "rollout.groups=4", "rollout.group_size=3"]
    overrides = [*base, "env.name=flaky", *sets, "rollout.max_env_error_rate=0.5"]
    cfg = load_config(None, [*overrides, f"env.options.log={log}", f"out_dir={work}"])
    run = work / f"env-{index}"
    faults.FlakyEnv.pid = 0
    Trainer(cfg, run).run()
    injected = Counter(log.read_text().split()) if log.exists() else Counter()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    counts = {
        k: sum(r.get(f"rollout/{k}", 0) for r in rows)
        for k in ("env_errors", "env_timeouts", "env_restarts", "worker_restarts")
    }
    uncounted = sum(injected.values()) - counts["env_errors"] - counts["env_timeouts"]
    lost = cfg.train.iterations - len(rows) + max(0, uncounted)
    what = ", ".join(f"{k} {v}" for k, v in sorted(injected.items()))
    seen = ", ".join(f"{k} {v}" for k, v in counts.items())
    planned = cfg.train.iterations * cfg.rollout.groups * cfg.rollout.group_size
    trained = rows[-1]["episodes"] if rows else 0  # what faults and dropped groups left
    survived = (
        f"{len(rows)}/{cfg.train.iterations} iterations, {trained}/{planned} episodes trained; "
        f"metrics: {seen}"
    )
    return [f"{name}: {what}", sum(injected.values()), survived, lost]


def part_env(work: Path, jvm: bool) -> tuple[list[list[Any]], str]:
    sys.path.insert(0, str(Path(__file__).parent))  # workers import FlakyEnv as faults:...
    cases = dict(ENV_CASES)
    if jvm and importlib.util.find_spec("scienceworld") and shutil.which("java"):
        name = "ScienceWorld JVM SIGKILL, 2 worker processes (timeout 60 s, 2 x 3 episodes)"
        cases[name] = SCIENCEWORLD
    rows = []
    for i, (name, sets) in enumerate(cases.items()):
        try:
            rows.append(_flaky_run(i, name, sets, work))
        except Exception as err:  # the run did not survive: that is the finding
            rows.append([name, "?", f"FAILED: {' '.join(str(err).split())[:300]}", 1])
    body = (
        "Every 5th training episode of a process fails (every 12th per worker process, "
        "phases and modes staggered by pid; on ScienceWorld every 2nd), cycling through the "
        "modes; a fault is claimed at the step that fails, at most one per 1 s across "
        "workers (30 s on ScienceWorld). A hung or killed worker is replaced and costs every "
        "episode it held (one of each group: a slot's worker is its index mod 4); a killed JVM "
        "costs one episode (the first env to find it dead), the other envs of its worker "
        "replay theirs on a new JVM. Episodes trained: what faults and the groups they left "
        "with fewer than 2 episodes did not take. "
        "`rollout.max_env_error_rate=0.5`. Lost counts iterations that did not train plus "
        "injected faults missing from `env_errors` + `env_timeouts` (a dead or hung worker "
        "also ends the other episodes it held, counted as errors, so the counts can exceed "
        "the injections)."
    )
    return rows, body


# -- fuzzed actions --------------------------------------------------------------------------
def fuzz_action(rng: random.Random) -> str:
    """One garbage action: random printable text, a long string, unicode, nested
    parentheses, a JSON fragment or a mix of them."""
    kind = rng.randrange(6)
    if kind == 0:
        return "".join(rng.choices(string.printable, k=rng.randint(0, 40)))
    if kind == 1:
        return rng.choice(["a", "(", "9", " ", "\u00e9", "x+"]) * rng.randint(1_000, 20_000)
    if kind == 2:
        return "".join(chr(rng.randint(0x80, 0x2FFFF)) for _ in range(rng.randint(1, 30)))
    if kind == 3:
        d = rng.randint(1, 400)
        return rng.choice(["(", "[", "{", "cos("]) * d + rng.choice(["x", "1", ""]) + ")" * d
    if kind == 4:
        frags = ['{"action": ', "[1, 2,", '"\\u0000"', "null", "{]", '{"a": [{"b": ']
        return "".join(rng.choices(frags, k=rng.randint(1, 6)))
    return fuzz_action(rng) + "\x00\n\t" + fuzz_action(rng)


def fuzz_env(name: str, n: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    env = make(name)
    admissible: set[str] = set()
    escaped, valid, invalid, examples = 0, 0, 0, []
    done = True
    try:
        for i in range(n):
            if done:  # a few task seeds: the actions are under test, not the tasks, and a
                _, info = env.reset(seed=i % RESET_SEEDS)  # new TextWorld seed compiles a game
                admissible = set(info.get("admissible") or ())
            action = fuzz_action(rng)
            try:
                _, _, term, trunc, info = env.step(action)
            except Exception as err:  # the failure this part looks for
                escaped += 1
                examples.append(f"{type(err).__name__} on {action[:30]!r}")
                done = True
                continue
            done = term or trunc
            if info.get("valid") is False:
                invalid += 1
            elif action.strip() in admissible or not admissible:
                valid += 1
                examples.append(f"valid: {action[:30]!r}")
            else:
                escaped += 1
                examples.append(f"not flagged invalid: {action[:30]!r}")
            admissible = set(info.get("admissible") or admissible)
    finally:
        env.close()
    return {"escaped": escaped, "valid": valid, "invalid": invalid, "examples": examples}


RESET_SEEDS = 8


def part_actions(n: int, seed: int) -> tuple[list[list[Any]], str]:
    rows, notes = [], []
    for name in [e for e in available() if e != "flaky"]:
        start = time.perf_counter()
        try:
            got = fuzz_env(name, n, seed)
        except ImportError as err:
            rows.append([f"fuzzed actions, {name}: skipped ({err})", 0, "-", 0])
            continue
        secs = time.perf_counter() - start
        ok = got["invalid"] + got["valid"]
        rows.append(
            [
                f"fuzzed actions, {name}",
                n,
                f"{ok} answered ({got['invalid']} invalid, {got['valid']} accepted), {secs:.0f} s",
                got["escaped"],
            ]
        )
        if got["examples"]:
            notes.append(f"- {name}: " + "; ".join(got["examples"][:5]))
    body = (
        "Action kinds, equally often: random printable text (0-40 chars), one character "
        "repeated 1,000-20,000 times, random unicode up to U+2FFFF, parentheses / brackets "
        "/ `cos(` nested 1-400 deep, JSON fragments, two of them joined by NUL, newline "
        "and tab. Lost: an exception out of `step`, or an action outside the admissible "
        "list not answered `valid=False`. Episodes restart on 8 task seeds (the actions are "
        "under test, not the tasks).\n" + "\n".join(notes)
    )
    return rows, body


# -- fuzzed CLI / config input ---------------------------------------------------------------
def _bad_values() -> list[str]:
    return [
        "abc", "[1, 2", "{a: 1", "-1", "1e999", "nan", "''", "[]", "{}", "null", "true",
        "'\u00e9\u00e9'", "0x", ": :", "!!python/object:os.system ls", "*a", "&a [1]",
        "1.5", "-0.5", "9" * 40, "[[[[[[[[", "{x: {y: {z: [", "'", '"', "%", "@foo",
    ]  # fmt: skip


def fuzz_cli_inputs(n: int, seed: int, keys: list[str], work: Path) -> list[list[str]]:
    """``n`` argv lists: random keys, known keys with values of the wrong type, malformed
    YAML config files, bad paths (config, --resume, eval, inspect, model.path)."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase + "._"
    out: list[list[str]] = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            key = "".join(rng.choices(letters, k=rng.randint(1, 16))).strip(".") or "q"
            out.append(["--set", f"{key}={rng.choice(_bad_values())}"])
        elif kind in (1, 2):
            out.append(["--set", f"{rng.choice(keys)}={rng.choice(_bad_values())}"])
        elif kind == 3:
            path = work / f"bad{i}.yaml"
            text = rng.choice(
                [
                    "rollout: [1, 2",
                    "train:\n  iterations: {\n",
                    "- a\n- b\n",
                    "env:\n\tname: sokoban\n",
                    "rollout:\n  groups: many\n",
                    "name: x\nname: [",
                    "foo: 1\n",
                    "\x00\x01\x02",
                    "env: sokoban\n",
                    "optim: {lr: -1}\n",
                ]
            )
            path.write_bytes(text.encode() + rng.randbytes(rng.randint(0, 3)))
            out.append([str(path)])
        else:
            out.append(
                rng.choice(
                    [
                        [str(work / f"missing{i}.yaml")],
                        [str(work)],
                        ["--resume", str(work / f"nowhere{i}")],
                        ["--resume", str(work / "empty")],
                        ["--set", f"model.path={work / 'nope'}"],
                        ["--set", f"model.path={work / 'empty'}"],
                        ["--set", "model.device=cuda:7"],
                        ["--set", f"env.options.size={rng.randint(-5, 2)}"],
                        ["--set", f"env.options.max_steps={rng.randint(-9, 0)}"],
                        ["--set", f"rollout.options.{rng.choice(letters)}=1"],
                        ["--set", "agent.action_pattern=("],
                        ["--set", "rollout.stop=[a"],
                    ]
                )
            )
    return out


def hostile_cli_inputs(work: Path) -> list[list[str]]:
    """Hostile config inputs: a 1 KB YAML alias bomb, an alias in --set, a config file
    over 1 MiB, a 100 KB string, counts past their limits, run names that leave out_dir or
    print another name. Each must be refused in one line, fast, with no folder."""
    bomb = ['a0: &a0 ["xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx",'
            '"xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx"]']  # fmt: skip
    bomb += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 8)]
    (work / "bomb.yaml").write_text("\n".join([*bomb, "rollout: {stop: *a7}"]) + "\n")
    (work / "big.yaml").write_text("agent:\n  instruction: '" + "x" * (2 << 20) + "'\n")
    sets = [
        "rollout.stop=&a [1]",
        "agent.instruction=" + "y" * 100_000,
        "rollout.stop=" + "[" * 50 + "]" * 50,
        "rollout.group_size=100000000",
        "rollout.groups=100000000",
        "eval.episodes=1000000000",
        "warmup.demos=1000000000",
        "name=../../x",
        f"name={work}/abs",
        'name="a[red]b\\nc"',
    ]
    return [[str(work / "bomb.yaml")], [str(work / "big.yaml")], *(["--set", x] for x in sets)]


def _one_cli(argv: list[str], out_dir: Path) -> tuple[int, str]:
    from cairn.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main(argv)
        except SystemExit as err:
            rc = err.code if isinstance(err.code, int) else 1
        except BaseException as err:  # an escaped exception is the finding
            rc = -1
            buf.write(f"Traceback (escaped): {type(err).__name__}: {err}\n")
    return rc, buf.getvalue()


def check_cli(argv: list[str], work: Path) -> tuple[str, str]:
    """("rejected" | "accepted" | "LOST", output) for one fuzzed train input: ``config``
    first (no torch); train only what that rejects, so nothing trains by accident."""
    out_dir = work / "out"
    before = set(os.listdir(out_dir)) if out_dir.exists() else set()
    rc, text = _one_cli(["config", *argv], out_dir)
    if rc == 0:
        return "accepted", ""
    rc, text = _one_cli(["train", *argv, "--set", f"out_dir={out_dir}"], out_dir)
    if argv[0] == "--resume":  # the folder given to --resume is the run; out_dir unused
        rc, text = _one_cli(["train", *argv], out_dir)
    lines = [x for x in text.splitlines() if x.strip()]
    after = set(os.listdir(out_dir)) if out_dir.exists() else set()
    ok = rc not in (0, -1) and len(lines) == 1 and "Traceback" not in text and after == before
    return ("rejected" if ok else "LOST"), text


def part_cli(n: int, seed: int, work: Path) -> tuple[list[list[Any]], str]:
    from cairn.train.schema import describe

    (work / "empty").mkdir(exist_ok=True)
    keys = [k for k, _, _ in describe()]
    runs_before = set(os.listdir("runs")) if os.path.isdir("runs") else set()
    verdicts: Counter[str] = Counter()
    lost = []
    for argv in fuzz_cli_inputs(n, seed, keys, work):
        verdict, text = check_cli(argv, work)
        verdicts[verdict] += 1
        if verdict == "LOST":
            lost.append(f"- `{' '.join(argv)[:80]}`: {text.strip()[:200]!r}")
    hostile: Counter[str] = Counter()
    slowest = 0.0
    for argv in hostile_cli_inputs(work):
        start = time.perf_counter()
        verdict, text = check_cli(argv, work)
        slowest = max(slowest, time.perf_counter() - start)
        hostile[verdict] += 1
        if verdict == "LOST":
            lost.append(f"- hostile `{' '.join(argv)[:80]}`: {text.strip()[:200]!r}")
    runs_after = set(os.listdir("runs")) if os.path.isdir("runs") else set()
    sub = _subprocess_cli(work)
    rows = [
        [
            "fuzzed CLI/config input, in-process",
            n,
            f"{verdicts['rejected']} rejected in one line, {verdicts['accepted']} valid",
            verdicts["LOST"] + len(runs_after - runs_before),
        ],
        [
            "hostile config input (issue 26: aliases, sizes, counts, run names)",
            sum(hostile.values()),
            f"{hostile['rejected']} rejected in one line (slowest {slowest:.1f} s)",
            hostile["LOST"] + hostile["accepted"],
        ],
        [
            "bad CLI input, real subprocesses",
            len(sub),
            f"{sum(sub.values())} one line, non-zero, no folder",
            len(sub) - sum(sub.values()),
        ],
    ]
    body = (
        "Each input is tried with `cairn config` first; what it rejects then goes to "
        "`cairn train ... --set out_dir=<empty folder>`, which must exit non-zero with one "
        "line, no traceback and no new folder (nor one in `runs/`). Kinds, equally often: "
        "a random key, a known key (from `cairn config --keys`) with a value of the wrong "
        "type or malformed YAML, a malformed YAML config file, a bad path or a bad "
        "option named in issue 15 item 11.\n" + "\n".join(lost)
    )
    return rows, body


SUBPROCESS_CASES = [
    ["train", "--set", "rollout.groups=abc"],
    ["train", "--set", "env.options.size=2"],
    ["train", "--resume", "/nonexistent/run"],
    ["inspect", "/nonexistent/run", "--serve", "--port", "70000"],
]


def _subprocess_cli(work: Path) -> dict[str, bool]:
    cairn = Path(sys.executable).with_name("cairn")
    exe = [str(cairn)] if cairn.exists() else [sys.executable, "-m", "cairn.cli"]
    out: dict[str, bool] = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for argv in SUBPROCESS_CASES:
        before = set(os.listdir(work))
        extra = ["--set", f"out_dir={work}"] if argv[0] == "train" else []
        done = subprocess.run(
            [*exe, *argv, *extra], capture_output=True, text=True, env=env, timeout=300
        )
        lines = [x for x in (done.stdout + done.stderr).splitlines() if x.strip()]
        new = set(os.listdir(work)) - before
        out[" ".join(argv)] = done.returncode != 0 and len(lines) == 1 and not new
    return out


# -- record ----------------------------------------------------------------------------------
# -- planted checkpoint files ------------------------------------------------------------------
def _base_run(work: Path) -> Path:
    """A tiny 3-iteration run, then cut back to what a kill right after iteration 2's
    checkpoint leaves: checkpoints 1 and 2, metrics rows 1-2, no summary."""
    out = work / "base"
    rc = _run_cli(
        [*_train_argv("sokoban_gigpo", out), "--set", "checkpoint.keep=5"], work / "base.log"
    )
    run = _run_folder(out)
    if rc != 0 or run is None:
        raise RuntimeError(f"the base run failed: {(work / 'base.log').read_text()[-400:]}")
    shutil.rmtree(run / "checkpoints" / "iter_000003")
    (run / "checkpoints" / "latest").write_text("iter_000002")
    (run / "summary.json").unlink()
    (run / "trajectories" / "iter_000003.jsonl.gz").unlink()
    rows = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(rows[:2]))
    return run


def _plant_state(folder: Path, change: Any) -> None:
    """Edit state.json's skeleton and fix the manifest's size, so only the schema can tell."""
    path = folder / "state.json"
    saved = json.loads(path.read_text())
    change(saved["state"])
    path.write_text(json.dumps(saved))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["state.json"] = path.stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _bad_iteration(run: Path, _other: Path) -> None:
    _plant_state(run / "checkpoints" / "iter_000002", lambda s: s.update(iteration=-5))


def _numpy_bombs(run: Path, _other: Path) -> None:
    bomb = {"__npscalar__": "<U600000000", "value": "x"}  # 2.4 GB each, unchecked
    _plant_state(
        run / "checkpoints" / "iter_000002", lambda s: s.update(a=bomb, b=bomb, c=bomb, d=bomb)
    )


def _garbage_state(run: Path, _other: Path) -> None:
    path = run / "checkpoints" / "iter_000002" / "state.json"
    path.write_bytes(b"\x00" * path.stat().st_size)


def _latest_elsewhere(run: Path, other: Path) -> None:
    (run / "checkpoints" / "latest").write_text(str(other / "checkpoints" / "iter_000002"))


def _linked_folder(run: Path, other: Path) -> None:
    (run / "checkpoints" / "iter_000009").symlink_to(other / "checkpoints" / "iter_000002")
    (run / "checkpoints" / "latest").write_text("iter_000009")


def _stale_corrupt(run: Path, _other: Path) -> None:
    stale = run / "checkpoints" / "iter_000009"
    shutil.copytree(run / "checkpoints" / "iter_000002", stale)
    with (stale / "model.safetensors").open("r+b") as f:
        f.truncate(100)


def _torn_row(run: Path, _other: Path) -> None:
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[: text.rindex("\n", 0, len(text) - 1) + 41])


def _planted_pickle(run: Path, other: Path) -> None:
    marker = other.parent / "pwned"  # created if the pickle is ever loaded
    payload = b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR."
    (run / "checkpoints" / "iter_000002" / "pytorch_model.bin").write_bytes(payload)


#: name -> (plant(run, other run), extra arguments of ``cairn train --resume``)
CHECKPOINT_CASES = {
    "state.json iteration -5 in the newest checkpoint": (_bad_iteration, []),
    "four numpy scalars of dtype <U600000000 in state.json": (_numpy_bombs, []),
    "same-size garbage state.json in the newest checkpoint": (_garbage_state, []),
    "checkpoints/latest = absolute path of another run's checkpoint": (_latest_elsewhere, []),
    "iter_000009 a symlink to another run's checkpoint, named by latest": (_linked_folder, []),
    "stale corrupt iter_000009, resumed with checkpoint.keep=1": (
        _stale_corrupt,
        ["--set", "checkpoint.keep=1"],
    ),
    "last metrics row torn, its checkpoint intact": (_torn_row, []),
    "pickle (os.system payload) planted in the newest checkpoint": (_planted_pickle, []),
}


def _check_resumed(run: Path, base_rows: list[dict[str, Any]], work: Path) -> list[str]:
    """What was lost after a resume (empty: nothing)."""
    lost = []
    rows = _metrics(run) if (run / "metrics.jsonl").exists() else []
    if [r.get("iteration") for r in rows] != [1, 2, 3]:
        lost.append(f"metrics iterations {[r.get('iteration') for r in rows]}")
    elif rows[:1] != base_rows[:1]:
        lost.append("metrics row 1 changed")
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("iter_*"))
    latest = (run / "checkpoints" / "latest").read_text().strip()
    if latest not in ckpts or "iter_000009" in ckpts:
        lost.append(f"checkpoints {ckpts}, latest {latest}")
    if (work / "pwned").exists():
        lost.append("the pickle ran")
    return lost


def _said(line: str, work: Path) -> str:
    """A line of the resume's output without the warning's source prefix and temp paths."""
    line = line.split("CheckpointWarning: ", 1)[-1].strip()
    return line.replace(str(work), "WORK")[:400]


def part_checkpoint(work: Path) -> tuple[list[list[Any]], str]:
    import resource

    base = _base_run(work)
    other = work / "other"
    shutil.copytree(base, other)
    base_rows = _metrics(base)
    rows, notes = [], []
    for i, (name, (plant, extra)) in enumerate(CHECKPOINT_CASES.items()):
        run = work / f"case{i}" / base.name
        shutil.copytree(base, run)
        plant(run, other)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        rc = _run_cli(["train", "--resume", str(run), *extra], work / f"case{i}.log")
        secs = time.perf_counter() - start
        grown = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - before
        lost = _check_resumed(run, base_rows, work) if rc == 0 else [f"exit {rc}"]
        if grown > 2_000_000:  # KiB: a resume of this run peaks near 1 GB
            lost.append(f"peak memory grew by {grown // 1024} MB")
        log = (work / f"case{i}.log").read_text()
        said = [_said(x, work) for x in log.splitlines() if "skipped" in x or "rebuilt" in x]
        survived = f"resumed to iteration 3 in {secs:.0f} s" if not lost else "; ".join(lost)
        rows.append([name, 1, survived, int(bool(lost))])
        if said:
            notes.append(f"- {name}: {said[0]}")
    # Every checkpoint bad: refused in one line, the run folder unchanged.
    run = work / "refused" / base.name
    shutil.copytree(base, run)
    for folder in (run / "checkpoints").glob("iter_*"):
        _plant_state(folder, lambda s: s.update(iteration=-5))
    before = (run / "metrics.jsonl").read_bytes()
    rc, text = _one_cli(["train", "--resume", str(run)], work)
    lines = [x for x in text.splitlines() if x.strip()]
    ok = rc not in (0, -1) and len(lines) == 1 and (run / "metrics.jsonl").read_bytes() == before
    rows.append(
        [
            "every checkpoint with iteration -5",
            1,
            "refused in one line" if ok else text[-200:],
            int(not ok),
        ]
    )
    notes.append(f"- every checkpoint bad: {_said(lines[0], work) if lines else '(no output)'}")
    body = (
        "One tiny GiGPO run (sokoban, 3 iterations, a checkpoint after each), cut back to "
        "what a kill right after iteration 2's checkpoint leaves; each case plants one "
        "file into a copy of it, then runs `cairn train --resume` in a forked process. "
        "Lost: the resume failing, metrics rows other than 1, 2, 3 (row 1 unchanged), "
        "`latest` naming a missing folder, a stale checkpoint kept, the pickle running, "
        "or peak memory growing by more than 2 GB. What the resume said:\n" + "\n".join(notes)
    )
    return rows, body


# -- hostile completions through the action parsers -------------------------------------------
def hostile_completion(rng: random.Random) -> str:
    """A completion built to break a parser: deep nesting, huge numbers, NaN / Infinity,
    duplicate keys, control characters, long strings, unicode, inside or outside a tool call."""
    depth = rng.choice([10, 999, 1000, 5000, 50_000])
    value = rng.choice(
        [
            "[" * depth + "]" * depth,
            '{"a":' * depth + "1" + "}" * depth,
            "9" * rng.choice([100, 4300, 4301, 5000, 100_000]),
            rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "-0"]),
            json.dumps("".join(chr(rng.randint(0, 0x2FFFF)) for _ in range(50))),
            '"' + "".join(chr(rng.randint(0, 31)) for _ in range(20)) + '"',
            json.dumps("x" * rng.choice([1000, 1_000_000])),
        ]
    )
    call = rng.choice(
        [
            '{"name": "search", "arguments": {"query": %s}}',
            '{"name": "answer", "name": "search", "arguments": {"query": %s}}',
            '{"name": "answer", "arguments": {"answer": %s, "answer": "x"}}',
            '{"name": %s, "arguments": {}}',
            "%s",
        ]
    )
    text = call.replace("%s", value)
    return rng.choice(["<tool_call>%s</tool_call>", "<action>%s</action>", "%s"]).replace(
        "%s", text
    )


def part_parsers(n: int, seed: int) -> tuple[list[list[Any]], str]:
    from cairn.agent import ACTION_FORMATS, parse_action

    rng = random.Random(seed)
    rows, examples = [], []
    for fmt in ACTION_FORMATS:
        escaped, nones, start = 0, 0, time.perf_counter()
        for _ in range(n):
            text = hostile_completion(rng)
            try:
                nones += parse_action(text, fmt=fmt) is None
            except Exception as err:  # the failure this part looks for
                escaped += 1
                examples.append(f"{fmt}: {type(err).__name__} on {text[:40]!r}")
        secs = time.perf_counter() - start
        rows.append(
            [
                f"hostile completions, {fmt} format",
                n,
                f"{n - escaped} parsed ({nones} format errors), {secs:.0f} s",
                escaped,
            ]
        )
    body = (
        "Completions: nesting 10-50,000 deep, integers of 100-100,000 digits (int's limit is "
        "4,300), NaN / Infinity / 1e999, a key given twice, control characters, random "
        "unicode, strings up to 1 MB; as a tool call, an `<action>` tag or bare. Lost: any "
        "exception out of `parse_action` (before: RecursionError and ValueError escaped "
        "`parse_tool_call` and ended the run).\n" + "\n".join(f"- {e}" for e in examples[:5])
    )
    return rows, body


# -- hostile round 3 -----------------------------------------------------------------------------
HOSTILE_SETS = [
    "train.time_budget_s=null",
    "rollout.groups=2",
    "eval.episodes=2",
    "eval.every=0",
    "eval.at_start=false",
    "train.threads=1",
    "checkpoint.every=1",
    "log.progress=false",
]


def _cli_proc(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``cairn ARGV`` as a real process (stdin closed unless ``input`` is given)."""
    kwargs.setdefault("timeout", 300)
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *argv], capture_output=True, text=True, **kwargs
    )


def _sets(items: list[str]) -> list[str]:
    return [x for s in items for x in ("--set", s)]


def _one_line_error(res: subprocess.CompletedProcess, *words: str) -> bool:
    """Ended with a non-zero status, no traceback, one ``error:`` line holding ``words``."""
    errors = [line for line in res.stdout.splitlines() if line.startswith("error:")]
    return (
        res.returncode != 0
        and "Traceback" not in res.stdout + res.stderr
        and len(errors) == 1
        and all(w in errors[0] for w in words)
    )


def _wait_for(cond: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def _hostile_compare(work: Path) -> list[Any]:
    out = work / "cmp"
    sets = _sets([*HOSTILE_SETS, "train.iterations=30"])
    argv = [sys.executable, "-m", "cairn.cli", "compare", "sokoban_gigpo", "--seeds", "1"]
    first = subprocess.Popen(
        [*argv, *sets, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lock = out / "sokoban_gigpo" / "seed0" / "run.lock"
    _wait_for(lambda: lock.exists() and lock.read_text().strip(), 120)
    second = _cli_proc(["compare", "sokoban_gigpo", "--seeds", "1", *sets, "--out", str(out)])
    first.communicate(timeout=600)
    rows = _metrics(out / "sokoban_gigpo" / "seed0")
    ok = (
        _one_line_error(second, "compare.lock")
        and first.returncode == 0
        and [r["iteration"] for r in rows] == list(range(1, 31))
    )
    return ["a second `cairn compare` into a live `--out`", 1, int(ok), int(not ok)]


def _hostile_remote_code(work: Path) -> list[Any]:
    folder, marker = work / "model", work / "MARKER"
    folder.mkdir()
    auto_map = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": auto_map}))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    sets = _sets([*HOSTILE_SETS, "train.iterations=1", f"out_dir={work / 'runs'}"])
    res = _cli_proc(["train", *sets, "--set", f"model.path={folder}"], input="y\n" * 4)
    ok = not marker.exists() and _one_line_error(res, "trust_remote_code=False")
    return ["a model folder with an `auto_map`, `y` on stdin", 1, int(ok), int(not ok)]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = (entry / "stat").read_text()
            if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2 :].split()[0] in ("Z", "X")


def _hostile_orphans(work: Path, kills: int = 3) -> list[Any]:
    left = 0
    for k in range(kills):
        sets = [
            *HOSTILE_SETS,
            "train.iterations=500",
            "rollout.workers=2",
            "rollout.worker_backend=process",
            f"out_dir={work / str(k)}",
        ]
        trainer = subprocess.Popen(
            [sys.executable, "-m", "cairn.cli", "train", *_sets(sets)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(lambda: len(_children(trainer.pid)) >= 4, 120)  # noqa: B023
        _wait_for(lambda: any((work / str(k)).rglob("metrics.jsonl")), 120)  # noqa: B023
        workers = _children(trainer.pid)
        trainer.kill()
        trainer.wait()
        _wait_for(lambda: all(_gone(w) for w in workers), 5)  # noqa: B023
        stayed = [w for w in workers if not _gone(w)]
        left += len(stayed)
        for w in stayed:  # leave nothing behind on this machine
            with contextlib.suppress(OSError):
                os.kill(w, signal.SIGKILL)
    return [
        f"`kill -9` of a trainer with 2 process workers ({kills} times)",
        kills,
        f"{kills} ({left} workers left after 5 s)",
        int(left > 0),
    ]


def _run_folder_with(work: Path, name: str) -> Path:
    run = work / name
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n')
    return run


def _hostile_bomb(work: Path) -> list[Any]:
    import zlib

    run = _run_folder_with(work, "bomb")
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    pad = "a" * (4 * 2**20)
    with (run / "trajectories" / "iter_000002.jsonl.gz").open("wb") as f:
        for i in range(1535):  # the reported bomb: 1,535 lines of 4 MiB
            line = json.dumps({"group": i, "text": pad}) + "\n"
            f.write(comp.compress(line.encode()))
        f.write(comp.flush())
    size = (run / "trajectories" / "iter_000002.jsonl.gz").stat().st_size
    code = (
        "import resource, sys; from cairn.cli import main; rc = main(sys.argv[1:]); "
        "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "inspect", str(run), "--out", str(work / "bomb.html")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    peak_mb = int(res.stdout.split("peak")[-1]) / 1024 if "peak" in res.stdout else float("inf")
    ok = res.returncode == 0 and "Traceback" not in res.stderr and peak_mb < 1024
    what = f"a {size / 2**20:.1f} MB gzip bomb (6.0 GiB of 4 MiB lines), `cairn inspect`"
    return [what, 1, f"{int(ok)} (peak {peak_mb:.0f} MB)", int(not ok)]


def _hostile_fifos(work: Path) -> list[Any]:
    done = ok = 0
    for name in ("config.yaml", "metrics.jsonl", "summary.json"):
        for argv in (["inspect"], ["train", "--resume"], ["eval"]):
            run = _run_folder_with(work, f"fifo-{name}-{argv[0]}")
            (run / name).unlink(missing_ok=True)
            os.mkfifo(run / name)
            try:
                res = _cli_proc([*argv, str(run)], timeout=120)
                good = res.returncode != 0 and "Traceback" not in res.stdout + res.stderr
            except subprocess.TimeoutExpired:
                good = False
            done, ok = done + 1, ok + int(good)
    return [
        "a FIFO as config.yaml / metrics.jsonl / summary.json: inspect, resume, eval",
        done,
        ok,
        done - ok,
    ]


def _hostile_symlink(work: Path) -> list[Any]:
    run = _run_folder_with(work, "linked")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to("/etc/passwd")
    res = _cli_proc(["inspect", str(run), "--out", str(work / "linked.html")])
    leaked = (work / "linked.html").exists() and "root:" in (work / "linked.html").read_text()
    ok = not leaked and _one_line_error(res, "symbolic link leading out of")
    return ["config.yaml linked to /etc/passwd, `cairn inspect`", 1, int(ok), int(not ok)]


def _hostile_checkpoint_writer(work: Path) -> list[Any]:
    code = (
        "import sys; from safetensors import SafetensorError\n"
        "import cairn.train.checkpoint.write as c\n"
        "def full(*a, **k):\n"
        "    raise SafetensorError('Error while serializing: No space left on device')\n"
        "c.save_file = full\n"
        "from cairn.cli import main; sys.exit(main(sys.argv[1:]))\n"
    )
    sets = _sets([*HOSTILE_SETS, "train.iterations=2", f"out_dir={work / 'ckpt'}"])
    res = subprocess.run(
        [sys.executable, "-c", code, "train", *sets], capture_output=True, text=True, timeout=300
    )
    tmp_left = list((work / "ckpt").rglob(".iter_*.tmp"))
    ok = _one_line_error(res, "could not be written (SafetensorError") and not tmp_left
    return ["SafetensorError (disk full) in a checkpoint write", 1, int(ok), int(not ok)]


def _hostile_bounds(work: Path) -> list[Any]:
    cases = [
        "env.options.size=2000",
        "env.options.max_steps=1000000000000",
        "env.name=frozenlake",
        "env.name=countdown",
    ]
    argvs = [[cases[0]], [cases[1]], [cases[2], cases[1]], [cases[3], cases[1]]]
    ok = 0
    for extra in argvs:
        res = _cli_proc(["train", *_sets([*HOSTILE_SETS, f"out_dir={work / 'b'}", *extra])])
        ok += int(res.returncode == 2 and "Traceback" not in res.stdout + res.stderr)
    return [
        "sokoban `size: 2000`, `max_steps: 1e12` on sokoban/frozenlake/countdown",
        len(argvs),
        ok,
        len(argvs) - ok,
    ]


def _hostile_divergence(work: Path) -> list[Any]:
    ok = 0
    for every in (1, 5):  # caught before a checkpoint; caught when sampling
        sets = [
            *HOSTILE_SETS,
            "train.iterations=3",
            "optim.lr=1e30",
            "optim.max_grad_norm=1e30",
            f"checkpoint.every={every}",
            f"out_dir={work / f'div{every}'}",
        ]
        ok += int(_one_line_error(_cli_proc(["train", *_sets(sets)]), "diverged", "optim.lr"))
    return ["`optim.lr=1e30`, `max_grad_norm=1e30`", 2, ok, 2 - ok]


def _hostile_eval_prune(work: Path, evals: int = 7) -> list[Any]:
    sets = [*HOSTILE_SETS, "train.iterations=400", "checkpoint.keep=1", f"out_dir={work / 'ev'}"]
    trainer = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "train", *_sets(sets)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: any((work / "ev").rglob("checkpoints/latest")), 120)
        run = next((work / "ev").iterdir())
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cairn.cli",
                    "eval",
                    str(run),
                    "--out",
                    str(work / f"e{i}.json"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(evals)
        ]
        results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    finally:
        trainer.kill()
        trainer.wait()
    good = sum(
        1
        for rc, out, err in results
        if "Traceback" not in out + err
        and "model.path" not in out
        and (rc == 0 or "was pruned while it was read" in out)
    )
    return [
        f"{evals} `cairn eval` against a live run with `checkpoint.keep=1`",
        evals,
        good,
        evals - good,
    ]


def _hostile_sighup(work: Path) -> list[Any]:
    sets = [*HOSTILE_SETS, "train.iterations=500", f"out_dir={work / 'hup'}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "train", *_sets(sets)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: any((work / "hup").rglob("checkpoints/latest")), 120)
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=120)
    ok = proc.returncode == 129 and "terminated (SIGHUP)" in out and "is intact" in out
    return ["SIGHUP during a run", 1, int(ok), int(not ok)]


def _hostile_serve(work: Path) -> list[Any]:
    import selectors
    import socket
    import threading

    from cairn.report.html import serve

    page = work / "page.html"
    page.write_bytes(b"<html>" + b"x" * 200_000 + b"</html>")
    box: dict[str, Any] = {}
    threading.Thread(
        target=serve,
        args=(page, 0),
        daemon=True,
        kwargs={"seconds": 120, "ready": lambda u, s: box.update(s=s)},
    ).start()
    _wait_for(lambda: "s" in box, 10)
    port = box["s"].server_address[1]
    socks = [socket.socket() for _ in range(200)]
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE)
    got, done = dict.fromkeys(socks, 0), set()
    request = f"GET / HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    deadline = time.monotonic() + 40
    while len(done) < len(socks) and time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.2):
            s = key.fileobj
            if events & selectors.EVENT_WRITE:
                with contextlib.suppress(OSError):
                    s.send(request)
                    sel.modify(s, selectors.EVENT_READ)
                continue
            data = b""
            with contextlib.suppress(OSError):
                data = s.recv(1 << 16)
            got[s] += len(data)
            if not data:
                done.add(s)
                sel.unregister(s)
    box["s"].shutdown()
    answered = sum(1 for s in done if got[s] > 100_000)
    return ["200 concurrent requests to `inspect --serve` (40 s)", 200, answered, 200 - answered]


# -- a run folder is data ------------------------------------------------------------------------
#: A module that marks each import of itself, and a reward function a dataset env can name.
PLANTED = (
    "import os\n"
    "with open(os.environ['CAIRN_FAULTS_MARKER'], 'a') as f:\n"
    "    f.write('imported\\n')\n"
    "def correct(prompts, completions, **columns):\n"
    "    return [1.0 for _ in completions]\n"
)
RUN_COMMANDS = ("eval", "export", "inspect", "train --resume")


def _as(work: Path, who: str, marker: Path) -> dict[str, str]:
    """The environment of user ``who`` (their own trust store) with planted_mod importable."""
    site = work / "site"
    if not site.exists():
        site.mkdir()
        (site / "planted_mod.py").write_text(PLANTED)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    cache = str(work / f"cache-{who}")
    return {
        **os.environ,
        "PYTHONPATH": path,
        "CAIRN_CACHE": cache,
        "CAIRN_FAULTS_MARKER": str(marker),
    }


def _command_argv(command: str, run: Path, out: Path) -> list[str]:
    return {
        "eval": ["eval", str(run), "--out", str(out / "eval.json")],
        "export": ["export", str(run), str(out / "exported")],
        "inspect": ["inspect", str(run), "--out", str(out / "report.html")],
        "train --resume": ["train", "--resume", str(run), "--set", "train.iterations=2"],
    }[command]


def _refused(work: Path, run: Path, command: str, *words: str) -> tuple[bool, str]:
    """``cairn COMMAND`` of ``run`` as a reader who never trusted it: (refused in one line
    naming ``words`` with exit status 2, no marker, under 2 s; the row's account)."""
    marker, out = work / f"marker-{command.replace(' ', '')}", work / f"out-{command[:5]}"
    start = time.perf_counter()
    res = _cli_proc(_command_argv(command, run, out), env=_as(work, "reader", marker))
    secs = time.perf_counter() - start
    ok = (
        res.returncode == 2
        and _one_line_error(res, "--trust-code", *words)
        and not marker.exists()
        and secs < 2.0
    )
    said = f"exit {res.returncode}, marker {'written' if marker.exists() else 'absent'}"
    return ok, f"{said}, {secs:.2f} s"


def _hostile_received_run(work: Path) -> list[list[Any]]:
    """A run trained by someone else with ``imports: [planted_mod]``, copied to the reader."""
    sets = [*HOSTILE_SETS, "train.iterations=1", "imports=[planted_mod]"]
    env = _as(work, "author", work / "author.marker")
    _cli_proc(["train", *_sets([*sets, f"out_dir={work / 'theirs'}"])], env=env, check=True)
    run = work / "received"
    shutil.copytree(next((work / "theirs").iterdir()), run)
    rows = []
    for command in RUN_COMMANDS:
        ok, said = _refused(work, run, command, "imports planted_mod")
        what = f"a received run with `imports: [planted_mod]`: `cairn {command}`"
        rows.append([what, 1, f"{int(ok)} ({said})", int(not ok)])
    return rows


def _hostile_planted_reward(work: Path) -> list[Any]:
    run = work / "planted"
    run.mkdir()
    reward = "env: {name: dataset, options: {reward: 'planted_mod:correct'}}\n"
    (run / "config.yaml").write_text(reward)
    results = [
        _refused(work, run, c, "env.options.reward planted_mod:correct") for c in RUN_COMMANDS
    ]
    ok = sum(r[0] for r in results)
    said = "; ".join(r[1] for r in results)
    what = (
        "a run folder whose dataset reward is `planted_mod:correct`: eval, export, inspect, resume"
    )
    return [what, len(results), f"{ok} ({said})", len(results) - ok]


def _hostile_game_bounds(work: Path) -> list[Any]:
    cases = {
        "textworld": ("env.options={num_games: 10000001}", "17 hours and 4 GB"),
        "twx": ("env.options={game_params: numLocations=1000000}", "simonsays"),
    }
    ok, ran = 0, 0
    for env, (options, why) in cases.items():
        if importlib.util.find_spec({"twx": "textworld_express"}.get(env, env)) is None:
            continue
        sets = [*HOSTILE_SETS, f"env.name={env}", options, f"out_dir={work / env}"]
        res = _cli_proc(["train", *_sets(sets)])
        ran, ok = ran + 1, ok + int(_one_line_error(res, why) and res.returncode == 2)
    what = "TextWorld `num_games: 10000001`, TextWorld-Express `numLocations=1000000`"
    return [what, ran, ok, ran - ok]


def _hostile_identical_runs(work: Path) -> list[Any]:
    for name in ("a", "b"):
        sets = [*HOSTILE_SETS, "train.iterations=2", f"out_dir={work / name}"]
        _cli_proc(["train", *_sets(sets)], check=True)
    runs = [next((work / name).iterdir()) for name in ("a", "b")]
    files = [
        Path("checkpoints") / f"iter_{i:06d}" / f
        for i in (1, 2)
        for f in ("state.safetensors", "model.safetensors")
    ]
    same = sum((runs[0] / f).read_bytes() == (runs[1] / f).read_bytes() for f in files)
    what = "two identical 2-iteration `cairn train` processes: checkpoint safetensors compared"
    return [what, len(files), f"{same} byte-identical", len(files) - same]


def part_hostile(work: Path, quick: bool) -> tuple[list[list[Any]], str]:
    """The third hostile round's attacks, each reproduced as it was reported."""
    steps = [
        _hostile_compare,
        _hostile_remote_code,
        lambda w: _hostile_orphans(w, 1 if quick else 3),
        _hostile_fifos,
        _hostile_symlink,
        _hostile_checkpoint_writer,
        _hostile_bounds,
        _hostile_divergence,
        lambda w: _hostile_eval_prune(w, 3 if quick else 7),
        _hostile_sighup,
        _hostile_serve,
    ]
    if not quick:
        steps.insert(3, _hostile_bomb)
    rows = []
    for k, step in enumerate(steps):
        (work / str(k)).mkdir()
        rows.append(step(work / str(k)))
    (work / "received").mkdir()
    rows += _hostile_received_run(work / "received")
    for k, step in enumerate(
        [_hostile_planted_reward, _hostile_game_bounds, _hostile_identical_runs]
    ):
        (work / f"data{k}").mkdir()
        rows.append(step(work / f"data{k}"))
    body = (
        "Each attack of the third hostile round (issue 37) as a real `cairn` process on "
        "the tiny default model. Survived: it ended in one line (or was handled) with no "
        "traceback, no data lost, no code run, no process left, and bounded memory (the "
        "bomb's peak RSS in its row). The rows from the received run on (issue 45): a run "
        "folder is data; a command reading a run whose config names code must exit 2 in "
        "one line naming it and `--trust-code`, within 2 s, with no marker written by the "
        "planted module (the reader's trust store is empty: the run was trained under "
        "another cache folder, then copied); the bounded game sizes must be refused in one "
        "line saying why; two identical runs must write byte-identical safetensors."
    )
    return rows, body


def table(rows: list[list[Any]]) -> str:
    head = "| injected | times | survived | lost |\n|---|---|---|---|\n"
    return head + "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)


def _write(label: str, title: str, body: str) -> None:
    """Write one section; parts may run as separate processes, so under a file lock."""
    try:
        sys.path.insert(
            0, str(Path(__file__).resolve().parents[2] / "benchmarks")
        )  # benchmarks/_lib
        from _lib.records import write_section
    except ImportError:  # before the records module lands: a plain section writer
        write_section = _write_section
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "cairn-faults-record.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_section(RESULTS, label, title, body, HEADER)


def _write_section(path: Path, label: str, title: str, body: str, header: str) -> None:
    import re

    text = path.read_text() if path.exists() else header
    head, *parts = re.split(r"(?m)^(?=## )", text)
    sections = {p.splitlines()[0][3:].split(":", 1)[0].strip(): p for p in parts}
    sections[label] = f"## {label}: {title}\n\n{body.strip()}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        head.rstrip() + "\n\n" + "\n".join(s.rstrip() + "\n" for s in sections.values())
    )


TITLES = {
    "kill": "SIGKILL at random moments, resumed",
    "env": "env exceptions, hangs, dead workers and JVMs",
    "actions": "fuzzed actions",
    "cli": "fuzzed CLI and config input",
    "checkpoint": "planted checkpoint and run files, resumed",
    "parsers": "hostile completions through the action parsers",
    "hostile": "compare races, remote code, orphaned workers, bombs and FIFOs",
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        default="kill,env,actions,cli,checkpoint,parsers,hostile",
        help="parts; kill-PRESET: one preset's kills",
    )
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--actions", type=int, default=10_000)
    p.add_argument("--cli", type=int, default=300)
    p.add_argument("--parsers", type=int, default=2_000, help="completions per action format")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-jvm", action="store_true", help="skip the ScienceWorld JVM kills")
    p.add_argument("--quick", action="store_true", help="small counts, prints only")
    args = p.parse_args()
    if args.quick:
        args.kills, args.actions, args.cli, args.parsers = 3, 300, 40, 100
    total_lost = 0
    with tempfile.TemporaryDirectory(prefix="cairn-faults-") as tmp:
        work = Path(tmp)
        for part in args.only.split(","):
            start = time.perf_counter()
            (work / part).mkdir()
            if part.startswith("kill"):  # kill: every preset; kill-PRESET: its share
                only = part.partition("-")[2]
                rows, body = part_kill(args.kills, args.seed, work / part, only)
            elif part == "env":
                rows, body = part_env(work / part, not args.no_jvm)
            elif part == "actions":
                rows, body = part_actions(args.actions, args.seed)
            elif part == "checkpoint":
                rows, body = part_checkpoint(work / part)
            elif part == "parsers":
                rows, body = part_parsers(args.parsers, args.seed)
            elif part == "hostile":
                rows, body = part_hostile(work / part, args.quick)
            else:
                rows, body = part_cli(args.cli, args.seed, work / part)
            total_lost += sum(int(r[3]) for r in rows)
            text = (
                table(rows)
                + f"\n\n{body}\n\n{time.perf_counter() - start:.0f} s, seed {args.seed}."
            )
            print(f"== {part}\n{text}\n", flush=True)
            if not args.quick:
                _write(part, TITLES[part.partition("-")[0]], text)
    print(f"lost: {total_lost}")
    return 1 if total_lost else 0


if __name__ == "__main__":
    sys.exit(main())
