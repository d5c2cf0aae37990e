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
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from cairn._env_host import EnvFault, EnvFaultRateError
from cairn._errors import ConfigError
from cairn._files import UnsafeFile
from cairn.cli import allocator, commands
from cairn.cli.output import error_line, say
from cairn.cli.supervise import RunNotStarted, RunStopped, interrupt_message
from cairn.data.rundir import RunLocked
from cairn.integrations.verl import data as verl_data

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]  # add_subparsers' result

__all__ = ["main"]

# Start-up: `cairn --version`, `presets`, `config`, `--help` and a config error answer in well
# under 0.5 s (benchmarks/speed/cli_speed.py), so this package imports no torch, transformers,
# env, rich or config schema at the top; each command imports what it needs (cli/commands.py).
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
    for add in (_train, _eval, _compare, _inspect, _ttrl, _config, _presets, _export):
        add(sub)
    verl_data.add_parser(sub)
    return p


def _overrides(p: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE``, repeatable, into ``args.overrides``."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )


def _train(sub: Subparsers) -> None:
    t = sub.add_parser(
        "train",
        help="train a policy (no CONFIG: the GiGPO sokoban demo)",
        description="Train a policy: a run folder out_dir/<name>-s<seed>-<time> with "
        "config.yaml, metrics.jsonl, trajectories, checkpoints and plots.",
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("config", nargs="?", help=CONFIG_HELP)
    _overrides(t)
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    t.add_argument("--trust-code", action="store_true", help=f"with --resume: {TRUST_HELP}")


def _eval(sub: Subparsers) -> None:
    e = sub.add_parser(
        "eval", help="greedy evaluation of a run's newest checkpoint (reads the run only)"
    )
    e.add_argument("run_dir")
    e.add_argument("--episodes", type=int, default=None, help="held-out episodes")
    e.add_argument(
        "--out", default=None, help="result file (default RUN_DIR/eval/<ckpt>-<episodes>.json)"
    )
    e.add_argument("--trust-code", action="store_true", help=TRUST_HELP)


def _compare(sub: Subparsers) -> None:
    c = sub.add_parser("compare", help="train configs on several seeds and compare curves")
    c.add_argument("configs", nargs="+", help=CONFIG_HELP)
    c.add_argument("--seeds", type=int, default=3)
    _overrides(c)
    c.add_argument("--target", type=float, default=None, help="success target (eval.target)")
    c.add_argument("--out", default=None, help="output folder (default runs/compare-<time>)")
    c.add_argument("--jobs", type=int, default=1, help="runs in parallel (1 thread each)")


def _inspect(sub: Subparsers) -> None:
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


def _ttrl(sub: Subparsers) -> None:
    r = sub.add_parser(
        "ttrl", help="test-time RL (LADDER): train on one problem's variants, then restore"
    )
    r.add_argument("config", help="a config (file or preset) whose env takes the problem")
    r.add_argument("--problem", required=True, help="the test problem, e.g. 'x*exp(x)'")
    r.add_argument("--from", dest="source", metavar="RUN_DIR", help="start from a run's weights")
    _overrides(r)


def _config(sub: Subparsers) -> None:
    g = sub.add_parser(
        "config",
        help="print a resolved config, or every key with its help",
        description="Print the config CONFIG resolves to (defaults, file, --set) as YAML that "
        "loads back to it; checks the keys and values, not the registries (cairn train does). "
        "With a pretrained model (model.path) the tiny model's keys left at their defaults "
        "are not shown.",
    )
    g.add_argument("config", nargs="?", help=CONFIG_HELP)
    _overrides(g)
    g.add_argument("--keys", action="store_true", help="list every key, default and help")


def _presets(sub: Subparsers) -> None:
    sub.add_parser("presets", help="list the shipped presets with a one-line description")


def _export(sub: Subparsers) -> None:
    x = sub.add_parser(
        "export", help="write a run's trained model (or LoRA adapter) as a Hugging Face folder"
    )
    x.add_argument("run_dir", help="a run directory (its newest checkpoint is exported)")
    x.add_argument("out", help="the folder to write (must not exist or be empty)")
    x.add_argument("--merge", action="store_true", help="LoRA runs: fold the adapters in")
    x.add_argument("--force", action="store_true", help="replace OUT when it is not empty")
    x.add_argument("--trust-code", action="store_true", help=TRUST_HELP)


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": commands.cmd_train,
    "eval": commands.cmd_eval,
    "compare": commands.cmd_compare,
    "inspect": commands.cmd_inspect,
    "ttrl": commands.cmd_ttrl,
    "config": commands.cmd_config,
    "presets": commands.cmd_presets,
    "export": commands.cmd_export,
    "verl-data": verl_data.command,
}
#: Errors a command ends with as one line (exit status 2); an EnvFault here came from an env
#: call outside a rollout (warm-up, curriculum build).
_ONE_LINE = (
    ConfigError, RunNotStarted, RunStopped, RunLocked, EnvFaultRateError, EnvFault, UnsafeFile
)  # fmt: skip
_SIGNAL_STATUS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}  # 128 + the signal number


def main(argv: list[str] | None = None) -> int:
    """The ``cairn`` command. Run as the command (``argv`` None), a model command first
    executes itself again on mimalloc where it can (``cairn.cli.allocator``)."""
    if argv is None and sys.argv[1:2] and sys.argv[1] in allocator.MODEL_COMMANDS:
        try:
            allocator.reexec(["-m", "cairn.cli", *sys.argv[1:]])  # returns once re-executed
        except ValueError as err:  # a bad CAIRN_ALLOCATOR
            error_line(str(err))
            return 2
        allocator.settle()
    args = _parser().parse_args(argv)
    try:
        return _HANDLERS[args.command](args)
    except _ONE_LINE as err:
        if os.environ.get("CAIRN_TRACEBACK"):
            raise
        error_line(str(err))
        return 2
    except KeyboardInterrupt as err:
        say(interrupt_message(err), "yellow")
        return _SIGNAL_STATUS.get(getattr(err, "signame", "SIGINT"), 130)
    except BrokenPipeError:  # the reader went away (cairn config --keys | head): quietly
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no broken pipe."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
