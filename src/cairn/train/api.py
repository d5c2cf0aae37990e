"""The Python API: ``cairn.train(config)`` trains one run and returns where it went.

    import cairn

    result = cairn.train("countdown_gigpo", overrides=["train.iterations=2"])
    result.run_dir, result.summary["eval_success"]

    class Printer(cairn.train.Callback):
        def on_iteration(self, metrics):            # one metrics row per iteration
            print(metrics["iteration"], metrics["rollout/success"])

    cairn.train({"env": {"name": "countdown"}, "train": {"iterations": 2}}, callbacks=[Printer()])

``config`` is a ``Config``, a dict (validated like a YAML file), or a path / preset name
(``load_config``); ``overrides`` are ``--set`` strings applied to a dict, a path or a
preset. The run directory is ``run_dir`` when given, else ``out_dir/<name>-s<seed>-<time>``
as ``cairn train`` makes it; the run writes there exactly what ``cairn train`` writes
(plots aside: ``cairn.report.plots.plot_run(run_dir)`` draws them).

Callbacks (``callbacks=[...]``) see the run as it goes: ``on_train_start(trainer)``, then
``on_iteration(metrics)`` with each iteration's metrics row (what metrics.jsonl gets, held-
out ``eval/`` keys included where an evaluation ran), then ``on_train_end(summary)``. A
callback may define any subset of the three; a plain function is an ``on_iteration``.
An exception raised by a callback stops the run (its lock released), as any error does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.train.config import load_config, validate_config
from cairn.train.configfile import apply_overrides
from cairn.train.schema import Config

if TYPE_CHECKING:
    from cairn.train.trainer import Trainer

__all__ = ["Callback", "TrainResult", "train"]


class Callback:
    """Hooks into a run; override the ones you need (each does nothing by default)."""

    def on_train_start(self, trainer: Trainer) -> None:
        """Called once the trainer is built, before the first rollout."""

    def on_iteration(self, metrics: dict[str, Any]) -> None:
        """Called with each iteration's metrics row (JSON-safe: NaN and inf are None)."""

    def on_train_end(self, summary: dict[str, Any]) -> None:
        """Called with the run's summary (summary.json) when the run has finished."""


class _FunctionCallback(Callback):
    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self.fn = fn

    def on_iteration(self, metrics: dict[str, Any]) -> None:
        self.fn(metrics)


@dataclass(frozen=True)
class TrainResult:
    """Where a run went and how it ended: ``run_dir`` and its ``summary`` (summary.json)."""

    run_dir: Path
    summary: dict[str, Any]


def resolve(
    config: Config | Mapping[str, object] | str | Path, overrides: Sequence[str] = ()
) -> Config:
    """The Config that ``config`` names (a Config, a dict, a path or a preset name)."""
    if isinstance(config, Config):
        if overrides:
            raise ValueError("overrides apply to a dict, a path or a preset name, not a Config")
        return config
    if isinstance(config, Mapping):  # the Trainer runs the preflight (check_config) once
        data = apply_overrides(_plain(config), list(overrides))
        return validate_config(data, check=False)
    if isinstance(config, str | Path):
        return load_config(config, list(overrides), check=False)
    raise TypeError(
        f"config must be a Config, a dict, a path or a preset name, got {type(config).__name__}"
    )


def _plain(data: Mapping[str, object]) -> dict[str, object]:
    """A deep copy of nested mappings as dicts (overrides then never touch the caller's)."""
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def _as_callback(cb: object) -> Any:
    if any(hasattr(cb, h) for h in ("on_train_start", "on_iteration", "on_train_end")):
        return cb
    if callable(cb):
        return _FunctionCallback(cb)
    raise TypeError(f"a callback has on_iteration / on_train_start / on_train_end: {cb!r}")


def train(
    config: Config | Mapping[str, object] | str | Path,
    overrides: Sequence[str] = (),
    *,
    run_dir: str | Path | None = None,
    callbacks: Sequence[object] = (),
    resume: bool = False,
) -> TrainResult:
    """Train one run from ``config`` (module docstring); returns its folder and summary.

    ``resume``: continue the run in ``run_dir`` from its last checkpoint (the config given
    must be the run's, as with ``cairn train --resume``)."""
    from cairn.train.rundir import new_run_dir
    from cairn.train.trainer import Trainer

    cfg = resolve(config, overrides)
    hooks = [_as_callback(cb) for cb in callbacks]
    if resume and run_dir is None:
        raise ValueError("resume needs the run_dir of the run to continue")
    folder = Path(run_dir) if run_dir is not None else new_run_dir(cfg)
    trainer = Trainer(cfg, folder, resume=resume)
    trainer.log.callbacks.extend(h for h in hooks if hasattr(h, "on_iteration"))
    for hook in hooks:
        if hasattr(hook, "on_train_start"):
            hook.on_train_start(trainer)
    summary = trainer.run()
    for hook in hooks:
        if hasattr(hook, "on_train_end"):
            hook.on_train_end(summary)
    return TrainResult(trainer.dir, summary)
