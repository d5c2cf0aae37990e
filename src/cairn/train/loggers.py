"""Metric loggers chosen by ``log.loggers``: TensorBoard, Weights & Biases, MLflow.

``metrics.jsonl`` is always written by `RunLog` (it is what resume, plots and reports
read), so ``jsonl`` in the list only names it. The others are optional extras:

    tensorboard  ->  RUN_DIR/tensorboard/   (torch.utils.tensorboard, else tensorboardX)
    wandb        ->  RUN_DIR/wandb/         (mode log.wandb_mode, default offline: no network;
                                             the WANDB_MODE environment variable overrides it)
    mlflow       ->  RUN_DIR/mlruns/        (local file store ``file:RUN_DIR/mlruns``, or the
                                             MLFLOW_TRACKING_URI environment variable)

A logger is an object with ``log(row, step)`` and ``close()``. Each row is one iteration's
metrics; only finite numbers are passed on, with ``step`` = the iteration. The run never
fails because a logger does: `LoggerSet` catches any exception of a logger (a missing
package at start included), warns once, and disables that logger for the rest of the run.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from cairn._registry import ImportRegistry

__all__ = [
    "EXTRAS",
    "LOGGERS",
    "Logger",
    "LoggerSet",
    "LoggerWarning",
    "available_loggers",
    "register_logger",
    "scalars",
]

# The pip extra that installs each optional logger: pip install 'cairn-rl[NAME]'.
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


class LoggerWarning(UserWarning):
    """A logger failed and was disabled; the run continues."""


class Logger(Protocol):
    def log(self, row: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


Factory = Callable[[Path, dict[str, Any]], Logger]
BUILT_IN = None  # the factory of "jsonl": metrics.jsonl is written by RunLog itself
LOGGERS = ImportRegistry(
    "logger",
    {
        "jsonl": "cairn.train.loggers:BUILT_IN",
        "tensorboard": ("cairn.train.loggers:_TensorBoard", EXTRAS["tensorboard"]),
        "wandb": ("cairn.train.loggers:_Wandb", EXTRAS["wandb"]),
        "mlflow": ("cairn.train.loggers:_Mlflow", EXTRAS["mlflow"]),
    },
)


def register_logger(name: str, factory: Factory) -> None:
    """Make ``name`` selectable in ``log.loggers``; ``factory(run_dir, config) -> Logger``."""
    if not name or not name.isidentifier():
        raise ValueError(f"logger name must be an identifier, got {name!r}")
    if name == "jsonl":
        raise ValueError("'jsonl' is built in and cannot be replaced")
    LOGGERS.entries[name] = (factory, None)  # a later registration replaces an earlier one


def available_loggers() -> list[str]:
    """Names allowed in ``log.loggers``."""
    return LOGGERS.available()


def scalars(row: Mapping[str, object]) -> dict[str, float]:
    """The finite numbers of a metrics row as floats (bools count; strings, None, NaN do not)."""
    out = {}
    for k, v in row.items():
        if hasattr(v, "item") and not isinstance(v, str):
            v = v.item()
        if isinstance(v, bool | int | float) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


class LoggerSet:
    """Fans rows out to the selected loggers; a failing one is warned about once and dropped.

    ``say``: where the warning is also shown (the run's console); ``warnings.warn`` always.
    """

    def __init__(
        self,
        names: Sequence[str],
        run_dir: Path,
        config: dict[str, Any] | None = None,
        say: Callable[[str], None] | None = None,
    ):
        self.run_dir, self.config, self._say = Path(run_dir), dict(config or {}), say
        self.active: dict[str, Logger] = {}
        self.failed: dict[str, str] = {}  # name -> the reason it was disabled
        for name in dict.fromkeys(names):  # keep order, drop repeats
            factory = LOGGERS.get(name)  # unknown: ValueError listing the available ones
            if factory is not None:
                self._guard(name, "start", partial(self._start, name, factory))

    def _start(self, name: str, factory: Factory) -> None:
        self.active[name] = factory(self.run_dir, self.config)

    def log(self, row: Mapping[str, object], step: int) -> None:
        values = scalars(row)
        for name, logger in list(self.active.items()):
            self._guard(name, "log", partial(logger.log, values, step))

    def close(self) -> None:
        for name, logger in list(self.active.items()):
            self._guard(name, "close", logger.close)
            self.active.pop(name, None)

    def _guard(self, name: str, action: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as err:
            self.active.pop(name, None)
            hint = ""
            if isinstance(err, ImportError) and name in EXTRAS:
                hint = f" (pip install 'cairn-rl[{EXTRAS[name]}]')"
            reason = f"{type(err).__name__}: {err}{hint}"
            self.failed[name] = reason
            text = f"logger {name!r} failed at {action} and is disabled: {reason}"
            warnings.warn(text, LoggerWarning, stacklevel=2)
            if self._say is not None:  # the console reads markup: [tensorboard] stays text
                from rich.markup import escape

                self._say(f"[yellow]{escape(text)}[/yellow]")


# -- the optional loggers -----------------------------------------------------------------------
class _TensorBoard:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            from tensorboardX import SummaryWriter  # type: ignore[no-redef,unused-ignore]
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if config:
            import yaml

            text = yaml.safe_dump(config, sort_keys=False)
            self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log(self, row: dict[str, float], step: int) -> None:
        for k, v in row.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _Wandb:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        import wandb

        log_cfg = config.get("log", {})
        mode = os.environ.get("WANDB_MODE") or log_cfg.get("wandb_mode", "offline")
        self.run = wandb.init(
            project=log_cfg.get("wandb_project", "cairn"),
            name=run_dir.name,
            dir=str(run_dir),
            config=config,
            mode=cast(Any, mode),  # wandb checks it: online, offline, disabled, shared
            reinit="create_new",
            settings=wandb.Settings(console="off", quiet=True, x_disable_stats=True),
        )

    def log(self, row: dict[str, float], step: int) -> None:
        self.run.log(row, step=step)

    def close(self) -> None:
        self.run.finish()


class _Mlflow:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or (run_dir / "mlruns").resolve().as_uri()
        # MLflow >= 3.x refuses a file store unless this opt-out is set (it is local and
        # needs no database, which is why cairn uses it); a user's own setting wins.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        name = str(config.get("name", "cairn"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # file store deprecation notice
            found = self.client.get_experiment_by_name(name)
            exp = found.experiment_id if found else self.client.create_experiment(name)
            self.run_id = self.client.create_run(exp, run_name=run_dir.name).info.run_id
        params = _flatten(config)
        keys = list(params)
        for i in range(0, len(keys), 100):  # MLflow takes at most 100 params per batch
            self._batch(params={k: params[k] for k in keys[i : i + 100]})

    def _batch(self, metrics: dict[str, float] | None = None, params=None, step: int = 0) -> None:
        import time

        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(k, v, now, step) for k, v in (metrics or {}).items()],
            params=[Param(k, str(v)[:500]) for k, v in (params or {}).items()],
        )

    def log(self, row: dict[str, float], step: int) -> None:
        self._batch(metrics=row, step=step)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
