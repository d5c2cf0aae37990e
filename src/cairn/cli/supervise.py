"""Supervising a run from the command line: starting it, stopping it, and the one line each
way it can end with.

- Start: ``check_run_folder``, ``consent`` and ``resumable`` refuse a resume that cannot
  work before anything is imported or written; ``locked`` holds the run's lock from the
  config check to the end; ``check_device`` refuses a device this machine lacks;
  ``start_trainer`` builds the Trainer and leaves no folder behind for a run that never
  began (``RunNotStarted``).
- Stop: SIGTERM and SIGHUP are handled like Ctrl-C (``signals_interrupt``:
  ``Terminated``), and an interrupt carries the run folder (``interrupt_names``:
  ``Interrupted``) for ``interrupt_message``, which names the intact checkpoint to resume
  from. ``run_trainer`` turns divergence and an OS error while the run writes (a full
  disk) into ``RunStopped`` with the same hint.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from cairn._errors import ConfigError
from cairn._files import check_regular
from cairn.data.rundir import RunLock

if TYPE_CHECKING:
    from cairn.train.checkpoint.read import Checkpoint
    from cairn.train.schema import Config
    from cairn.train.trainer import Trainer

__all__ = [
    "Interrupted",
    "RunNotStarted",
    "RunStopped",
    "Terminated",
    "check_device",
    "check_run_folder",
    "consent",
    "interrupt_message",
    "interrupt_names",
    "locked",
    "resumable",
    "resume_config",
    "run_trainer",
    "signals_interrupt",
    "start_trainer",
]

T = TypeVar("T")


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


# -- before a run ------------------------------------------------------------------------------
def check_run_folder(run_dir: Path, config: str | None) -> None:
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


def consent(run_dir: Path, command: str, trust: bool, overrides: list[str] | None = None) -> None:
    """Refuse in one line, before anything it names is imported, a run whose config names
    user code the reader has not consented to (cairn.train.trust); a resume's ``--set``
    names are consent, and are remembered for that run."""
    from cairn.train.trust import record_run, require_consent

    resume = overrides is not None
    given = require_consent(
        run_dir, command, trust=trust, overrides=overrides or [], amendments=resume
    )
    record_run(run_dir, given)


def resumable(run_dir: Path) -> Checkpoint:
    """The checkpoint to resume ``run_dir`` from (``check_run_folder`` passed); refuses a
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
def locked(run_dir: Path) -> Iterator[None]:
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


def resume_config(run_dir: Path, ckpt: Checkpoint, overrides: list[str]) -> Config:
    """The config to resume with, checked against the checkpoint
    (``Checkpoint.resume_config``); read under the lock, so the checkpoint is the one the
    trainer will load."""
    try:
        ckpt = _quiet_latest(run_dir) or ckpt
    except (OSError, ValueError) as err:
        raise ConfigError(f"--resume {run_dir}: {err}") from None
    return ckpt.resume_config(overrides)


def check_device(device: str) -> None:
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


def start_trainer(build: Callable[[], T], run_dir: Path) -> T:
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


# -- during a run ------------------------------------------------------------------------------
@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal or ssh session) stop a run like Ctrl-C (a
    message, the checkpoint intact, resumable); only where handlers can be set (the main
    thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signal.Signals(signum).name)

    stops = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {sig: signal.signal(sig, terminate) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def interrupt_names(run_dir: Path) -> Iterator[None]:
    """An interrupt inside reaches the caller as ``Interrupted``, naming ``run_dir``."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt as err:
        raise Interrupted(run_dir, getattr(err, "signame", "SIGINT")) from None


def run_trainer(trainer: Trainer, run_dir: Path) -> dict[str, Any]:
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


# -- after a run ended early -------------------------------------------------------------------
def interrupt_message(err: KeyboardInterrupt) -> str:
    """What an interrupt says: interrupted or terminated, and the checkpoint to resume from."""
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
