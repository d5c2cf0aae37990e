"""Command line (CONFIG: a YAML file or a preset name, see `cairn presets`):

cairn train [CONFIG] [--set key=value ...] [--resume RUN_DIR [--trust-code]]
cairn eval RUN_DIR [--episodes N] [--out FILE] [--trust-code]   # read-only
cairn compare CONFIG... --seeds N [--set key=value ...] [--out DIR] [--jobs J]
cairn inspect RUN_DIR [--out FILE] [--iterations M --groups K --episodes E] [--serve]
cairn export RUN_DIR OUT [--merge] [--force] [--trust-code]
cairn config [CONFIG] [--set ...]       # print the resolved config, or all keys
cairn presets                           # the shipped presets, one line each
cairn verl-data ENV --train N --val M --out DIR [--set env.options.k=v]   # verl parquet
cairn --version

A run folder whose config names code (imports, reward functions) is read only with consent
(--trust-code; runs this user started need none: cairn.train.trust).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn._env_host import EnvFault, EnvFaultRateError
from cairn._errors import ConfigError
from cairn._files import UnsafeFile, check_regular
from cairn.data.rundir import RunLock, RunLocked
from cairn.integrations.verl import data as verl_data

if TYPE_CHECKING:
    from rich.console import Console

    from cairn.train.checkpoint.read import Checkpoint
    from cairn.train.schema import Config
    from cairn.train.trainer import Trainer

__all__ = ["main"]

# Start-up: `cairn --version`, `presets`, `config`, `--help` and a config error answer in well
# under 0.5 s (benchmarks/speed/cli_speed.py), so this module imports no torch, transformers, env,
# rich or config schema at the top; each command imports what it needs.
CONFIG_HELP = "a YAML file or a preset name (cairn presets)"
SET_HELP = "override one config key; the value is YAML (repeatable; cairn config --keys)"
TRUST_HELP = (
    "run the code this run's config names (imports, reward or feedback functions): only for "
    "a run you trust; runs you started yourself need no flag"
)

TRAIN_EPILOG = """\
--set KEY=VALUE changes one config key (the value is YAML; repeat it for more):
  cairn train sokoban_grpo --set rollout.group_size=4 --set env.options.size=5

