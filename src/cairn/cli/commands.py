"""The commands of the command line, one function each (``cmd_<command>(args)``): each
imports what it needs when it runs, so that the CLI answers ``--version``, ``presets`` and
a config error at once."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cairn._env_host import EnvFault, EnvFaultRateError
from cairn._errors import ConfigError
from cairn.cli.output import console, error_line, fmt, say
from cairn.cli.supervise import (
    RunNotStarted,
    check_device,
    check_run_folder,
    consent,
    interrupt_names,
    locked,
    resumable,
    resume_config,
    run_trainer,
    signals_interrupt,
    start_trainer,
)

if TYPE_CHECKING:
    from cairn.train.schema import Config

__all__ = [
    "cmd_compare",
    "cmd_config",
    "cmd_eval",
    "cmd_export",
    "cmd_inspect",
    "cmd_presets",
    "cmd_train",
    "cmd_ttrl",
]


def cmd_train(args: argparse.Namespace) -> int:
    from cairn.train.config import load_config

    if args.resume:  # one writer per run: run.lock is held from the config check to the end
        run_dir = Path(args.resume)
        check_run_folder(run_dir, args.config)
        consent(run_dir, "train --resume", args.trust_code, args.overrides)
        ckpt = resumable(run_dir)
        with locked(run_dir):
            return _train(resume_config(run_dir, ckpt, args.overrides), run_dir, resume=True)
    if args.trust_code:
        raise ConfigError(
            "--trust-code applies to --resume RUN_DIR (a new run imports the code its config "
            "names: you named it)"
        )
    cfg = load_config(args.config, args.overrides)  # before torch is imported: errors are quick
    from cairn.train.rundir import new_run_dir

    return _train(cfg, new_run_dir(cfg), resume=False)


def _train(cfg: Config, run_dir: Path, resume: bool) -> int:
    from cairn.train.trainer import Trainer

    check_device(cfg.model.device)
    with signals_interrupt():
        # load_config / resume_config ran the preflight on cfg: the Trainer need not again
        trainer = start_trainer(lambda: Trainer(cfg, run_dir, resume=resume, checked=True), run_dir)
        say(f"run directory: {run_dir}")
        with interrupt_names(run_dir):
            summary = run_trainer(trainer, run_dir)
    # one rank draws (under torchrun every rank runs this)
    failed = _plot("plot_run", trainer.dir) if trainer.dist.is_main else None
    say(
        f"untrained success {fmt(summary['untrained_success'])} -> "
        f"eval success {fmt(summary['eval_success'])} after {summary['episodes']} episodes, "
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


def _plot(figure: str, *args: object) -> str | None:
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
    consent(Path(args.run_dir), "eval", args.trust_code)
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
    consent(Path(args.run_dir), "export", args.trust_code)
    from cairn.train.export import ExportError, export_run

    try:
        done = export_run(Path(args.run_dir), Path(args.out), merge=args.merge, force=args.force)
    except ExportError as err:
        error_line(str(err))
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
    console().print(table)
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
    consent(run_dir, "inspect", args.trust_code)
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
    from cairn.train.rundir import new_run_dir
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
    check_device(cfg.model.device)
    run_dir = new_run_dir(cfg)
    say(f"test-time RL on {args.problem!r}: {run_dir}")
    with signals_interrupt(), interrupt_names(run_dir):
        summary = test_time_rl(  # load_config ran the preflight on cfg
            lambda: start_trainer(lambda: Trainer(cfg, run_dir, checked=True), run_dir)
        )
    if (failed := _plot("plot_run", run_dir)) is not None:
        say(f"plotting failed: {failed}", "yellow")
    say(
        f"solved before: {fmt(summary['untrained_success'])}, after test-time RL: "
        f"{fmt(summary['eval_success'])}; weights restored: {summary['weights_restored']}"
    )
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Plain text, no rich markup: the printed YAML loads back to the same config."""
    import yaml

    from cairn.train.config import load_config
    from cairn.train.rollout_sections import TINY_MODEL_KEYS
    from cairn.train.schema import describe

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