common keys:
  env.name, env.options.KEY   the task (cairn.envs) and its options (not given: the env's own)
  model.path                  a local model folder, a Hugging Face hub id (org/name, read from the
                              local cache when offline) or smollm2-135m-instruct; null: tiny model
  advantage.name              the estimator: gigpo, grpo, rloo, gae, ... (cairn config --keys)
  rollout.groups, group_size  B task instances x G episodes per iteration
  train.iterations, train.time_budget_s, optim.lr, seed, out_dir
  imports                     your modules that register envs/rewards: 'imports=[my_pkg.tasks]'
every key with its default and help: cairn config --keys; a resolved config: cairn config CONFIG

the progress line, one per iteration:
  it    iteration             ep    episodes sampled so far
  succ  rollout success rate  ret   mean episode return (env reward - penalty + shaped)
  inv   share of invalid actions (unparsable, or refused by the env)
  blind  share of task-blind episodes (the env's own test: a repeated or no-op move,
         the example's answer copied, an expression that ignores the target)
  lvl   curriculum level (0: the easiest; curriculum.name set)
  ent   policy entropy per action token     kl    KL to the reference policy
  clip  share of tokens clipped by PPO      s/it  seconds of the iteration
  eval  greedy success on held-out tasks    last: the budget used (s/time_budget_s, or it)
"""


def _console() -> Console:
    """The console every message goes through (rich, imported on first use)."""
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        _CONSOLE = Console(highlight=False, soft_wrap=True)
    return _CONSOLE


_CONSOLE: Console | None = None


def say(text: str, style: str | None = None) -> None:
    """Print ``text`` as it is (its brackets escaped, never read as console markup), in
    ``style`` (e.g. "red") if given."""
    from rich.markup import escape

    body = escape(text)
    _console().print(f"[{style}]{body}[/{style}]" if style else body)


def _version() -> str:
    """The installed distribution's version (package metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cairn-rl")
    except PackageNotFoundError:
        from cairn import __version__

        return __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cairn", description="RL for multi-turn LLM agents.")
    p.add_argument("--version", action="version", version=f"cairn {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser(
        "train",
        help="train a policy (no CONFIG: the GiGPO sokoban demo)",
        description="Train a policy: a run folder out_dir/<name>-s<seed>-<time> with "
        "config.yaml, metrics.jsonl, trajectories, checkpoints and plots.",
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("config", nargs="?", help=CONFIG_HELP)
    t.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    t.add_argument("--trust-code", action="store_true", help=f"with --resume: {TRUST_HELP}")

    e = sub.add_parser(
        "eval", help="greedy evaluation of a run's newest checkpoint (reads the run only)"
    )
    e.add_argument("run_dir")
    e.add_argument("--episodes", type=int, default=None, help="held-out episodes")
    e.add_argument(
        "--out", default=None, help="result file (default RUN_DIR/eval/<ckpt>-<episodes>.json)"
    )
    e.add_argument("--trust-code", action="store_true", help=TRUST_HELP)

    c = sub.add_parser("compare", help="train configs on several seeds and compare curves")
    c.add_argument("configs", nargs="+", help=CONFIG_HELP)
    c.add_argument("--seeds", type=int, default=3)
    c.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )
    c.add_argument("--target", type=float, default=None, help="success target (eval.target)")
    c.add_argument("--out", default=None, help="output folder (default runs/compare-<time>)")
    c.add_argument("--jobs", type=int, default=1, help="runs in parallel (1 thread each)")

    i = sub.add_parser(
        "inspect", help="write a self-contained HTML report of a run (or of a compare folder)"
    )
    i.add_argument("run_dir", help="a run directory, or a cairn compare output folder")
    i.add_argument("--out", default=None, help="report file (default RUN_DIR/report.html)")
    i.add_argument("--iterations", type=int, default=None, help="at most M iterations shown")
    i.add_argument("--groups", type=int, default=None, help="at most K groups per iteration")
    i.add_argument("--episodes", type=int, default=None, help="at most E episodes per group")
    i.add_argument("--serve", action="store_true", help="serve it on 127.0.0.1 until Ctrl-C")
    i.add_argument("--port", type=int, default=0, help="port for --serve (0: any free one)")
    i.add_argument(
        "--serve-seconds", type=float, default=None, help="stop serving after this many seconds"
    )
    i.add_argument("--trust-code", action="store_true", help=TRUST_HELP)

    r = sub.add_parser(
        "ttrl", help="test-time RL (LADDER): train on one problem's variants, then restore"
    )
    r.add_argument("config", help="a config (file or preset) whose env takes the problem")
    r.add_argument("--problem", required=True, help="the test problem, e.g. 'x*exp(x)'")
    r.add_argument("--from", dest="source", metavar="RUN_DIR", help="start from a run's weights")
    r.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )

    g = sub.add_parser(
        "config",
        help="print a resolved config, or every key with its help",
        description="Print the config CONFIG resolves to (defaults, file, --set) as YAML that "
        "loads back to it; checks the keys and values, not the registries (cairn train does). "
        "With a pretrained model (model.path) the tiny model's keys left at their defaults "
        "are not shown.",
    )
    g.add_argument("config", nargs="?", help=CONFIG_HELP)
    g.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )
    g.add_argument("--keys", action="store_true", help="list every key, default and help")

    sub.add_parser("presets", help="list the shipped presets with a one-line description")
    x = sub.add_parser(
        "export", help="write a run's trained model (or LoRA adapter) as a Hugging Face folder"
    )
    x.add_argument("run_dir", help="a run directory (its newest checkpoint is exported)")
    x.add_argument("out", help="the folder to write (must not exist or be empty)")
    x.add_argument("--merge", action="store_true", help="LoRA runs: fold the adapters in")
    x.add_argument("--force", action="store_true", help="replace OUT when it is not empty")
    x.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    verl_data.add_parser(sub)
    return p


def cmd_train(args: argparse.Namespace) -> int:
    from cairn.train.config import load_config

    if args.resume:  # one writer per run: run.lock is held from the config check to the end
        run_dir = Path(args.resume)
        _check_run_folder(run_dir, args.config)
        _consent(run_dir, "train --resume", args.trust_code, args.overrides)
        ckpt = _resumable(run_dir)
        with _locked(run_dir):
            return _train(_resume_config(run_dir, ckpt, args.overrides), run_dir, resume=True)
    if args.trust_code:
        raise ConfigError(
            "--trust-code applies to --resume RUN_DIR (a new run imports the code its config "
            "names: you named it)"
        )
    cfg = load_config(args.config, args.overrides)  # before torch is imported: errors are quick
    from cairn.train.setup import new_run_dir

    return _train(cfg, new_run_dir(cfg), resume=False)


def _train(cfg: Config, run_dir: Path, resume: bool) -> int:
    from cairn.train.trainer import Trainer

    _check_device(cfg.model.device)
    with _signals_interrupt():
        trainer = _start(lambda: Trainer(cfg, run_dir, resume=resume), run_dir)
        say(f"run directory: {run_dir}")
        with _interrupt_names(run_dir):
            summary = _run(trainer, run_dir)
    # one rank draws (under torchrun every rank runs this)
    failed = _plot("plot_run", trainer.dir) if trainer.dist.is_main else None
    say(
        f"untrained success {_fmt(summary['untrained_success'])} -> "
        f"eval success {_fmt(summary['eval_success'])} after {summary['episodes']} episodes, "
        f"{summary['train_seconds']:.0f} s of training ({summary['wall_seconds']:.0f} s wall)"
    )
    say(f"run: {run_dir.name}  ({run_dir})")
    if failed is None:
        return 0
    say(
        f"plotting failed ({failed}): curves.png not written; the run in {run_dir} is "
        "complete (exit status 1)",
        "yellow",
    )
    return 1


def _plot(figure: str, *args: Any) -> str | None:
    """``cairn.report.plots.<figure>(*args)`` once the results are on disk; None when it
    drew, else its error on one line (the caller says it, never a traceback). Plots are
    drawn here, not by the trainer (train/ never imports report/)."""
    try:
        from cairn.report import plots

        getattr(plots, figure)(*args)
    except Exception as err:
        return " ".join(str(err).split()) or type(err).__name__
    return None


def cmd_eval(args: argparse.Namespace) -> int:
    """Read-only: writes RUN_DIR/eval/<checkpoint>-<episodes>.json (or --out), nothing else."""
    _consent(Path(args.run_dir), "eval", args.trust_code)
    from cairn.train.evaluate import evaluate_run

    out = Path(args.out) if args.out else None
    try:
        result, path = evaluate_run(Path(args.run_dir), args.episodes, out)
    except Exception as err:  # any loader's error (safetensors, transformers, peft): one line
        if isinstance(err, ConfigError | EnvFault | EnvFaultRateError):
            raise
        raise RunNotStarted(
            f"cannot evaluate {args.run_dir}: {' '.join(str(err).split())}"
        ) from err
    print(json.dumps(result, indent=2))
    say(f"written: {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Read-only on the run: writes OUT only (cairn.train.export)."""
    _consent(Path(args.run_dir), "export", args.trust_code)
    from cairn.train.export import ExportError, export_run

    try:
        done = export_run(Path(args.run_dir), Path(args.out), merge=args.merge, force=args.force)
    except ExportError as err:
        _error_line(str(err))
        return 2
    what = {"model": "model", "merged": "merged model", "adapter": "LoRA adapter"}[done.kind]
    say(f"{what} of {done.checkpoint} written to {done.out}")
    if done.base is not None:
        say(f"its base model: {done.base}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from datetime import datetime

    from cairn.train.compare import compare

    out = Path(args.out or f"runs/compare-{datetime.now():%Y%m%d-%H%M%S}")
    summary = compare(args.configs, args.seeds, out, args.overrides, args.target, args.jobs)
    failed = _plot("plot_compare_dir", summary, out)
    if failed is not None:
        say(f"plotting failed: {failed}", "yellow")
    plotted = failed is None and (out / "curves.png").is_file()
    from rich.table import Table

    table = Table(title=f"episodes to success {summary['target']}")
    for col in ("config", "episodes to target", "reached", "final success"):
        table.add_column(col)
    for name, c in summary["configs"].items():
        mean = c["episodes_to_target_mean"]
        ci = c["final_success_ci95"]
        table.add_row(
            name,
            "-" if mean is None else f"{mean:.0f}",
            c["reached"],
            f"{c['final_success_mean']:.3f}" + ("" if ci is None else f" ± {ci:.3f}"),
        )
    _console().print(table)
    say(f"results: {out}/compare.md" + (f", {out}/curves.png" if plotted else ""))
    reported = True
    try:
        from cairn.report.html import build_compare_report

        say(f"report: {build_compare_report(out)}")
    except Exception as err:  # the HTML form never loses the comparison's results
        say(f"HTML report failed: {err}", "yellow")
        reported = False
    if plotted and reported:
        return 0
    missing = [n for n, ok in (("curves.png", plotted), ("compare.html", reported)) if not ok]
    say(
        f"{' and '.join(missing)} not written; the results in {out}/compare.json "
        "and compare.md are complete (exit status 1)",
        "yellow",
    )
    return 1


def cmd_inspect(args: argparse.Namespace) -> int:
    from dataclasses import replace

    run_dir = Path(args.run_dir)
    _consent(run_dir, "inspect", args.trust_code)
    from cairn.report.html import build_compare_report, build_report, sampling_of, serve

    if args.serve and not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: allowed 0..65535 (0: any free port)")
    try:
        if (run_dir / "compare.json").exists() and not (run_dir / "config.yaml").exists():
            path = build_compare_report(run_dir, args.out and Path(args.out))
        else:
            flags = {"iterations": args.iterations, "groups": args.groups}
            flags["episodes"] = args.episodes
            given = {k: v for k, v in flags.items() if v is not None}
            sampling = replace(sampling_of(run_dir), **given)
            path = build_report(run_dir, args.out and Path(args.out), sampling)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    except OSError as err:  # e.g. a read-only run folder: the report cannot be written there
        where = f" {err.filename}" if err.filename else ""
        raise ConfigError(
            f"cannot inspect {run_dir}: {err.strerror or err}{where} (a read-only run: "
            "write the report elsewhere with --out FILE)"
        ) from None
    print(path, flush=True)
    if args.serve:
        ready = lambda url, _: say(f"serving {url}  (Ctrl-C stops)")  # noqa: E731
        try:
            serve(path, args.port, seconds=args.serve_seconds, ready=ready)
        except OSError as err:
            raise ConfigError(f"--port {args.port}: cannot serve there ({err.strerror})") from None
    return 0


def cmd_ttrl(args: argparse.Namespace) -> int:
    """LADDER's test-time RL: variants of one problem, RL on them, greedy answer, restore."""
    from cairn.exploration.variants import test_time_rl
    from cairn.train.checkpoint.read import latest_checkpoint
    from cairn.train.config import load_config
    from cairn.train.setup import new_run_dir
    from cairn.train.trainer import Trainer

    problem = json.dumps(args.problem)  # a quoted YAML string
    overrides = [
        f"env.options.integrand={problem}",
        "exploration.variants.enabled=true",
        f"exploration.variants.problems=[{problem}]",
        "eval.episodes=1",
        "eval.at_start=true",
    ]
    if args.source:
        ckpt = latest_checkpoint(Path(args.source))
        if ckpt is None:
            raise ConfigError(f"--from {args.source}: no checkpoint there")
        overrides.append(f"model.path={json.dumps(str(ckpt.path))}")
    cfg = load_config(args.config, [*overrides, *args.overrides])
    _check_device(cfg.model.device)
    run_dir = new_run_dir(cfg)
    say(f"test-time RL on {args.problem!r}: {run_dir}")
    with _signals_interrupt(), _interrupt_names(run_dir):
        summary = test_time_rl(lambda: _start(lambda: Trainer(cfg, run_dir), run_dir))
    if (failed := _plot("plot_run", run_dir)) is not None:
        say(f"plotting failed: {failed}", "yellow")
    say(
        f"solved before: {_fmt(summary['untrained_success'])}, after test-time RL: "
        f"{_fmt(summary['eval_success'])}; weights restored: {summary['weights_restored']}"
    )
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Plain text, no rich markup: the printed YAML loads back to the same config."""
    import yaml

    from cairn.train.config import load_config
    from cairn.train.schema import TINY_MODEL_KEYS, describe

    if args.keys:
        for key, default, help_ in describe():
            print(f"{key} = {default!r}  # {help_}")
        return 0
    cfg = load_config(args.config, args.overrides, check=False)  # data: no registry, no torch
    data = cfg.model_dump()
    if cfg.model.path is not None:  # a pretrained model: the tiny model's keys do not apply
        fields = type(cfg.model).model_fields
        for key in TINY_MODEL_KEYS:
            if data["model"][key] == fields[key].default:  # a given value stays (it warns)
                del data["model"][key]
    sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from cairn.train.presets import available_presets, preset_description

    names = available_presets()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {preset_description(name)}")
    return 0


# -- starting and stopping a run -------------------------------------------------------------
class RunNotStarted(Exception):
    """A run that failed while being set up (model, tokenizer, envs, device)."""


class RunStopped(Exception):
    """A run stopped by an OS error while it wrote (disk full, a read-only folder): one line
    naming the error and the intact checkpoint to resume from."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run; carries the run directory for the resume hint."""

    def __init__(self, run_dir: Path, signame: str = "SIGINT"):
        super().__init__(str(run_dir))
        self.run_dir, self.signame = run_dir, signame


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the run is (handled like Ctrl-C: checkpoints stay
    intact)."""

    def __init__(self, signame: str = "SIGTERM"):
        super().__init__(signame)
        self.signame = signame


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal or ssh session) stop a run like Ctrl-C (a
    message, the checkpoint intact, resumable); only where handlers can be set (the main
    thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name)

    stops = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {sig: signal.signal(sig, terminate) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(trainer: Trainer, run_dir: Path) -> dict[str, Any]:
    """``trainer.run()``; an OS error while it writes (ENOSPC, EROFS) is one line naming the
    intact checkpoint (checkpoints and config.yaml are written atomically; a torn metrics
    line is dropped on resume)."""
    from cairn.train.divergence import TrainingDiverged

    try:
        return trainer.run()
    except TrainingDiverged as err:
        if os.environ.get("CAIRN_TRACEBACK"):
            raise
        raise RunStopped(f"{err}; {_diverged_hint(run_dir)}") from err
    except OSError as err:
        if os.environ.get("CAIRN_TRACEBACK"):
            raise
        where = f": {err.filename}" if err.filename else ""
        raise RunStopped(
            f"the run stopped: {err.strerror or err}{where}; {_resume_hint(run_dir)}"
        ) from err


def _check_run_folder(run_dir: Path, config: str | None) -> None:
    """Refuse, for a resume, a second config and a folder that is not a run (a FIFO for a
    run file would hang it); reads nothing but file types, imports nothing."""
    if config is not None:
        raise ConfigError(
            f"--resume {run_dir} continues that run with its own config.yaml; drop {config!r} "
            "(change a key with --set, or start a new run without --resume)"
        )
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a run directory)")
    try:
        for name in ("config.yaml", "metrics.jsonl", "summary.json", "amendments.jsonl"):
            check_regular(run_dir / name, root=run_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--resume {run_dir}: {err}") from None


def _consent(run_dir: Path, command: str, trust: bool, overrides: list[str] | None = None) -> None:
    """Refuse in one line, before anything it names is imported, a run whose config names
    user code the reader has not consented to (cairn.train.trust); a resume's ``--set``
    names are consent, and are remembered for that run."""
    from cairn.train.trust import record_run, require_consent

    resume = overrides is not None
    given = require_consent(
        run_dir, command, trust=trust, overrides=overrides or [], amendments=resume
    )
    record_run(run_dir, given)


def _resumable(run_dir: Path) -> Checkpoint:
    """The checkpoint to resume ``run_dir`` from (``_check_run_folder`` passed); refuses a
    run with no checkpoint (nothing is written to refuse it)."""
    try:
        ckpt = _quiet_latest(run_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--resume {run_dir}: {err}") from None
    if ckpt is None:
        raise ConfigError(
            f"--resume {run_dir}: no checkpoint there (the run stopped before its first); "
            "start it again without --resume"
        )
    return ckpt


def _quiet_latest(run_dir: Path) -> Checkpoint | None:
    """``latest_checkpoint(run_dir)`` without its CheckpointWarning: the CLI looks the
    checkpoint up to check the run before the trainer does; the trainer's look-up, which
    loads it, is the one that says what was skipped."""
    from cairn.train.checkpoint.layout import CheckpointWarning
    from cairn.train.checkpoint.read import latest_checkpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)
        return latest_checkpoint(run_dir)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s run.lock (RunLocked names the holder's pid)."""
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except OSError as err:
        raise ConfigError(f"--resume {run_dir}: cannot lock the run ({err.strerror})") from None
    try:
        yield
    finally:
        lock.release()


def _resume_config(run_dir: Path, ckpt: Checkpoint, overrides: list[str]) -> Config:
    """The config to resume with, checked against the checkpoint
    (``Checkpoint.resume_config``); read under the lock, so the checkpoint is the one the
    trainer will load."""
    try:
        ckpt = _quiet_latest(run_dir) or ckpt
    except (OSError, ValueError) as err:
        raise ConfigError(f"--resume {run_dir}: {err}") from None
    return ckpt.resume_config(overrides)


def _check_device(device: str) -> None:
    """model.device names a device this machine has."""
    import torch

    allowed = "allowed: cpu, cuda, cuda:N, mps"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(f"model.device = {device!r}: {err}; {allowed}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (dev.index is not None and dev.index >= n):
            have = f"cuda:0..cuda:{n - 1}" if n else "no CUDA device"
            raise ConfigError(f"model.device = {device!r}: this machine has {have}; {allowed}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model.device = {device!r}: MPS is not available here; {allowed}")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"model.device = {device!r}: unsupported device type; {allowed}")


def _start(build: Callable[[], Any], run_dir: Path) -> Any:
    """``build()`` the Trainer; a failure leaves no folder behind for a run that never began
    and is one line (RunNotStarted), not a traceback."""
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # folders it may create
    try:
        return build()
    except BaseException as err:
        if made:
            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in made[1:]:  # e.g. out_dir, if new and still empty
                with suppress(OSError):
                    parent.rmdir()
        if isinstance(err, Exception) and not isinstance(err, ConfigError):
            text = " ".join(str(err).split()) or type(err).__name__
            raise RunNotStarted(f"the run could not start: {text}") from err
        raise


@contextmanager
def _interrupt_names(run_dir: Path) -> Iterator[None]:
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt as err:
        raise Interrupted(run_dir, getattr(err, "signame", "SIGINT")) from None


def _interrupt_message(err: KeyboardInterrupt) -> str:
    signame = getattr(err, "signame", "SIGINT")
    what = "interrupted" if signame == "SIGINT" else f"terminated ({signame})"
    run_dir = getattr(err, "run_dir", None)
    if run_dir is None:
        return what
    ckpt = _intact_checkpoint(run_dir)
    if ckpt is None:
        return f"{what} before the first checkpoint of {run_dir}: nothing to resume"
    return f"{what}: {ckpt} is intact; resume with cairn train --resume {run_dir}"


def _diverged_hint(run_dir: Path) -> str:
    ckpt = _intact_checkpoint(run_dir)
    if ckpt is None:
        return f"no checkpoint of {run_dir} yet: start again with a lower optim.lr"
    return (
        f"{ckpt} (written before) is intact; resume with cairn train --resume {run_dir} "
        "--set optim.lr=<lower>"
    )


def _resume_hint(run_dir: Path) -> str:
    ckpt = _intact_checkpoint(run_dir)
    if ckpt is None:
        return f"no checkpoint of {run_dir} yet: nothing to resume"
    return f"{ckpt} is intact; resume with cairn train --resume {run_dir}"


def _intact_checkpoint(run_dir: Path) -> str | None:
    """The name of the checkpoint a resume of ``run_dir`` would use, or None."""
    from cairn.train.checkpoint.read import latest_checkpoint

    try:
        ckpt = latest_checkpoint(run_dir)
    except (OSError, ValueError):
        return None
    return None if ckpt is None else ckpt.name


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _error_line(text: str) -> None:
    """``error: TEXT`` on stdout, "error:" in red on a terminal (as rich would print it,
    without importing rich: a config error answers at once); ``TEXT`` printed as it is."""
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    head = "\033[31merror:\033[0m" if color else "error:"
    print(f"{head} {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "train": cmd_train,
        "eval": cmd_eval,
        "compare": cmd_compare,
        "inspect": cmd_inspect,
        "ttrl": cmd_ttrl,
        "config": cmd_config,
        "presets": cmd_presets,
        "export": cmd_export,
        "verl-data": verl_data.command,
    }
    one_line = (
        ConfigError, RunNotStarted, RunStopped, RunLocked, EnvFaultRateError, EnvFault, UnsafeFile
    )  # fmt: skip
    try:
        return handler[args.command](args)
    except one_line as err:  # one line; an EnvFault here came from an env call outside a
        if os.environ.get("CAIRN_TRACEBACK"):  # rollout (warm-up, curriculum build)
            raise
        _error_line(str(err))
        return 2
    except KeyboardInterrupt as err:
        say(_interrupt_message(err), "yellow")
        return _SIGNAL_STATUS.get(getattr(err, "signame", "SIGINT"), 130)
    except BrokenPipeError:  # the reader went away (cairn config --keys | head): quietly
        _silence_stdout()
        return 0


_SIGNAL_STATUS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}  # 128 + the signal number


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no broken pipe."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
